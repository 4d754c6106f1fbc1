"""Large uncompressed files of the line formats (`text`, `paragraphs`, JSON Lines) read by many
workers at once, a span of the file each, into the documents, ids and counts the file gives when
one worker reads it whole.

A file over `LINE_SPAN_BYTES` is cut at fixed offsets (`plan_line_spans`). A span owns the JSON
Lines records whose line starts inside it, and the text documents whose blank line before them
starts inside it (the file's first document: the first span's); a document that runs past the
span's end is read on to its end, and a span that starts inside a document skips to the first
blank line (meeting none before its end, it owns nothing, and reads no further). Each line's own
counts (bytes not UTF-8, a line too long) go to the span it starts
in. Ids number documents (text) and lines (JSON Lines) from the file's start, so each span is
counted first (`count_line_span`, the spans in parallel), and a span's reader is told the count
before it (`Span.first`, from `numbered_spans`).

Read whole, as before: compressed files, and files whose first bytes are UTF-16 or UTF-32 (which
cannot be cut at any byte) or look binary (refused, or counted, as a whole file).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import BinaryIO

from pipeline.sources.compressed import compression_of
from pipeline.sources.documents import MAX_DOCUMENT_CHARS, Document, Tally
from pipeline.sources.jsonl import MAX_RECORD_BYTES, jsonl_documents
from pipeline.sources.spans import Span, fixed_spans
from pipeline.sources.streams import (
    CHUNK_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    SNIFF_BYTES,
    WIDE_BOMS,
    PrefixedReader,
    decode,
    looks_binary,
    magic_kind,
    text_stream,
)
from pipeline.sources.text import text_document

# bytes per span (of a Parquet file's too, `pipeline.sources.parquet.plan_parquet_spans`): as a
# plain Wikipedia export's, so that a file of a few hundred MB is read by every worker at once
LINE_SPAN_BYTES = 32 << 20
LINE_FORMATS = frozenset({"text", "paragraphs", "jsonl"})
UTF8_BOM = b"\xef\xbb\xbf"


def plan_line_spans(
    fmt: str, path: str, size: int, open_raw, span_bytes: int = LINE_SPAN_BYTES
) -> list[Span | None]:
    """Spans of about `span_bytes` of an uncompressed file of a line format larger than that,
    or [None]: read whole."""
    if fmt not in LINE_FORMATS or size <= span_bytes or compression_of(path) is not None:
        return [None]
    with open_raw(path) as f:
        head = f.read(SNIFF_BYTES)
    if head.startswith(WIDE_BOMS) or magic_kind(head) is not None or looks_binary(head):
        return [None]
    return list(fixed_spans(size, span_bytes))


def read_line_span(
    raw: BinaryIO,
    fmt: str,
    rel: str,
    span: Span,
    tally: Tally,
    text_field: str = "text",
    id_field: str | None = "id",
) -> Iterator[Document]:
    """The documents one span owns, named and counted as the whole file's reader names and
    counts them (`span.first`: the documents, or JSON Lines' lines, before it)."""
    opened = _positioned(raw, rel, span, tally)
    if opened is not None:
        if fmt == "jsonl":
            lines = _owned_lines(_offset_lines(*opened, span, tally, MAX_RECORD_BYTES), span)
            yield from jsonl_documents(lines, rel, tally, fmt, text_field, id_field)
        else:
            lines = _offset_lines(*opened, span, tally, DEFAULT_MAX_LINE_BYTES)
            for number, (block, size) in enumerate(_text_blocks(lines, span, tally), span.first):
                doc_id = f"{fmt}:{rel}#{number}"
                yield from text_document(block, size, doc_id, fmt, tally, fmt == "text")
    if span.empty and span.start == 0:
        tally.drop("empty_file")


def count_line_span(raw: BinaryIO, fmt: str, rel: str, span: Span) -> tuple[int, bool]:
    """(documents, or JSON Lines' lines, the span owns; whether any holds something). Found from
    the blank lines (text) and the newlines (JSON Lines) alone, without reading each line; the
    rare span with a line too long to hold, or (JSON Lines) with no byte that is not blank, is
    counted again as it is read."""
    scratch = Tally()
    opened = _positioned(raw, rel, span, scratch)
    if opened is None:
        return 0, False
    fast = _count_jsonl(*opened, span) if fmt == "jsonl" else _count_text(*opened, span)
    if fast is not None:
        return fast
    raw.seek(0)
    opened = _positioned(raw, rel, span, scratch)
    if fmt == "jsonl":
        count, seen = 0, False
        for _, line in _owned_lines(_offset_lines(*opened, span, scratch, MAX_RECORD_BYTES), span):
            count += 1
            seen = seen or line is None or bool(line.strip())
        return count, seen
    lines = _offset_lines(*opened, span, scratch, DEFAULT_MAX_LINE_BYTES)
    count = sum(1 for _ in _text_blocks(lines, span, scratch))
    return count, count > 0


@functools.cache
def _blank_patterns() -> tuple[re.Pattern, bytes]:
    """(a newline followed by a blank line, its bytes the group, found without decoding a line;
    every byte of a blank line): a blank line is whitespace as `str.strip` removes it, and NUL,
    which decoding drops. Made on first use: listing the whitespace takes a tenth of a CPU-second,
    which a process that counts no span would pay at import."""
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace() and c != 10]
    one_byte = b"".join(re.escape(c.encode()) for c in spaces if ord(c) < 0x80) + b"\\x00"
    wider = b"|".join(re.escape(c.encode()) for c in spaces if ord(c) >= 0x80)
    blank_after = re.compile(rb"\n(?=((?:[" + one_byte + rb"]|" + wider + rb")*)\n)")
    return blank_after, bytes(sorted(set(b"".join(c.encode() for c in spaces)) | {0, 10}))


