"""The first bytes of an input's first file, read as its format's reader reads them, before any
work starts: a wrong `--format` (a text file given as Wikipedia, a gzip file named `.txt`, a
JSON Lines file whose first record is not JSON) is refused in the reader's own words before OUT
is made or locked, and before Beam starts; and a MediaWiki export or JSON Lines file given as
`text` or `books` (the default format takes an input without a prefix as text), whose markup
would otherwise be read as prose. Only the head is read (`HEAD_BYTES`, decompressed); a bad
record further on is still found by the reader, where `--skip-bad-input` skips and counts it
(with that flag only another format is refused here)."""

from __future__ import annotations

import io
import json
import re
from typing import BinaryIO

from pipeline.sources.compressed import decompressed
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.jsonl import read_jsonl
from pipeline.sources.parquet import MAGIC, opened
from pipeline.sources.streams import text_stream
from pipeline.sources.wikipedia.pages import refuse_non_export
from pipeline.sources.wikipedia.split import PAGE_OPEN, as_utf8

HEAD_BYTES = 1 << 16

# an export's start: optional whitespace and XML declaration, then its root element
_EXPORT_START = re.compile(rb"\s*(?:<\?xml[^>]*\?>\s*)?<mediawiki[\s>]")


def check_head(
    fmt: str, path: str, rel: str, open_raw, strict: bool = True, text_field: str = "text"
) -> None:
    """Raises `BadInputError` when the file at `path` (`rel` within its input) does not start
    as format `fmt` does; `open_raw(path)` opens it as stored. Not `strict` (--skip-bad-input),
    only a file of another format read as `text` or `books` is refused: the readers would take
    its markup as prose, where a bad file is skipped and counted. JSON Lines and Parquet
    records hold their text in `text_field`."""
    try:
        with open_raw(path) as raw:
            head = read_head(decompressed(raw, path))
            if strict and fmt == "parquet" and head.startswith(MAGIC):
                opened(raw, rel, text_field)  # its columns, from the footer at its end
    except BadInputError:
        if strict:
            raise
        return
    whole = len(head) < HEAD_BYTES
    if fmt == "parquet" or head.startswith(MAGIC):
        refuse_parquet_mismatch(fmt, head, rel, strict)
        return
    if fmt == "wikipedia":
        text = read_all(as_utf8(io.BytesIO(head)))
        if strict and text.strip():  # an empty file is dropped and counted, not refused
            refuse_non_export(text.split(PAGE_OPEN, 1)[0], rel)
        return
    tally = Tally(skip_bad_input=not strict)  # strict: its first bad record raises
    stream = text_stream(io.BytesIO(head), rel, tally)
    if stream is None:
        return
    text = read_all(stream)
    if fmt != "jsonl":
        refuse_other_format(fmt, text, whole, rel, text_field)
    elif strict:
        if not whole:  # only whole lines: the head may end inside a record
            text = text[: text.rfind(b"\n") + 1]
        for _ in read_jsonl(io.BytesIO(text), rel, tally, text_field=text_field):
            pass


def refuse_parquet_mismatch(fmt: str, head: bytes, rel: str, strict: bool) -> None:
    """A Parquet file given as another format, or (`strict`) a parquet input that is not one;
    the reader itself finds what else is wrong with a Parquet file (its columns, its rows)."""
    if fmt != "parquet":
        raise BadInputError(
            f"{rel}: a Parquet file, whose bytes the {fmt} format would take as text; pass "
            "--format parquet (make: FORMAT=parquet) or prefix the input with parquet:, or "
            "leave the file out of the input"
        )
    if strict and head and not head.startswith(MAGIC):
        raise BadInputError(
            f"{rel}: not a Parquet file (it does not start with {MAGIC.decode()}); is this the "
            "right --format?"
        )


def refuse_other_format(
    fmt: str, text: bytes, whole: bool, rel: str, text_field: str = "text"
) -> None:
    """A MediaWiki export, or JSON Lines records in every whole line, given as `text` or
    `books` (as the default --format takes any input without a prefix)."""
    other = None
    if _EXPORT_START.match(text):
        other, kind = "wikipedia", "a MediaWiki XML export"
    else:
        lines = [line for line in text.split(b"\n")[: None if whole else -1] if line.strip()]
        if lines and all(_is_record(line, text_field) for line in lines):
            other, kind = "jsonl", "JSON Lines, a record per line"
    if other:
        raise BadInputError(
            f"{rel}: {kind}, whose markup the {fmt} format would take as prose; pass "
            f"--format {other} (make: FORMAT={other}) or prefix the input with {other}:, "
            "or leave the file out of the input"
        )


def _is_record(line: bytes, text_field: str = "text") -> bool:
    if not line.lstrip().startswith(b"{"):
        return False
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and isinstance(record.get(text_field), str)


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
