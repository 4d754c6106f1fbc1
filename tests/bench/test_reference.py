"""The side-by-side bench without the reference installed: the fidelity figures on small
fixtures, the ratio rows, and the "reference missing -> no ratio" path (the reference's records
read: test_tfrecord_reading.py). Nothing is installed and nothing is fetched."""

from __future__ import annotations

import math
import os
import stat
import sys

import numpy as np
import pytest

from bench.procmem import run_measured
from bench.reference import fidelity as fid
from bench.reference import side_by_side as pb
from bench.reference.side_by_side import fidelity_rows, speed_rows
from bench.reference.sides import (
    interpreter,
    interpreters_note,
    reference_python,
    rooted,
    slice_files,
)
from schemas.shard import ShardColumns
from tests.bench.helpers import REF_ROWS

# --- figures on small fixtures ------------------------------------------------------------------


def columns(rows) -> ShardColumns:
    lengths = [len(r["ids"]) for r in rows]
    counts = [len(r["positions"]) for r in rows]
    return ShardColumns(
        input_ids=np.concatenate([r["ids"] for r in rows]).astype(np.int64),
        input_offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        segment_b_start=np.array([r["segment_b_start"] for r in rows]),
        masked_positions=np.concatenate([r["positions"] for r in rows]).astype(np.int64),
        masked_labels=np.concatenate([r["labels"] for r in rows]).astype(np.int64),
        masked_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        is_random_next=np.array([r["random_next"] for r in rows]),
    )


def test_row_figures_count_mask_keep_random():
    f = fid.row_figures(columns(REF_ROWS), mask_id=4)
    assert f.rows == 2
    assert f.kinds == (1, 1, 1)  # [MASK] at row 0 pos 1, kept at row 0 pos 4, other at row 1
    assert f.lengths.tolist() == [7, 6]
    assert f.per_candidate.tolist() == [2 / 4, 1 / 3]
    values = fid.figure_values(f)
    assert values["random-next share"] == 0.5
    assert values["mean row length"] == 6.5
    assert values["share of rows under 64 pieces"] == 1.0


def test_concat_columns_shifts_offsets():
    a, b = columns(REF_ROWS[:1]), columns(REF_ROWS[1:])
    both = fid.concat_columns([a, b])
    ref = columns(REF_ROWS)
    for name in ("input_ids", "input_offsets", "masked_offsets", "masked_positions"):
        assert getattr(both, name).tolist() == getattr(ref, name).tolist(), name


def test_ks_two_sample():
    d, p = fid.ks_2samp(np.arange(100), np.arange(100))
    assert d == 0 and p == 1.0
    d, p = fid.ks_2samp([1, 2, 3], [4, 5, 6])
    assert d == 1.0
    rng = np.random.default_rng(0)
    d, p = fid.ks_2samp(rng.normal(size=2000), rng.normal(0.3, size=2000))
    assert p < 1e-6
    d, p = fid.ks_2samp(rng.normal(size=2000), rng.normal(size=2000))
    assert p > 0.001
    # P(K > 1.36) is about 0.05: the textbook 5% critical value
    assert fid.kolmogorov_sf(1.36) == pytest.approx(0.049, abs=0.002)


def test_share_and_mean_standard_errors():
    assert fid.share_se(50, 100, 50, 100) == pytest.approx(math.sqrt(2 * 0.25 / 100))
    assert fid.share_se(400, 1000, 600, 1000) == pytest.approx(math.sqrt(0.24 / 1000 + 0.24 / 1000))
    assert fid.share_se(0, 0, 0, 0) == 0
    a, b = np.array([1.0, 2, 3, 4]), np.array([2.0, 3, 4, 5])
    assert fid.mean_se(a, b) == pytest.approx(math.sqrt(2 * np.var(a, ddof=1) / 4))


def synthetic_figures(rng, n, mean_len, random_share, mask_share=0.8):
    lengths = np.clip(rng.normal(mean_len, 20, n).round().astype(int), 8, 128)
    selected = int(n * 15)
    n_mask = int(rng.binomial(selected, mask_share))
    n_keep = int(rng.binomial(selected - n_mask, 0.5))
    return fid.RowFigures(
        rows=n,
        lengths=lengths,
        random_next=rng.random(n) < random_share,
        per_candidate=np.full(n, 0.15) + rng.normal(0, 0.001, n),
        selected=selected,
        kinds=(n_mask, n_keep, selected - n_mask - n_keep),
    )


