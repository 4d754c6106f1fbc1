"""`--no-id-field`: every JSON Lines record (Parquet and Arrow row) is named by its file and line
(row), whatever id it holds. Exports written a file at a time can number their ids afresh in
each file and hold no other field unique across files, so two of their files built together
stopped at the first id they share, and `--id-field` had no field to name. The flag is in the
set's config only when given."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.build import resume_problem
from schemas.reader import ShardSet
from tests.helpers import ROOT, SAMPLE, build_shards, expected_rows, file_digests, refusal


def rows(part: int, with_ids: bool) -> list[dict]:
    """A file's records: ids from 0 in each file (when `with_ids`), the text three paragraphs of
    the sample's books (the first half of them in part 0, the second in part 1)."""
    paragraphs = []
    for path in sorted(glob.glob(f"{SAMPLE}/books/**/*.txt", recursive=True)):
        text = open(path, encoding="utf-8").read()
        paragraphs += [" ".join(p.split()) for p in text.split("\n\n") if len(p) > 200]
    half = len(paragraphs) // 2
    mine = paragraphs[:half] if part == 0 else paragraphs[half:]
    texts = ["\n\n".join(mine[3 * k : 3 * k + 3]) for k in range(len(mine) // 3)]
    return [{"id": k, "text": t} if with_ids else {"text": t} for k, t in enumerate(texts)]


def write(folder, fmt: str, with_ids: bool = True) -> str:
    """Two files of `fmt` under `folder`, numbered alike; the input naming them."""
    os.makedirs(folder)
    for part in (0, 1):
        records, path = rows(part, with_ids), os.path.join(folder, f"part-{part}.{fmt}")
        if fmt == "jsonl":
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
        elif fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(records), path, row_group_size=4)
        else:
            table = pa.Table.from_pylist(records)
            with pa.ipc.new_file(path, table.schema) as writer:
                writer.write_table(table, max_chunksize=3)
    return f"{fmt}:{folder}"


def test_two_files_numbered_alike_stop_two_workers_in_one_line_naming_the_flag(tmp_path):
    """As `bert-shards build` runs (a fresh process, 2 forked workers): the repeated id is found
    in a worker, and its whole line, what to do included, is the command's (it was cut in its
    middle, the advice lost)."""
    inputs = write(str(tmp_path / "in"), "jsonl")
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs]
    cmd += ["--out", str(tmp_path / "out"), "--workers", "2", "--vocab-size", "500"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.startswith("error: document id 'jsonl:0' occurs twice in the input")
    assert done.stderr.endswith(
        "or --no-id-field names each record by its file and line (row)\n"
    ), done.stderr
    assert done.stderr.count("\n") == 1 and " ... " not in done.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "arrow"])
def test_with_the_flag_they_build_as_records_without_ids(tmp_path, fmt):
    named = str(tmp_path / "named")
    args = ("--vocab-size", "500", "--num-shards", "2")
    assert build_shards(named, *args, "--no-id-field", inputs=write(tmp_path / "a", fmt)) == 0
    bare = str(tmp_path / "bare")
    assert build_shards(bare, *args, inputs=write(tmp_path / "b", fmt, with_ids=False)) == 0
    manifest = ShardSet.open(named).manifest
    assert manifest.config["no_id_field"] is True
    used = manifest.counts["total"]["documents_used"]
    assert used == len(rows(0, True)) + len(rows(1, True))
    # the ids are the files' names and lines, as those of records without one: the same rows
    assert expected_rows(named) == expected_rows(bare)
    assert "no_id_field" not in ShardSet.open(bare).manifest.config


@pytest.mark.slow
def test_on_a_local_dask_cluster_the_local_bytes(tmp_path):
    """The flag reaches Dask's workers with the other reading settings: JSON Lines and Parquet
    files numbered alike (which stop a build without it) build the local runner's bytes."""
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    inputs = f"{write(tmp_path / 'j', 'jsonl')},{write(tmp_path / 'p', 'parquet')}"
    local, dask = str(tmp_path / "local"), str(tmp_path / "dask")
    args = ("--vocab-size", "500", "--num-shards", "2", "--no-id-field")
    assert build_shards(local, *args, inputs=inputs) == 0
    assert build_shards(dask, *args, "--runner", "DaskRunner", inputs=inputs) == 0
    assert file_digests(dask) == file_digests(local)
    assert ShardSet.open(dask).manifest.config["no_id_field"] is True


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["--input", f"books:{SAMPLE}/books", "--no-id-field"],
            "--no-id-field: no_id_field names jsonl, parquet and arrow inputs, and no input is "
            "one: leave it out, or give the input its format (jsonl:PATH)",
        ),
        (
            ["--input", f"jsonl:{SAMPLE}", "--no-id-field", "--id-field", "url"],
            "--no-id-field: no_id_field names the records by their file and line, and id_field "
            "'url' by a field: give one of them",
        ),
    ],
)
def test_what_cannot_be_meant_is_refused_before_out(tmp_path, capsys, argv, said):
    out = tmp_path / "out"
    assert refusal(capsys, *argv, "--out", str(out)) == f"error: {said}"
    assert not out.exists()


def test_a_resume_across_the_flag_is_refused():
    record = {"config": {"seed": 1}, "inputs": [], "vocab_sha256": None}
    other = {**record, "config": {"seed": 1, "no_id_field": True}}
    assert resume_problem(record, other) == (
        "the config differs from the interrupted build's (no_id_field None -> True)"
    )


def test_the_vocab_command_takes_it(tmp_path):
    """`bert-shards vocab` reads as the build does (its sample is drawn by id)."""
    from pipeline.shell.cli import main

    inputs = write(str(tmp_path / "in"), "parquet")
    out = str(tmp_path / "vocab")
    argv = ["vocab", "--input", inputs, "--out", out, "--workers", "1", "--vocab-size", "300"]
    assert main([*argv, "--no-id-field"]) == 0
    assert os.path.getsize(f"{out}/vocab.txt") > 0
