"""The first bytes of an input's first file, read as its format's reader reads them, before any
work starts: a wrong `--format` (a text file given as Wikipedia, a gzip file named `.txt`, a
JSON Lines file whose first record is not JSON) is refused in the reader's own words before OUT
is made or locked, and before Beam starts. Only the head is read (`HEAD_BYTES`, decompressed);
a bad record further on is still found by the reader, where `--skip-bad-input` skips and
counts it (with that flag nothing is refused here)."""

from __future__ import annotations

import io
from typing import BinaryIO

from pipeline.sources.compressed import decompressed
from pipeline.sources.documents import Tally
from pipeline.sources.jsonl import read_jsonl
from pipeline.sources.streams import text_stream
from pipeline.sources.wikipedia.pages import refuse_non_export
from pipeline.sources.wikipedia.split import PAGE_OPEN, as_utf8

HEAD_BYTES = 1 << 16


def check_head(fmt: str, path: str, rel: str, open_raw) -> None:
    """Raises `BadInputError` when the file at `path` (`rel` within its input) does not start
    as format `fmt` does; `open_raw(path)` opens it as stored."""
    with open_raw(path) as raw:
        head = read_head(decompressed(raw, path))
    whole = len(head) < HEAD_BYTES
    if fmt == "wikipedia":
        text = read_all(as_utf8(io.BytesIO(head)))
        if text.strip():  # an empty file is dropped and counted, not refused
            refuse_non_export(text.split(PAGE_OPEN, 1)[0], rel)
        return
    tally = Tally()  # strict: its first bad record raises
    stream = text_stream(io.BytesIO(head), rel, tally)
    if fmt != "jsonl" or stream is None:
        return
    text = read_all(stream)
    if not whole:  # only whole lines: the head may end inside a record
        text = text[: text.rfind(b"\n") + 1]
    for _ in read_jsonl(io.BytesIO(text), rel, tally):
        pass


def read_head(f: BinaryIO) -> bytes:
    parts, size = [], 0
    while size < HEAD_BYTES and (part := f.read(HEAD_BYTES - size)):
        parts.append(part)
        size += len(part)
    return b"".join(parts)[:HEAD_BYTES]


def read_all(f: BinaryIO) -> bytes:
    parts = []
    while part := f.read(HEAD_BYTES):
        parts.append(part)
    return b"".join(parts)
