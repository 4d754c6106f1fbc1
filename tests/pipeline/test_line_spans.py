"""A large text, paragraphs or JSON Lines file read in spans by many workers gives the documents,
ids and counts of the same file read whole by one: cut at every offset of hostile files."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from pipeline.sources.documents import Tally
from pipeline.sources.line_spans import (
    count_line_span,
    numbered,
    numbered_spans,
    plan_line_spans,
    read_line_span,
)
from pipeline.sources.readers import READERS
from pipeline.sources.spans import Span

HOSTILE_TEXT = (
    "\ufeff\n\n  \nFirst document, first line.\r\nIts second line.\n\n"
    "\u3000\n\xa0 \t\nSecond\x00 document \xff\xfe bytes not UTF-8.\n\x00\x00\n"
    "Third, after a line of NUL bytes alone.\n \n\n\n"
    "A document of many lines.\n" + "Another of its lines.\n" * 6 + "\r\n"
    "Short.\n\nx\n\ny\n\n"
    "Too long a document: " + "many words " * 30 + "\n\n"
    "The last, without a newline at its end."
).encode("utf-8", "surrogateescape")
HOSTILE_TEXT = HOSTILE_TEXT.replace("\xff\xfe".encode(), b"\xff\xfe")


def whole(data: bytes, fmt: str) -> tuple[list, dict]:
    tally = Tally(skip_bad_input=True)
    docs = list(READERS[fmt](io.BytesIO(data), "f", tally, source=fmt))
    return [(d.id, d.paragraphs, d.presplit) for d in docs], dict(tally.counts)


def in_spans(data: bytes, fmt: str, cuts: list[int]) -> tuple[list, dict]:
    """Counts each span, numbers them, reads each: what the build's steps do."""
    bounds = [0, *cuts, len(data)]
    spans = [Span(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
    counted = {("f", s.start): count_line_span(io.BytesIO(data), fmt, "f", s) for s in spans}
    numbers = numbered_spans(counted.items())
    docs, tally = [], Tally(skip_bad_input=True)
    for span in spans:
        span = numbered(span, "f", numbers)
        docs += read_line_span(io.BytesIO(data), fmt, "f", span, tally)
    return [(d.id, d.paragraphs, d.presplit) for d in docs], dict(tally.counts)


@pytest.fixture
def short_documents(monkeypatch):
    """Documents over 200 characters are too long (32 Mi characters in a build)."""
    import pipeline.sources.line_spans as line_spans
    import pipeline.sources.text as text

    monkeypatch.setattr(text, "MAX_DOCUMENT_CHARS", 200)
    monkeypatch.setattr(line_spans, "MAX_DOCUMENT_CHARS", 200)


@pytest.mark.parametrize("fmt", ["text", "paragraphs"])
def test_text_cut_once_at_every_offset_reads_as_the_whole_file(fmt, short_documents) -> None:
    expected = whole(HOSTILE_TEXT, fmt)
    assert len(expected[0]) == 8 and expected[1]["documents_dropped.text_document_too_long"] == 1
    assert expected[1]["undecodable_bytes_replaced"] == 2 and expected[1]["nul_bytes_dropped"] == 3
    for cut in range(1, len(HOSTILE_TEXT)):
        assert in_spans(HOSTILE_TEXT, fmt, [cut]) == expected, cut


def test_text_cut_into_many_spans_reads_as_the_whole_file(short_documents) -> None:
    rng = np.random.default_rng(0)
    expected = whole(HOSTILE_TEXT, "text")
    for _ in range(300):
        k = int(rng.integers(2, 12))
        cuts = sorted(set(rng.integers(1, len(HOSTILE_TEXT), size=k).tolist()))
        assert in_spans(HOSTILE_TEXT, "text", cuts) == expected, cuts


def test_lines_too_long_to_hold_are_counted_once_wherever_the_cuts_fall() -> None:
    long_line = b"x" * ((1 << 20) + 5)
    data = b"One.\n" + long_line + b"\nTwo.\n\n" + long_line + b"\n\nThree.\n" + long_line
    expected = whole(data, "text")
    assert expected[1]["lines_dropped.too_long"] == 3 and len(expected[0]) == 2
    for cut in (1, 5, 6, 100, len(long_line), len(long_line) + 6, len(long_line) + 12):
        for second in (len(data) - 3, len(data) - len(long_line) - 2, len(data) - 10):
            assert in_spans(data, "text", sorted({cut, second})) == expected, (cut, second)


def jsonl_lines() -> bytes:
    records = [
        {"id": "a", "text": "First record.\n\nIts second paragraph."},
        {"text": "A record without an id, named by its line."},
        {"id": 7, "text": "An integer id."},
        {"id": "e", "text": "   "},
    ]
    lines = [json.dumps(r) for r in records]
    lines[1:1] = ["", "  \t", "not JSON at all", "[1, 2]", '{"text": 3}']
    lines += [json.dumps({"text": f"Record {i} \xff and more."}) for i in range(8)]
    return ("\ufeff" + "\r\n".join(lines) + "\n\n").encode() + b'{"text": "bad \xff byte"}'


def test_jsonl_cut_at_every_offset_reads_as_the_whole_file() -> None:
    data = jsonl_lines()
    expected = whole(data, "jsonl")
    assert len(expected[0]) == 12 and expected[1]["documents_dropped.jsonl_bad_record"] == 3
    assert "jsonl:f#7" in [d[0] for d in expected[0]]  # numbered by its line
    for cut in range(1, len(data)):
        assert in_spans(data, "jsonl", [cut]) == expected, cut
    assert in_spans(data, "jsonl", list(range(7, len(data), 13))) == expected


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_a_file_of_blank_lines_alone_is_one_empty_file(fmt) -> None:
    data = b"\n \n\t\n\n" * 20
    expected = whole(data, fmt)
    assert expected[1] == {"documents_read": 1, "documents_dropped.empty_file": 1}
    for cut in range(1, len(data), 3):
        assert in_spans(data, fmt, [cut, min(cut + 17, len(data) - 1)]) == expected, cut


def test_which_files_are_cut(tmp_path) -> None:
    files = {
        "big.txt": b"Some words.\n" * 300,
        "big.jsonl": b'{"text": "Some words."}\n' * 200,
        "small.txt": b"Few words.\n" * 10,
        "wide.txt": "\ufeffSome words.\n".encode("utf-16") * 300,
        "binary.txt": b"\x00\x01\x02\x03" * 1000,
        "packed.txt.gz": b"\x1f\x8b" + b"\x00" * 5000,
    }
    plans = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        fmt = "jsonl" if name.endswith(".jsonl") else "text"
        plans[name] = plan_line_spans(fmt, str(tmp_path / name), len(data), open_rb, 1000)
    assert [s.end - s.start for s in plans["big.txt"]] == [900] * 4
    assert plans["big.jsonl"][-1].end == len(files["big.jsonl"])
    assert all(plans[n] == [None] for n in ("small.txt", "wide.txt", "binary.txt", "packed.txt.gz"))
    assert plan_line_spans("books", str(tmp_path / "big.txt"), 3600, open_rb, 1000) == [None]
    assert plan_line_spans("text", str(tmp_path / "big.txt"), 3600, open_rb) == [None]


def open_rb(path: str):
    return open(path, "rb")


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_the_counts_come_from_blank_lines_and_newlines_alone(fmt, monkeypatch) -> None:
    """The count step reads no line where no line is too long (the reader's own loop, counted
    to compare, gives the same)."""
    import pipeline.sources.line_spans as line_spans

    data = HOSTILE_TEXT if fmt == "text" else jsonl_lines()
    fast = {}
    for cut in range(1, len(data)):
        for span in (Span(0, cut), Span(cut, len(data))):
            fast[span] = count_line_span(io.BytesIO(data), fmt, "f", span)
    monkeypatch.setattr(line_spans, f"_count_{fmt}", lambda *args: None)  # the reader's loop
    assert fast == {s: count_line_span(io.BytesIO(data), fmt, "f", s) for s in fast}
    assert sum(fast[Span(0, cut)][0] for cut in (1, len(data) - 1)) > 1


class CountedBytes(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, n=-1):
        data = super().read(n)
        self.read_bytes += len(data)
        return data


@pytest.mark.parametrize(
    "data",
    [b"A sentence of the one document.\n" * 20_000, b"one line, never ended " * 15_000],
    ids=["no-blank-line", "no-newline"],
)
def test_a_span_inside_one_long_document_reads_little_past_its_end(data, monkeypatch) -> None:
    """A file of one document (no blank line, or no newline) cut into many spans: the first
    reads the document (as a worker reading the file whole would), every other span reads its
    own bytes and little more, to count and to read: before, each read on to the file's end."""
    import pipeline.sources.line_spans as line_spans

    monkeypatch.setattr(line_spans, "CHUNK_BYTES", 4096)
    expected = whole(data, "text")
    assert in_spans(data, "text", list(range(10_000, len(data), 10_000))) == expected
    for start in range(10_000, len(data) - 10_000, 10_000):
        span = Span(start, start + 10_000)
        counted, read = CountedBytes(data), CountedBytes(data)
        assert count_line_span(counted, "text", "f", span) == (0, False)
        assert (
            list(
                read_line_span(
                    read, "text", "f", numbered(span, "f", {("f", start): (1, 0)}), Tally()
                )
            )
            == []
        )
        assert max(counted.read_bytes, read.read_bytes) <= 10_000 + 3 * 4096, start
