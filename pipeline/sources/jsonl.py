"""JSON Lines: one object per line with a `text` field (another name with `--text-field`) and
an optional `id` (the shape most dataset exports take). One line is one document; its text
splits into paragraphs on blank lines.

A document's id is `source:id` when the record has a string or integer `id`, else
`source:relative/path#line` (1-based), so ids never depend on the reading order. A line that
is not a JSON object with a string `text` is a bad record: the run stops naming the file and
line, or with `--skip-bad-input` it is skipped and counted (`documents_dropped.jsonl_bad_record`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator
from typing import BinaryIO

from pipeline.sources.documents import MAX_DOCUMENT_CHARS, Document, Tally, one_space
from pipeline.sources.streams import CHUNK_BYTES, decode, text_stream

MAX_RECORD_BYTES = MAX_DOCUMENT_CHARS  # a longer line is skipped and counted, never held whole
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def numbered_lines(
    f: BinaryIO, tally: Tally, max_line_bytes: int = MAX_RECORD_BYTES
) -> Iterator[tuple[int, str | None]]:
    """(1-based line number, decoded line) in bounded memory; None for a line over the limit,
    which is skipped without being held (so later line numbers stay exact)."""
    pending, number, too_long = bytearray(), 0, False
    while chunk := f.read(CHUNK_BYTES):
        *complete, last = chunk.split(b"\n")
        for part in complete:
            number += 1
            if too_long or len(pending) + len(part) > max_line_bytes:
                yield number, None
            else:
                yield number, decode(bytes(pending) + part if pending else part, tally)
            pending.clear()
            too_long = False
        if too_long or len(pending) + len(last) > max_line_bytes:
            too_long = True
            pending.clear()
        else:
            pending += last
    if pending or too_long:
        yield number + 1, None if too_long else decode(bytes(pending), tally)


def text_paragraphs(text: str) -> tuple[str, ...]:
    """Blank-line separated blocks, whitespace inside each collapsed."""
    return tuple(filter(None, map(one_space, _BLANK_LINE.split(text))))


def parse_record(
    line: str, where: str, tally: Tally, text_field: str = "text", id_field: str | None = "id"
) -> tuple[str | None, str] | None:
    """(id or None, text) of one line, or None when the line is a bad record (counted)."""
    try:
        record = json.loads(line)
    except ValueError as e:
        tally.bad("jsonl_bad_record", where, f"not JSON ({e})")
        return None
    if not isinstance(record, dict):
        tally.bad("jsonl_bad_record", where, f"a JSON {type(record).__name__}, not an object")
        return None
    text = record.get(text_field)
    if not isinstance(text, str):
        name = f"`{text_field}`"
        if text is None:  # the fields there are, for a text under another name
            fields = ", ".join(map(repr, list(record)[:8])) + (", ..." if len(record) > 8 else "")
            found = f"no {name} field (its fields: {fields or 'none'})"
        else:
            found = f"{name} is a {type(text).__name__}"
        tally.bad(
            "jsonl_bad_record",
            where,
            f"{found}; each line needs a string {name} (--text-field names the field)",
        )
        return None
    ident = record.get(id_field)
    keep_id = isinstance(ident, (str, int)) and not isinstance(ident, bool) and str(ident) != ""
    return (str(ident) if keep_id else None), text


def read_jsonl(
    f: BinaryIO,
    rel: str,
    tally: Tally,
    source: str = "jsonl",
    text_field: str = "text",
    id_field: str | None = "id",
) -> Iterator[Document]:
    """Documents of one JSON Lines file (see the module docstring); the text is the records'
    `text_field`, the id their `id_field` (None: every record is named by its line)."""
    f = text_stream(f, rel, tally)
    if f is None:
        return
    records = numbered_lines(f, tally)
    seen_any = yield from jsonl_documents(records, rel, tally, source, text_field, id_field)
    if not seen_any:
        tally.drop("empty_file")


def jsonl_documents(
    records, rel: str, tally: Tally, source: str, text_field: str, id_field: str | None
) -> Generator[Document, None, bool]:
    """The documents of `records`, (line number, line or None when too long), as `read_jsonl`
    reads them; returns whether any line held something (a record, or one too long)."""
    seen_any = False
    first_line: dict[str, int] = {}  # id -> line: two records with one id are one document
    for number, line in records:
        where = f"{rel}:{number}"
        if line is not None and not line.strip():
            continue  # a blank line holds no record
        seen_any = True
        if line is None:
            tally.drop("jsonl_record_too_long")
            continue
        parsed = parse_record(line, where, tally, text_field, id_field)
        if parsed is None:
            continue
        ident, text = parsed
        if ident is not None:
            if ident in first_line:
                tally.bad(
                    "jsonl_duplicate_id",
                    where,
                    f"id {ident!r} was already used on line {first_line[ident]}; ids name one "
                    "document each",
                )
                continue
            first_line[ident] = number
        paragraphs = text_paragraphs(text)
        if not paragraphs:
            tally.drop("jsonl_empty_text")
            continue
        doc_id = f"{source}:{ident}" if ident is not None else f"{source}:{rel}#{number}"
        yield Document(doc_id, source, paragraphs)
    return seen_any