def test_compare_same_process_is_within_and_a_shift_is_not():
    rng = np.random.default_rng(1)
    ref = synthetic_figures(rng, 20_000, 110, 0.55)
    ours = [synthetic_figures(rng, 20_000, 110, 0.55) for _ in range(4)]
    table = {f["figure"]: f for f in fid.compare(ref, ours)}
    assert all(f["within"] for f in table.values()), table
    assert table["[MASK] share of selected"]["test"] == "z_rows"
    assert table["mean row length"]["test"] == "z_seeds"
    shifted = [synthetic_figures(rng, 20_000, 100, 0.45, mask_share=0.7) for _ in range(4)]
    table = {f["figure"]: f for f in fid.compare(ref, shifted)}
    for name in ("mean row length", "random-next share", "[MASK] share of selected"):
        assert not table[name]["within"], table[name]
    assert not table["row lengths: KS distance to the reference"]["within"]


def test_compare_with_one_seed_uses_row_level_errors():
    rng = np.random.default_rng(2)
    ref = synthetic_figures(rng, 5000, 110, 0.5)
    table = fid.compare(ref, [synthetic_figures(rng, 5000, 110, 0.5)])
    assert all(f["test"] in ("z_rows", "ks_rows") for f in table)
    assert all(f["within"] for f in table)


def test_actual_next_rows_against_the_reference_ids():
    # the reference tokenizer's ids of two documents (-1: the blank line between them)
    stream = np.array([10, 11, 12, 13, 14, 15, 16, 17, -1, 20, 21, 22, 23, 24, 25, 26, 27])
    index = fid.IdIndex(stream)
    assert index.contains([11, 12, 13, 14, 15, 16, 17])  # a long run (k-gram index)
    assert index.contains([21, 22])  # a short run (searched directly)
    assert not index.contains([16, 17, 20])  # runs never cross a document boundary
    assert not index.contains([11, 12, 13, 14, 15, 16, 99])
    rows = [
        # A = 10 11 12, B = 13..17 (14 masked as [MASK]=4): ids agree
        dict(
            ids=[2, 10, 11, 12, 3, 13, 4, 15, 16, 17, 3],
            segment_b_start=5,
            positions=[6],
            labels=[14],
            random_next=False,
        ),
        # B's 23 became 99 without a mask: disagrees
        dict(
            ids=[2, 20, 21, 3, 22, 99, 24, 3],
            segment_b_start=4,
            positions=[],
            labels=[],
            random_next=False,
        ),
        # random-next rows are not checked
        dict(ids=[2, 10, 3, 99, 3], segment_b_start=3, positions=[], labels=[], random_next=True),
    ]
    cols = columns(rows)
    assert fid.original_ids(cols, 0).tolist()[6] == 14
    checked, matched = fid.actual_next_match(cols, index, 100, np.random.default_rng(0))
    assert (checked, matched) == (2, 1)
    checked, _ = fid.actual_next_match(cols, index, 1, np.random.default_rng(0))
    assert checked == 1


def test_sample_shards_read_with_the_schemas_reader(sample_shards):
    cols, mask_id = fid.shard_set_columns(sample_shards)
    from schemas.reader import ShardSet

    assert cols.num_rows == ShardSet.open(sample_shards).num_rows
    f = fid.row_figures(cols, mask_id)
    assert f.selected == len(cols.masked_labels) > 0
    assert 0.7 < f.kinds[0] / f.selected < 0.9
    assert f.lengths.max() <= 128


# --- ratios, and no ratio without the reference -------------------------------------------------


def test_no_reference_environment_means_no_ratio(tmp_path):
    assert reference_python(str(tmp_path / "absent")) is None
    half = tmp_path / "half-installed"  # bin/python there, but the install never finished
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "python").write_text("#!/bin/sh\n")
    assert reference_python(str(half)) is None
    rows = speed_rows("kernel-docs", floor=2.0, reference=None, ours=1.0, workers=2, mb=22.6)
    assert not [r for r in rows if r["unit"] == "x"]  # no ratio at all
    missing = [r for r in rows if "ratio" in r["metric"]]
    assert len(missing) == 1 and missing[0]["value"] == "n/a"
    assert "no ratio" in missing[0]["note"]
    shares = {r["metric"]: r["value"] for r in rows if r["unit"] == "%"}
    assert shares == {"kernel-docs: ours on the slice, share of the tokenizer floor": 50}


