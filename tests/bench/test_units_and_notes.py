"""What each bench row says it is: MB of 10^6 bytes in the scale and Dask series, both Dask
runs measured the same way, distinct units for per-CPU-second and per-wall-second rates, DATA
honoured by the Wikipedia area, the vocab each gcs build had, the different work of the two
training steps, the export's TensorFlow environment and temporary folder. Nothing heavy runs:
the figures come from measurements made up here."""

from __future__ import annotations

import bz2
import os

import pytest

from bench.procmem import Measured


def measured(**kw) -> Measured:
    base = dict(
        wall=10.0,
        reaped_cpu=8.0,
        seen_cpu=7.0,
        tree_cpu=9.0,
        peak=3 << 30,
        peak_one=1 << 30,
        peak_sample=2 << 30,
        output="",
        memory="PSS",
        beside_cpu=0.0,
    )
    return Measured(**{**base, **kw})


# --- scale: decimal MB ---------------------------------------------------------------------------


def test_scale_figures_are_decimal_mb_and_binary_gib():
    from bench import scale_bench

    got = scale_bench.result_of(measured(), text_bytes=204_800_000, shard_bytes=1 << 30)
    assert got["mb"] == 204.8  # 204.8 MB; as MiB it would have been 195.3
    assert got["cpu_s"] == 9.0 and got["mb_per_cpu_s"] == round(204.8 / 9.0, 3)
    assert got["peak_gib"] == 3.0 and got["peak_process_gib"] == 1.0
    assert got["peak_tmp_gib"] == 2.0 and got["tmp_over_shards"] == 2.0
    got.update(workers=2, vocab="given")
    note = scale_bench.note_of(got)
    assert "204.8 MB (10^6 bytes)" in note and "memory as PSS" in note


def test_scale_uses_the_builds_default_bucket_size():
    from bench import scale_bench
    from pipeline.shell.arguments import field_default

    assert scale_bench.BUCKET_TOKENS == field_default("bucket_tokens")


# --- Dask: the same measuring on both sides ------------------------------------------------------


def test_dask_and_local_runs_are_measured_the_same_way():
    from bench import dask_bench

    local = dask_bench.record("local", 111_700_000, measured())
    on_dask = dask_bench.record("dask", 111_700_000, measured(beside_cpu=20.0))
    assert local["mb"] == on_dask["mb"] == 111.7  # 10^6 bytes: 106.5 as MiB
    assert local["cpu_s"] == 9.0  # the build's tree: max(reaped, polled tree)
    assert on_dask["cpu_s"] == 29.0  # the same count, plus the cluster's trees beside it
    assert on_dask["mb_per_cpu_s"] == round(111.7 / 29.0, 3)
    for r in (local, on_dask):
        assert r["peak_gib"] == 3.0 and r["peak_process_gib"] == 1.0 and r["memory"] == "PSS"
    on_dask["identical_to_local"] = True
    dask_note, local_note = dask_bench.note_of(on_dask, 2), dask_bench.note_of(local, 2)
    assert "scheduler's and workers' trees (20.0 CPU s of them)" in dask_note
    assert "identical to local: True" in dask_note and "identical" not in local_note
    for note in (dask_note, local_note):
        assert "111.7 MB (10^6 bytes)" in note and "largest process 1.0 GiB (PSS)" in note


# --- Wikipedia: units, and DATA ------------------------------------------------------------------


def test_wikipedia_build_rates_per_wall_second_per_worker_are_labelled_so():
    from bench import wiki_bench

    manifest = {
        "counts": {"total": {"documents_used": 10}},
        "shards": [{"rows": 500}, {"rows": 500}],
    }
    rate, instances = wiki_bench._build_rows(manifest, 97.0, 16, 2, 20.0, ", vocab reused")
    assert rate["unit"] == "MB/wall-s/worker" and rate["value"] == round(97.0 / 20.0 / 2, 3)
    assert instances["unit"] == "/s wall" and instances["value"] == 50


