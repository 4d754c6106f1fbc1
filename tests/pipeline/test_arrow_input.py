"""Arrow IPC input (`arrow:`): a row is what a Parquet row is (the same documents, ids and
counts, under the source's own name), from the stream format (`datasets`' files, whole or
compressed) and the file format, a record batch at a time, locally and from gs://; a wrong
format either way, a file cut short and a `save_to_disk` folder's JSON are refused in one line
naming the file."""

from __future__ import annotations

import gzip
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.shell.cli import main
from pipeline.sources.compressed import decompressed
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.head import check_head
from pipeline.sources.readers import READERS
from schemas.reader import ShardSet

RECORDS = [
    {"id": "doc-7", "text": "First paragraph here.\n\nSecond\nparagraph  wraps."},
    {"id": None, "text": "No id: the row names it."},
    {"id": "doc-9", "text": "  \n\n "},  # no paragraph: dropped and counted
    *({"id": f"n{i}", "text": f"Document {i} says one thing.\n\nThen another."} for i in range(9)),
]


def table(records: list[dict], text: str = "text") -> pa.Table:
    return pa.table({"id": [r["id"] for r in records], text: [r["text"] for r in records]})


def stream_bytes(t: pa.Table, rows_per_batch: int = 2) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as writer:
        for batch in t.to_batches(max_chunksize=rows_per_batch):
            writer.write_batch(batch)
    return sink.getvalue()


def file_bytes(t: pa.Table, rows_per_batch: int = 3) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, t.schema) as writer:
        writer.write_table(t, max_chunksize=rows_per_batch)
    return sink.getvalue()


def read(data: bytes, name: str, fmt: str = "arrow", skip: bool = False, **field):
    tally = Tally(skip_bad_input=skip)
    f = decompressed(io.BytesIO(data), name)
    return [(d.id, d.paragraphs) for d in READERS[fmt](f, name, tally, fmt, **field)], tally


def test_rows_of_either_format_are_the_documents_parquet_makes_of_them():
    sink = io.BytesIO()
    pq.write_table(table(RECORDS), sink, row_group_size=4)
    want, want_tally = read(sink.getvalue(), "a.x", "parquet")
    assert len(want) == len(RECORDS) - 1
    for data in (stream_bytes(table(RECORDS)), file_bytes(table(RECORDS))):
        docs, tally = read(data, "a.x")
        assert docs == [(i.replace("parquet:", "arrow:", 1), p) for i, p in want]
        assert tally.counts == {
            k.replace("parquet_", "arrow_"): n for k, n in want_tally.counts.items()
        }
    renamed = stream_bytes(table(RECORDS, "content"))
    assert read(renamed, "a.x", text_field="content")[0] == read(data, "a.x")[0]


def test_a_compressed_stream_reads_and_a_compressed_file_format_is_refused():
    docs = read(stream_bytes(table(RECORDS)), "a.arrow")[0]
    unzipped = read(gzip.compress(stream_bytes(table(RECORDS))), "a.arrow.gz")[0]
    assert [(i.replace(".gz#", "#"), p) for i, p in unzipped] == docs
    with pytest.raises(BadInputError, match=r"^a\.arrow\.gz: an Arrow file of the file format, "):
        read(gzip.compress(file_bytes(table(RECORDS))), "a.arrow.gz")


def test_a_compressed_file_format_is_refused_before_the_build(tmp_path):
    path = tmp_path / "a.arrow.gz"
    path.write_bytes(gzip.compress(file_bytes(table(RECORDS))))
    with pytest.raises(BadInputError, match=r"^a\.arrow\.gz: an Arrow file of the file format, "):
        check_head("arrow", str(path), "a.arrow.gz", lambda p: open(p, "rb"))
    path.write_bytes(gzip.compress(stream_bytes(table(RECORDS))))
    check_head("arrow", str(path), "a.arrow.gz", lambda p: open(p, "rb"))  # the stream: read


def test_bad_rows_are_named_or_skipped_and_counted_under_the_arrow_names():
    records = [{"id": "a", "text": "One."}, {"id": "b", "text": None}, {"id": "a", "text": "2."}]
    with pytest.raises(BadInputError, match=r"^a\.arrow: row 2: its text is null"):
        read(stream_bytes(table(records)), "a.arrow")
    docs, tally = read(stream_bytes(table(records)), "a.arrow", skip=True)
    assert docs == [("arrow:a", ("One.",))]
    assert tally.counts["documents_dropped.arrow_bad_record"] == 1
    assert tally.counts["documents_dropped.arrow_duplicate_id"] == 1