def test_installed_reference_environment_is_found(tmp_path):
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (env / ".installed").touch()
    assert reference_python(str(env)) == str(python)


def test_ratio_is_ours_over_the_reference_on_the_same_slice():
    """Like for like: ours on the slice against the reference on that slice, never our build of
    the ~200 MB input (its start-up spread over 10x the text) against the reference's slice."""
    rows = speed_rows("wikipedia", floor=3.0, reference=0.2, ours=1.5, workers=2, mb=20.1)
    ratio = [r for r in rows if r["unit"] == "x"]
    assert [r["metric"] for r in ratio] == ["wikipedia: ours / the reference, same slice"]
    assert [r["value"] for r in ratio] == [7.5]
    assert "1.500 / 0.200" in ratio[0]["note"] and "same 20.1 MB slice" in ratio[0]["note"]
    assert "2 worker(s)" in ratio[0]["note"]
    [share] = [r for r in rows if r["unit"] == "%"]
    assert share["value"] == 50 and "same 20.1 MB slice" in share["note"]
    assert len(rows) == 2  # no ratio per worker count of the builds at scale


def test_a_ratio_between_two_interpreters_names_both():
    """A peer whose environment was made from another Python than ours gets a ratio that says
    so, since the interpreter's own speed is then in it; one made from ours adds nothing."""
    ours = "CPython 3.11.7, /opt/py/bin/python3.11, built May 9 2026 07:35:25"
    theirs = "CPython 3.11.2, /usr/bin/python3.11, built Apr 28 2025 14:11:48"
    assert interpreters_note("the reference", ours, ours) == ""
    apart = interpreters_note("the reference", theirs, ours)
    rows = speed_rows(
        "wikipedia", floor=3.0, reference=0.2, ours=1.5, workers=2, mb=20.1, apart=apart
    )
    [ratio] = [r for r in rows if r["unit"] == "x"]
    assert ratio["value"] == 7.5
    assert ratio["note"].endswith(apart)
    assert f"({theirs}; ours {ours})" in ratio["note"] and "PYTHON" in ratio["note"]


def test_the_interpreter_of_a_venv_is_the_one_it_was_made_from(tmp_path):
    """Two environments made from one Python print one line: a venv's own `bin/python` is
    resolved to the interpreter it was made from, with its version and build date."""
    import platform

    line = interpreter(sys.executable)
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    assert line == f"CPython {platform.python_version()}, {base}, built " + " ".join(
        platform.python_build()[1].split()
    )
    assert interpreter(base) == line  # the base interpreter itself, outside any venv
    missing = str(tmp_path / "absent" / "python")
    assert interpreter(missing).startswith(f"unknown ({missing} did not answer")
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    assert interpreter(str(failing)) == f"unknown ({failing} did not answer)"