def test_wikipedia_scaling_keeps_each_worker_counts_fastest_of_builds_run_in_turn(
    tmp_path, monkeypatch
):
    """1 worker against 2 from builds taken in turn (2, 1, 2, 1), each count's fastest kept:
    the machine's drift between builds would otherwise move the ratio."""
    import bz2
    import os

    from bench import wiki_bench
    from tests.pipeline.wikidata import export, page_xml

    walls = iter([40.0, 11.0, 20.0, 10.0, 21.0])  # vocab build, then 2, 1, 2, 1 workers
    calls = []

    def build(inputs, out, workers, extra):
        calls.append((workers, bool(extra)))
        os.makedirs(out)
        manifest = {"counts": {"total": {"documents_used": 1}}, "shards": [{"rows": 10}]}
        return next(walls), 5.0 * workers, manifest

    monkeypatch.setattr(wiki_bench, "_build", build)
    monkeypatch.setattr(wiki_bench, "side_by_side", lambda *a: [21.0, 21.5])
    monkeypatch.setattr(wiki_bench, "split_tokenize_floor", lambda *a: 1.0)
    monkeypatch.setattr(wiki_bench.tempfile, "tempdir", str(tmp_path))
    xml = export(page_xml(1, "A", "Some prose here."))
    rows = {r["metric"]: r for r in wiki_bench.build_rows(bz2.compress(xml), 1, 2)}
    assert calls == [(2, False), (2, True), (1, True), (2, True), (1, True)]
    ratio = rows["whole build, vocab reused: 2 workers against 1, wall"]
    assert ratio["value"] == 2.0  # 20.0 against 10.0
    assert ratio["note"].endswith(
        "; the fastest of builds run in turn (1 worker 20.0, 21.0 s; 2 workers 11.0, 10.0 s)"
    )
    alone = rows["whole build, 1 worker(s), vocab reused"]["note"]
    assert alone.endswith("20 s wall incl. start-up")


def fake_builds(monkeypatch, pb, walls: list[float], cpu_per_wall: float) -> list:
    """`pb.build` replaced: each call makes its output folder and takes the next wall (in the
    order 1, 2, 1, 2 workers), with `cpu_per_wall` CPU-s per wall-second per worker; returns
    the (format, workers) of every call."""
    walls_left, calls = iter(walls), []

    def build(fmt, inputs, out, vocab, workers):
        calls.append((fmt, workers))
        os.makedirs(out)
        wall = next(walls_left)
        cpu = wall * workers * cpu_per_wall
        return measured(wall=wall, reaped_cpu=cpu, seen_cpu=0.0), {"shards": [{"rows": 1000}]}

    monkeypatch.setattr(pb, "build", build)
    return calls


def test_books_scaling_keeps_each_worker_counts_fastest_of_builds_run_in_turn(
    tmp_path, monkeypatch
):
    """The pipeline area's books builds, as the Wikipedia area's: 1, 2, 1, 2 workers, each
    count's fastest build gives its rate and the ratio, every wall listed."""
    from bench.reference import side_by_side as pb

    calls = fake_builds(monkeypatch, pb, [40.0, 22.0, 38.0, 23.0], cpu_per_wall=0.9)
    monkeypatch.setattr(pb, "corpus_files", lambda layout, mb: (["books"], 100_000_000))
    monkeypatch.setattr(pb, "split_rates", lambda dirs: (1.0, 5.0, 1_000_000))
    monkeypatch.setattr(pb, "raw_floor", lambda *a: 2.0)
    rows = {r["metric"]: r for r in pb.books_rows(100, "vocab.txt", (1, 2), str(tmp_path), 2)}
    assert calls == [("books", 1), ("books", 2), ("books", 1), ("books", 2)]
    ratio = rows["books: 2 workers against 1, wall"]
    assert ratio["value"] == round(38.0 / 22.0, 2)
    assert ratio["note"] == (
        "38.0 s with 1 worker, 22.0 s with 2; the fastest of builds run in turn "
        "(1 worker 40.0, 38.0 s; 2 workers 22.0, 23.0 s)"
    )
    one = rows["books format, 1 worker(s)"]
    assert one["value"] == round(100 / (38.0 * 0.9), 3) and "38 s wall" in one["note"]
    assert not list(tmp_path.iterdir())  # each build's output removed