def test_a_file_cut_short_is_named_as_damaged():
    data = stream_bytes(table(RECORDS))
    with pytest.raises(BadInputError, match=r"^a\.arrow: a damaged or truncated Arrow IPC file"):
        read(data[: len(data) * 2 // 3], "a.arrow")


@pytest.mark.parametrize(
    "fmt, data, said",
    [
        ("text", file_bytes(table(RECORDS)), "f.bin: an Arrow IPC file, not text input; pass "),
        ("parquet", stream_bytes(table(RECORDS)), "f.bin: an Arrow IPC file, not parquet input"),
        ("arrow", b"PAR1 and the rest", "f.bin: a Parquet file, not arrow input; pass --form"),
        ("arrow", b"Some prose.\n", "f.bin: not an Arrow IPC file (it starts with neither ARROW1"),
        ("arrow", stream_bytes(table(RECORDS, "body")), "f.bin: no `text` column among ['id', "),
        ("arrow", file_bytes(table(RECORDS, "body")), "f.bin: no `text` column among ['id', "),
    ],
)
def test_the_first_file_check_refuses_a_wrong_format_either_way(tmp_path, fmt, data, said):
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    with pytest.raises(BadInputError) as e:
        check_head(fmt, str(path), "f.bin", lambda p: open(p, "rb"))
    assert str(e.value).startswith(said), str(e.value)


def test_a_save_to_disk_folder_builds_through_its_glob(tmp_path):
    """`Dataset.save_to_disk` writes `data-*.arrow` (the stream format) beside two JSON files:
    the glob builds (here a text column named `content`), the folder names the JSON."""
    folder = tmp_path / "ds"
    folder.mkdir()
    records = [r for r in RECORDS if r["id"]]
    t = table(records, "content")
    (folder / "data-00000-of-00002.arrow").write_bytes(stream_bytes(t.slice(0, 5)))
    (folder / "data-00001-of-00002.arrow").write_bytes(stream_bytes(t.slice(5)))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {}}))
    (folder / "state.json").write_text(json.dumps({"_data_files": []}))
    out = str(tmp_path / "out")
    argv = ["build", "--text-field", "content", "--workers", "1", "--vocab-size", "300"]
    assert main([*argv, "--input", f"arrow:{folder}/*.arrow", "--out", out]) == 0
    counts = ShardSet.open(out).manifest.counts["by_source"]["arrow"]
    assert counts["files_read"] == 2 and counts["documents_read"] == len(records)
    assert counts["documents_dropped.arrow_empty_text"] == 1
    with pytest.raises(SystemExit) as e:
        main([*argv, "--input", f"arrow:{folder}", "--out", str(tmp_path / "o2")])
    assert "dataset_info.json: not an Arrow IPC file" in str(e.value.code)
    assert "give DIR/*.arrow" in str(e.value.code)


def test_arrow_files_on_gcs_read_as_the_local_bytes(gcs_emulator, gcs_bucket):
    """Through Beam's GCS filesystem: the stream format in order, the file format by seeking."""
    from pipeline.files import fsio
    from pipeline.files.tracked import TrackedFile

    for name, data in (
        ("s.arrow", stream_bytes(table(RECORDS))),
        ("f.arrow", file_bytes(table(RECORDS))),
    ):
        url = f"gs://{gcs_bucket}/corpus/{name}"
        fsio.write_bytes(url, data)
        with TrackedFile(fsio.open_read(url)) as f:
            remote = [(d.id, d.paragraphs) for d in READERS["arrow"](f, name, Tally(), "arrow")]
        assert remote == read(data, name)[0] and len(remote) == len(RECORDS) - 1


def test_one_batch_of_a_whole_table_is_read_in_slices(monkeypatch):
    """polars writes a table as one record batch. The batch is one message, read whole; its
    rows become Python strings a slice of about BATCH_BYTES at a time, not all at once (which
    held the batch and all its strings: 2.2 times the file here)."""
    import tracemalloc

    from pipeline.sources import parquet

    monkeypatch.setattr(parquet, "BATCH_BYTES", 1 << 20)
    records = [{"id": f"d{i}", "text": f"Row {i} says a few words. " * 100} for i in range(20_000)]
    data = stream_bytes(table(records), rows_per_batch=len(records))  # about 50 MB of text
    tracemalloc.start()
    try:
        docs = READERS["arrow"](io.BytesIO(data), "one.arrow", Tally(), "arrow")
        count = sum(1 for _ in docs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == len(records) and peak < 1.5 * len(data), (peak, len(data))