def test_the_ratios_beside_the_pipeline_block_are_the_stored_rates():
    """The note under docs/benchmarks.md's pipeline block gives the stored run's like-for-like
    ratios as stored, and ours at scale over the reference as the quotient of two stored rates:
    the arithmetic shown there holds."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rows = json.loads((root / "bench/figures/pipeline.json").read_text())["rows"]
    rate = {r["metric"]: r["value"] for r in rows if r["area"] == "pipeline"}
    doc = (root / "docs/benchmarks.md").read_text()
    note = doc.split("<!-- figures: pipeline -->", 1)[1].split("<!-- /figures -->", 1)[1]
    note = " ".join(note.split("### ", 1)[0].split())
    for corpus, name in (("kernel-docs", "kernel docs"), ("wikipedia", "Wikipedia prose")):
        assert f"{rate[f'{corpus}: ours / the reference, same slice']}x ({name})" in note
        ours, ref = rate[f"{corpus}: ours at scale, 1 worker(s)"], rate[f"{corpus}: the reference"]
        shown = f"{ours} / {ref} = {ours / ref:.1f}x"
        assert shown in note, shown


def test_fidelity_rows_say_within_or_outside():
    rng = np.random.default_rng(3)
    ref = synthetic_figures(rng, 5000, 110, 0.5)
    table = fid.compare(ref, [synthetic_figures(rng, 5000, 110, 0.5) for _ in range(3)])
    rows = fidelity_rows("kernel-docs", table, {"ours": (10, 9)})
    assert len(rows) == len(table) + 1
    assert all(r["area"] == "fidelity" for r in rows)
    assert all("sampling error" in r["note"] for r in rows[:-1])
    assert rows[-1]["value"] == 90.0


def test_the_reference_ids_are_read_as_the_reference_reads_its_input(tmp_path):
    """runner.py reads the reference tokenizer's ids after its main returned (outside the timed
    run) with `reference_ids.token_lines`: the same lists, in the same order, as a tokenizer
    wrapped during `create_training_instances`'s own loop (copied here from bert-tensorflow
    1.0.4) would have recorded: blank and whitespace-only lines give [], a last line without a
    newline is read."""
    from bench.reference.reference_ids import flat_ids, token_lines

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("\nThe cat sat.\n  \nA dog  ran \n\nlast one", encoding="utf-8")
    b.write_text("x y\n\n\nz\n", encoding="utf-8")
    files = [str(a), str(b)]

    recorded = []

    def tokenize(text):
        tokens = text.lower().split()
        recorded.append(tokens)
        return tokens

    all_documents = [[]]
    for input_file in files:  # the reference's loop, its tokenizer recording each call
        with open(input_file, encoding="utf-8") as reader:
            while True:
                line = reader.readline()
                if not line:
                    break
                line = line.strip()
                if not line:
                    all_documents.append([])
                tokens = tokenize(line)
                if tokens:
                    all_documents[-1].append(tokens)

    replayed = list(token_lines(files, lambda t: t.lower().split(), open))
    assert replayed == recorded
    vocab = {w: i for i, w in enumerate(sorted({w for t in replayed for w in t}))}
    ids = flat_ids(replayed, vocab)
    assert ids.count(-1) == sum(1 for t in recorded if not t) == 5
    assert [i for i in ids if i >= 0] == [vocab[w] for t in recorded for w in t]


def test_run_measured_counts_cpu_of_children():
    """The parent stays a second after its child, so that polls see it alive (a command that
    ends before the first poll has no peak to report: it ended so in a CI run)."""
    burn = "x = 0\nfor i in range(2_000_000):\n    x += i"
    parent = "import subprocess, sys, time; "
    parent += f"subprocess.run([sys.executable, '-c', {burn!r}]); time.sleep(1)"
    measured = run_measured([sys.executable, "-c", parent], every=0.05)
    assert measured.cpu >= 0.05  # the grandchild's loop, not only the parent's start-up
    assert measured.wall > 0 and measured.peak > 0


def test_bench_config_is_checked():
    with pytest.raises(ValueError, match="unknown corpora"):
        pb.BenchConfig(corpora=("books",))
    with pytest.raises(ValueError):
        pb.BenchConfig(seeds=0)
    with pytest.raises(ValueError, match="--rounds"):
        pb.BenchConfig(rounds=0)


def test_slice_takes_whole_files(tmp_path):
    for copy in range(2):
        d = tmp_path / f"copy-{copy:03d}"
        d.mkdir()
        for part in range(2):
            (d / f"part-{part:05d}.txt").write_text("x" * 400_000)
    files, size = slice_files(str(tmp_path), 1.0)
    assert [os.path.relpath(f, tmp_path) for f in files] == [
        "copy-000/part-00000.txt",
        "copy-000/part-00001.txt",
        "copy-001/part-00000.txt",
    ]
    assert size == 1_200_000
    with pytest.raises(SystemExit, match="no .txt files"):
        slice_files(str(tmp_path / "absent"), 1.0)


def test_rooted_inputs_keep_the_copy_in_document_ids(tmp_path):
    (tmp_path / "copy-003").mkdir()
    (tmp_path / "copy-003" / "part-00000.txt").write_text("x")
    assert rooted(f"{tmp_path}/copy-003/part-00000.txt") == (
        f"{tmp_path}/[c]opy-003/part-00000.txt"
    )
    assert rooted(f"{tmp_path}/copy-003") == f"{tmp_path}/[c]opy-003/**"
    assert rooted(f"{tmp_path}/copy-003/part-00000.txt", f"{tmp_path}/copy-003") == (
        f"{tmp_path}/copy-003/[p]art-00000.txt"
    )
    from pipeline.files.listing import InputSpec, expand_pattern

    found = expand_pattern(InputSpec("text", rooted(f"{tmp_path}/copy-003")))
    assert [rel for _, _, rel in found] == ["copy-003/part-00000.txt"]