def test_text_builds_at_scale_keep_each_worker_counts_fastest_of_builds_run_in_turn(
    tmp_path, monkeypatch
):
    from bench.reference import side_by_side as pb

    calls = fake_builds(monkeypatch, pb, [30.0, 17.0, 28.0, 18.0], cpu_per_wall=1.0)
    monkeypatch.setattr(pb, "corpus_files", lambda layout, mb, root: (["text"], 200_000_000))
    monkeypatch.setattr(pb, "side_by_side", lambda *a: [30.0, 31.0])
    cfg = pb.BenchConfig(workers=(1, 2), rounds=2)
    rows = {r["metric"]: r for r in pb.scale_rows("c", cfg, "root", "v.txt", str(tmp_path))}
    assert calls == [("text", 1), ("text", 2), ("text", 1), ("text", 2)]
    assert rows["c: ours at scale, 1 worker(s)"]["value"] == round(200 / 28.0, 3)
    ratio = rows["c: 2 workers against 1, wall"]
    assert ratio["value"] == round(28.0 / 17.0, 2)
    assert ratio["note"].endswith("(1 worker 30.0, 28.0 s; 2 workers 17.0, 18.0 s)")
    assert not list(tmp_path.iterdir())


def test_wikipedia_reader_rates_are_per_cpu_second():
    from bench import wiki_bench
    from tests.pipeline.wikidata import export, page_xml

    text = " ".join(["The river runs past the old mill and into the sea."] * 40)
    body = "\n\n".join([text] * 4)
    xml = export(*(page_xml(i, f"Page {i}", body) for i in range(1, 6)))
    rows = wiki_bench.reader_rows(bz2.compress(xml), 2)
    units = {r["metric"]: r["unit"] for r in rows}
    assert units.pop("reader + cleaner: pages") == "pages/CPU-s"
    assert set(units.values()) == {"MB/CPU-s"}
    assert not [r for r in rows if "core" in r["unit"]]


def test_wikipedia_area_reads_gensim_from_data(tmp_path, monkeypatch):
    from bench import run, wiki_bench

    (tmp_path / "gensim").mkdir()
    (tmp_path / "gensim" / "x.bz2").write_bytes(b"bytes")
    assert wiki_bench.gensim_file("x.bz2", tmp_path) == b"bytes"
    with pytest.raises(SystemExit, match="make corpora"):
        wiki_bench.gensim_file("absent.bz2", tmp_path)
    seen = []
    monkeypatch.setattr(wiki_bench, "run", lambda data="data", *a, **k: seen.append(data) or [])
    monkeypatch.setenv("DATA", str(tmp_path))
    assert run.run_area("wikipedia", run.parser().parse_args(["--only", "wikipedia"])) == []
    assert seen == [str(tmp_path)]


# --- gcs: which build trained its vocab ----------------------------------------------------------


def test_gcs_rows_say_which_build_trained_its_vocab():
    from bench import gcs_bench

    base = {
        "text_mb": 9.3,
        "input_files": 3,
        "units_files": 10,
        "buckets": 3,
        "requests": 200,
        "bytes_down": 70_000_000,
        "bytes_up": 86_000_000,
        "kinds": {"listing": 5},
    }
    trained = gcs_bench.rows_of({**base, "name": "text", "vocab": "trained"})
    given = gcs_bench.rows_of({**base, "name": "books", "vocab": "given"})
    assert all("vocab trained by this build" in r["note"] for r in trained)
    assert all("vocab given" in r["note"] and "unlike the text build" in r["note"] for r in given)


# --- model: the two training steps do different work ---------------------------------------------


def test_speed_up_over_transformers_says_the_work_differs():
    pytest.importorskip("torch")
    from bench import model_bench

    rows = model_bench.step_rows("mini", 2.0, 5.0, "mini preset")
    [speed_up] = [r for r in rows if "speed-up" in r["metric"]]
    assert speed_up["value"] == 2.5
    assert "masked positions only" in speed_up["note"] and "every position" in speed_up["note"]


# --- export: the bench environment and BENCH_TMP -------------------------------------------------


def test_export_uses_the_reference_environment_and_bench_tmp(tmp_path, monkeypatch):
    from bench import export_bench
    from bench.reference import sides

    assert export_bench.REFERENCE_ENV == sides.REFERENCE_ENV
    row = export_bench.tf_parity("set", "dest", str(tmp_path), str(tmp_path / "no-env"))
    assert row["value"] == "not run" and str(tmp_path / "no-env") in row["note"]
    monkeypatch.setenv("BENCH_TMP", str(tmp_path))
    work = export_bench.work_dir()
    assert os.path.dirname(work) == str(tmp_path) and os.path.isdir(work)
    assert export_bench.work_dir("kept") == "kept"
