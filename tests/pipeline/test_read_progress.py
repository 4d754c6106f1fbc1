"""The read step's progress markers count every stored byte of an input once, however it is read:
a file whole, or a large one in spans by many workers (the progress line's `read X/Y MB`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.files.fsio import size as stored_size
from pipeline.stages.read import plan_reads, read_group
from tests.pipeline.wikidata import ARTICLES, gensim_xml, write_multistream


def marked_bytes(tmp: Path) -> int:
    return sum(json.loads(p.read_text())["bytes"] for p in (tmp / "progress").glob("*.json"))


def read_planned(path: Path, fmt: str, tmp: Path, chunk_bytes: int = 100_000) -> int:
    """Reads every planned item of `path` as its own group, as workers would; the spans."""
    items = list(plan_reads((fmt, str(path), path.name)))
    for item in items:
        list(read_group([(*item, 0)], str(tmp), chunk_bytes, False))
    return len(items)


def test_a_plain_export_read_in_spans_is_counted_once(tmp_path, monkeypatch) -> None:
    import pipeline.sources.wikipedia.spans as wiki_spans

    monkeypatch.setattr(wiki_spans, "XML_SPAN_BYTES", 250_000)
    path = tmp_path / "export.xml"
    path.write_bytes(gensim_xml(ARTICLES))
    assert read_planned(path, "wikipedia", tmp_path / "tmp") > 10
    assert marked_bytes(tmp_path / "tmp") == os.path.getsize(path)


def test_a_multistream_dump_read_in_spans_is_counted_once(tmp_path, monkeypatch) -> None:
    import pipeline.sources.wikipedia.spans as wiki_spans

    monkeypatch.setattr(wiki_spans, "SPAN_BYTES", 1)  # a span per stream
    write_multistream(tmp_path / "dump", pages_per_stream=2)
    (path,) = (tmp_path / "dump").glob("*-multistream.xml.bz2")
    assert read_planned(path, "wikipedia", tmp_path / "tmp", chunk_bytes=1_000) >= 3
    assert marked_bytes(tmp_path / "tmp") == stored_size(str(path))


def test_a_file_read_whole_is_counted_once(tmp_path) -> None:
    path = tmp_path / "export.xml"
    path.write_bytes(gensim_xml(ARTICLES))
    assert read_planned(path, "wikipedia", tmp_path / "tmp") == 1
    assert marked_bytes(tmp_path / "tmp") == os.path.getsize(path)


def test_a_parquet_file_read_in_spans_of_row_groups_is_counted_once(tmp_path) -> None:
    """Each span's reader reads the footer too: only the last span, whose bytes it lies in,
    counts it (the leading magic number, 4 bytes, is never read)."""
    from tests.helpers import write_parquet

    rows = [{"id": f"r{i}", "text": f"Row {i} has words. " * 30} for i in range(300)]
    path = Path(write_parquet(tmp_path / "p.parquet", rows, row_group_size=10))
    items = [(*item, 0) for item in plan_reads(("parquet", str(path), path.name), 20_000)]
    assert len(items) == 3
    for item in items:
        list(read_group([item], str(tmp_path / "tmp"), 10_000, False))
    assert os.path.getsize(path) - 4 == marked_bytes(tmp_path / "tmp")


class RecordedBlob:
    """An object in a store that records each ranged request (start, end inclusive)."""

    def __init__(self, data: bytes):
        self.data, self.asked = data, []

    def download_as_bytes(self, start: int = 0, end: int | None = None) -> bytes:
        self.asked.append((start, end))
        return self.data[start : None if end is None else end + 1]


def test_a_span_asks_an_object_store_for_little_past_its_end(monkeypatch) -> None:
    """Requests of 8 MiB up to the span's end, then of 256 KiB: the reader that finishes a line
    or a page past the end needs a little, not another 8 MiB."""
    from pipeline.files import fsio, gcs

    data = bytes(range(256)) * (3 << 16)  # 48 MiB
    stored = RecordedBlob(data)
    monkeypatch.setattr(gcs, "blob", lambda path: stored)  # the ranged reader's
    with fsio.open_read("gs://b/f", stop=(20 << 20) + 5) as f:
        f.seek(3 << 20)
        assert f.read((17 << 20) + 5 + 1000) == data[3 << 20 : (20 << 20) + 5 + 1000]
    assert stored.asked[-1] == ((20 << 20) + 5, (20 << 20) + 5 + (256 << 10) - 1)
    assert all(end < (20 << 20) + 5 for _, end in stored.asked[:-1])
    asked = sum(end - start + 1 for start, end in stored.asked)
    assert asked == (17 << 20) + 5 + (256 << 10)  # without the stop: 24 MiB
    stored.asked.clear()  # a long document read on past the stop: requests grow back
    with fsio.open_read("gs://b/f", stop=1 << 20) as f:
        f.seek(1 << 20)
        assert f.read(12 << 20) == data[1 << 20 : 13 << 20]
    sizes = [(end - start + 1) >> 10 for start, end in stored.asked]
    assert sizes[:6] == [256, 256, 512, 1024, 2048, 4096] and max(sizes) == 8192, sizes
