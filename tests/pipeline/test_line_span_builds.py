"""Builds of large text, paragraphs and JSON Lines files read in spans by many workers: the bytes
and counts of the same files read whole, on 1 worker, 2 forked workers and from gs://. (The
spans' size is the command's: small here, so that small files are cut into many spans; the
Dask and portable runners' parity builds cut theirs the same way.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, SAMPLE, build_shards, calls_to, shard_set, write_parquet

SPAN_BYTES = 3000


def small_spans(monkeypatch) -> None:
    """Spans of `SPAN_BYTES`, and chunks as small: each span a group of its own, as a span of
    32 MB is in a build (a group holds about a chunk's bytes of input)."""
    monkeypatch.setattr("pipeline.sources.line_spans.LINE_SPAN_BYTES", SPAN_BYTES)
    monkeypatch.setattr("pipeline.stages.read.MIN_CHUNK_BYTES", SPAN_BYTES)


def write_inputs(folder) -> str:
    """The sample's prose as one text file, one paragraphs file (its books), one JSON Lines
    file and one Parquet file of 2 rows a row group (some records and rows without an id, named
    by their line or row), each cut into several spans."""
    os.makedirs(folder)
    with open(f"{SAMPLE}/text/wiki-style.txt", encoding="utf-8") as f:
        text = f.read()
    books = []
    for root, _, names in sorted(os.walk(f"{SAMPLE}/books")):
        for name in sorted(names):
            with open(os.path.join(root, name), encoding="utf-8") as f:
                blocks = [" ".join(b.split()) for b in f.read().split("\n\n")]
            books.append("\n".join(b for b in blocks if b))
    documents = [d for d in text.split("\n\n") if d.strip()]
    records = [{"text": d} if i % 3 else {"id": f"d{i}", "text": d} for i, d in enumerate(books)]
    records += [{"text": d, "id": f"w{i}"} for i, d in enumerate(documents)]
    files = {
        "all.txt": text * 2,
        "books.txt": "\n\n".join(books) + "\n",
        "records.jsonl": "\n".join(json.dumps(r) for r in records) + "\n",
    }
    for name, data in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(data)
    rows = [{"id": None if i % 2 else f"p{i}", "text": d[::-1]} for i, d in enumerate(documents)]
    write_parquet(os.path.join(folder, "rows.parquet"), rows, row_group_size=2)
    inputs = f"text:{folder}/all.txt,paragraphs:{folder}/books.txt,jsonl:{folder}/records.jsonl"
    return inputs + f",parquet:{folder}/rows.parquet"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[str, str]:
    """(inputs, the shards of a build that reads each file whole)."""
    folder = tmp_path_factory.mktemp("line-spans")
    inputs = write_inputs(str(folder / "in"))
    with pytest.MonkeyPatch.context() as monkeypatch:  # chunks as small as the spans' builds'
        monkeypatch.setattr("pipeline.stages.read.MIN_CHUNK_BYTES", SPAN_BYTES)
        assert build_shards(str(folder / "whole"), "--num-shards", "3", inputs=inputs) == 0
    return inputs, str(folder / "whole")


def test_files_read_in_spans_build_the_bytes_read_whole(whole, tmp_path, monkeypatch) -> None:
    import pipeline.stages.read as read

    inputs, expected = whole
    small_spans(monkeypatch)
    counted = calls_to(monkeypatch, read, "count_line_span")
    assert build_shards(str(tmp_path / "out"), "--num-shards", "3", inputs=inputs) == 0
    assert len(counted) > 20  # every span of the three files counted, then read
    built = shard_set(str(tmp_path / "out"))
    assert built == shard_set(expected)
    total = built["manifest"]["counts"]["total"]
    assert total["files_read"] == 4 and total["documents_read"] > 100
    assert built["manifest"]["counts"]["by_source"]["parquet"]["documents_used"] > 20


def test_two_forked_workers_read_the_spans_into_the_same_bytes(whole, tmp_path) -> None:
    inputs, expected = whole
    code = (
        "import sys; import pipeline.sources.line_spans as s, pipeline.stages.read as r; "
        f"s.LINE_SPAN_BYTES = r.MIN_CHUNK_BYTES = {SPAN_BYTES}; "
        "from pipeline.shell.cli import main; "
        f"sys.exit(main(['build', '--input', {inputs!r}, '--out', {str(tmp_path / 'out')!r}, "
        "'--num-shards', '3', '--workers', '2', '--progress-seconds', '0']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shard_set(str(tmp_path / "out")) == shard_set(expected)


def test_spans_read_from_gcs_build_the_local_bytes(whole, gcs_emulator, monkeypatch) -> None:
    """Each span a ranged read of the file in its bucket, from its own offset."""
    pytest.importorskip("gcp_storage_emulator")
    from tests.gcs_emulator import upload_tree

    inputs, expected = whole
    folder = os.path.dirname(inputs.split(",")[0].split(":", 1)[1])
    gcs_emulator.create_bucket("spans")
    upload_tree(folder, "gs://spans/in")
    monkeypatch.setattr("pipeline.sources.line_spans.LINE_SPAN_BYTES", SPAN_BYTES)
    assert (
        build_shards(
            "gs://spans/out", "--num-shards", "3", inputs=inputs.replace(folder, "gs://spans/in")
        )
        == 0
    )
    assert shard_set("gs://spans/out") == shard_set(expected)


def test_an_id_repeated_in_two_spans_stops_the_build_saying_so(tmp_path, monkeypatch):
    """Within one span a repeated id is a bad record, as in a file read whole; two spans read
    apart meet only when the ids do, and the build stops there, even with --skip-bad-input."""

    (tmp_path / "in").mkdir()
    lines = [
        {"id": "x" if i in (3, 390) else f"r{i}", "text": f"Record {i}. Words."} for i in range(400)
    ]
    (tmp_path / "in" / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    small_spans(monkeypatch)
    args = ("--skip-bad-input", "--vocab-size", "200")
    with pytest.raises(SystemExit) as e:
        build_shards(str(tmp_path / "out"), *args, inputs=f"jsonl:{tmp_path}/in")
    line = str(e.value.code)
    assert "document id 'jsonl:x' occurs twice" in line and "d.jsonl" in line, line
    assert "two spans of a file over 32 MB that workers read apart" in line, line


def test_the_vocab_command_reads_the_spans_into_the_builds_vocab(whole, tmp_path, monkeypatch):
    from pipeline.shell.cli import main

    inputs, expected = whole
    small_spans(monkeypatch)
    assert main(["vocab", "--input", inputs, "--out", str(tmp_path / "v"), "--workers", "1"]) == 0
    with open(tmp_path / "v" / "vocab.txt") as made, open(f"{expected}/vocab.txt") as built:
        assert made.read() == built.read()


def test_a_build_stopped_after_some_spans_resumes_to_the_same_bytes(whole, tmp_path, monkeypatch):
    """The spans read before the stop are taken as they are; the others are counted again and
    read with the same numbers."""
    import pipeline.stages.read as read

    inputs, expected = whole
    out, args = str(tmp_path / "out"), ("--num-shards", "3")
    small_spans(monkeypatch)
    real, groups = read.read_group, []

    def stopping(group, *rest):
        groups.append(group)
        if len(groups) == 4:
            raise OSError("stopped here")
        yield from real(group, *rest)

    monkeypatch.setattr(read, "read_group", stopping)
    with pytest.raises(SystemExit):
        build_shards(out, *args, inputs=inputs)
    monkeypatch.setattr(read, "read_group", real)
    assert len(os.listdir(f"{out}/shards/.building/tmp/items")) == 3
    assert build_shards(out, *args, "--resume", inputs=inputs) == 0
    assert shard_set(out) == shard_set(expected)


def test_many_files_are_read_a_file_a_worker_one_large_one_in_spans(tmp_path) -> None:
    """Spans are at least a 64th of the whole input: 100 files of 5 KB (the input spread already,
    a file a worker) are read whole, with no count; one of 62 KB beside them is cut, into spans
    of a 64th of the input."""
    from pipeline.files.listing import InputSpec
    from pipeline.stages.read import plan_groups

    line = b"Some words of one document.\n"
    for i in range(100):
        (tmp_path / f"part-{i:03d}.txt").write_bytes(line * 180)
    spec = InputSpec("text", str(tmp_path))
    items = [item for group in plan_groups([spec], 1 << 20, span_bytes=1000) for item in group]
    assert len(items) == 100 and all(item[3] is None for item in items)
    (tmp_path / "big.txt").write_bytes(line * 2200)
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    items = [item for group in plan_groups([spec], 1 << 20, span_bytes=1000) for item in group]
    spans = [item[3] for item in items if item[2] == "big.txt"]
    assert len(items) == 107 and len(spans) == 7
    assert all(span.end - span.start <= total // 64 + 1 for span in spans)