def _count_text(f, at: int, unseen: int, span: Span) -> tuple[int, bool] | None:
    """(documents the span owns, whether any) from its blank lines: a document starts at a line
    that follows a blank one (the first span: or begins the file), and is counted as soon as
    that line is seen, so the count reads little past the span's end. None when a line too long
    to hold is met: it is not a line to the reader, which the blank lines alone cannot tell."""
    if DEFAULT_MAX_LINE_BYTES < CHUNK_BYTES:
        return None
    count, carry, base = 0, b"", at + unseen
    blank_after = _blank_patterns()[0]
    after = at if span.start == 0 else None  # a line after a blank line, not yet looked at
    while True:
        chunk = f.read(CHUNK_BYTES)
        cut = chunk.rfind(b"\n")
        if chunk and cut < 0:
            carry += chunk
            if len(carry) > DEFAULT_MAX_LINE_BYTES:
                return None
            continue
        buf = carry + (chunk[: cut + 1] if chunk else b"\n" if carry else b"")
        if not buf:
            break
        if buf.find(b"\n") > DEFAULT_MAX_LINE_BYTES:
            return None  # only a buffer's first line can be longer than a chunk
        for m in blank_after.finditer(b"\n" + buf):
            offset = base + m.start() if m.start() or base > at + unseen else at
            if after is not None and offset > after:
                count += 1  # lines between this blank line and the one before it
            if offset >= span.end:
                return count, count > 0
            after = offset + len(m.group(1)) + 1 + (unseen if offset == at else 0)
        base += len(buf) - (0 if chunk else 1)  # (the newline the file's last line lacked)
        if after is not None and after < base:
            count, after = count + 1, None  # a line, not blank, follows the last blank line
        if after is None and base >= span.end or not chunk:
            break
        carry = chunk[cut + 1 :]
    return count, count > 0


def _count_jsonl(f, at: int, unseen: int, span: Span) -> tuple[int, bool] | None:
    """(lines that start in the span, whether any holds a byte that is not blank); None when
    none does (blank lines, or a line too long and blank: the reader tells them apart)."""
    count, seen, base = 0, False, at + unseen
    while chunk := f.read(CHUNK_BYTES):
        if base == at + unseen and at < span.end:
            count += 1  # the line at `at`
        owned = max(0, min(len(chunk), span.end - 1 - base))  # a line starts after each newline
        count += chunk.count(b"\n", 0, owned)
        if not seen:
            last = chunk.find(b"\n", owned) if base + len(chunk) >= span.end else -1
            head = chunk[: last if last >= 0 else len(chunk)]
            seen = bool(head.translate(None, _blank_patterns()[1]))
        base += len(chunk)
        if base >= span.end and (seen or last >= 0):
            break
    return (count, seen) if seen else None


def numbered_spans(counted) -> dict:
    """((path, start), (count, seen)) of every span of some files -> {(path, start): (first,
    empty)}: the count before each span of its file, and whether the file holds nothing."""
    by_path: dict[str, list] = {}
    for (path, start), (count, seen) in counted:
        by_path.setdefault(path, []).append((start, count, seen))
    numbers = {}
    for path, spans in by_path.items():
        empty = not any(seen for _, _, seen in spans)
        first = 0
        for start, count, _ in sorted(spans):
            numbers[path, start] = (first, empty)
            first += count
    return numbers


def numbered(span: Span, path: str, numbers: dict) -> Span:
    """`span` told the count before it (`numbered_spans`)."""
    first, empty = numbers[path, span.start]
    return replace(span, first=first, empty=empty)


def _positioned(raw: BinaryIO, rel: str, span: Span, tally: Tally):
    """(the file from the span's first line on, that line's offset, the bytes of a byte-order
    mark the reader does not see), or None: no line starts in or after the span, or (the first
    span) the file is not text."""
    if span.start == 0:
        head = raw.read(SNIFF_BYTES)
        f = text_stream(PrefixedReader(head, raw), rel, tally)
        return None if f is None else (f, 0, len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0)
    raw.seek(span.start - 1)  # a line starts at `start` when the byte before it ends one
    at = span.start - 1
    while at + 1 < span.end and (chunk := raw.read(CHUNK_BYTES)):
        cut = chunk.find(b"\n")
        if cut >= 0:
            at += cut + 1
            return (PrefixedReader(chunk[cut + 1 :], raw), at, 0) if at < span.end else None
        at += len(chunk)
    return None  # no line starts in the span: it owns nothing


def _offset_lines(f, at: int, unseen: int, span: Span, tally: Tally, max_line_bytes: int):
    """(offset, line) of each line of `f` from offset `at` (where a line starts) to the file's
    end, cut and decoded as `iter_lines` and `numbered_lines` do: None for a line of more than
    `max_line_bytes`, never held whole. `unseen`: bytes of the first line that `f` does not
    give (a byte-order mark). A line's decoding is counted in `tally` only when it starts inside
    `span` (the span it starts in counts it)."""
    scratch = Tally()
    pending: list[bytes] = []
    length, too_long = 0, False
    while chunk := f.read(CHUNK_BYTES):
        *complete, last = chunk.split(b"\n")
        for part in complete:
            if too_long or length + len(part) > max_line_bytes:
                yield at, None
            else:
                raw = b"".join(pending) + part if pending else part
                yield at, decode(raw, tally if span.start <= at < span.end else scratch)
            at += unseen + length + len(part) + 1
            pending, length, too_long, unseen = [], 0, False, 0
        length += len(last)
        if too_long or length > max_line_bytes:
            pending, too_long = [], True
        elif last:
            pending.append(last)
    if length:
        counted = tally if span.start <= at < span.end else scratch
        yield at, None if too_long else decode(b"".join(pending), counted)


def _owned_lines(lines, span: Span) -> Iterator[tuple[int, str | None]]:
    """(line number in the file, line) of the lines that start inside the span."""
    number = span.first
    for at, line in lines:
        if at >= span.end:
            return
        number += 1
        yield number, line


def _text_blocks(lines, span: Span, tally: Tally) -> Iterator[tuple[list[str], int]]:
    """(lines kept, characters) of each text document the span owns, as `read_text` gathers
    them: a block over `MAX_DOCUMENT_CHARS` keeps no line (it is dropped, and keeps its
    number)."""
    anchor = -1 if span.start == 0 else None  # None: inside a document an earlier span owns
    block: list[str] = []
    size = 0
    for at, line in lines:
        if anchor is None and at >= span.end:
            return  # no blank line in the span: every document it meets is an earlier span's
        if line is None:
            if span.start <= at < span.end:
                tally.inc("lines_dropped.too_long")
            continue
        line = line.strip()
        if not line:
            if size:
                yield block, size
                block, size = [], 0
            if at >= span.end:
                return  # the documents after this blank line are the next span's
            anchor = at
            continue
        if not size and anchor is None:
            continue
        size += len(line)
        if size <= MAX_DOCUMENT_CHARS:
            block.append(line)
        elif block:
            block = []  # dropped when the document ends
    if size:
        yield block, size
