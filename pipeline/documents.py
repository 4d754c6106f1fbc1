"""Documents and the plain (Beam-free) readers that turn one input file into documents.

A reader takes a binary file object, the file's path relative to its input root (which makes
document ids stable, whatever the worker or the reading order) and a `Tally` for counts, and
yields `Document`s in reading order. Readers for other formats follow the same shape.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from pipeline.boilerplate import strip_boilerplate, text_stream

CHUNK_BYTES = 1 << 20
DEFAULT_MAX_LINE_BYTES = 1 << 20  # longer lines are skipped and counted, never buffered whole


@dataclass(frozen=True)
class Document:
    id: str  # stable: source + the document's own identity (relative path, block, page id)
    source: str  # the input format or label it came from ("books", "text", ...)
    paragraphs: tuple[str, ...]  # reading order, running prose only
    presplit: bool = False  # True: each paragraph is already one sentence (reference format)


class BadInputError(ValueError):
    """Input that is not what its format promises; the message names the file and the place."""


@dataclass
class Tally:
    """Counts of what was read, kept and dropped (by reason); merged into the manifest.

    `drop` is for a reader that skips a whole document (a malformed page or record): it is
    counted as read and as dropped, so that read = used + dropped holds. Other things (lines,
    paragraphs, bytes) are counted with `inc`.
    """

    counts: Counter = field(default_factory=Counter)
    skip_bad_input: bool = False  # bad records: skip and count, instead of stopping the run

    def inc(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def drop(self, reason: str, n: int = 1) -> None:
        self.counts["documents_read"] += n
        self.counts[f"documents_dropped.{reason}"] += n

    def bad(self, reason: str, where: str, detail: str, n: int = 1) -> None:
        """A malformed record (page, JSON line, binary book): dropped and counted when the run
        skips bad input, else the run stops here, naming the file and the place."""
        if not self.skip_bad_input:
            raise BadInputError(
                f"{where}: {detail}. Fix or remove it, or pass --skip-bad-input to skip and "
                "count such input"
            )
        self.drop(reason, n)


def iter_lines(
    f: BinaryIO, tally: Tally, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[str]:
    """Decoded lines (without the newline) in bounded memory.

    Undecodable bytes become U+FFFD and are counted; a line longer than `max_line_bytes`
    is skipped (counted as `lines_dropped.too_long`) without ever being held whole.
    """
    pending = b""
    skipping = False
    while True:
        chunk = f.read(CHUNK_BYTES)
        if not chunk:
            break
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        for raw in parts:
            if skipping:
                skipping = False
                continue
            if len(raw) > max_line_bytes:
                tally.inc("lines_dropped.too_long")
                continue
            yield decode(raw, tally)
        if len(pending) > max_line_bytes:
            if not skipping:
                tally.inc("lines_dropped.too_long")
            skipping, pending = True, b""
    if pending and not skipping:
        yield decode(pending, tally)


def decode(raw: bytes, tally: Tally) -> str:
    if b"\0" in raw:  # never text; dropped and counted
        tally.inc("nul_bytes_dropped", raw.count(b"\0"))
        raw = raw.replace(b"\0", b"")
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        tally.inc("undecodable_bytes_replaced", text.count("\ufffd") - raw.count(b"\xef\xbf\xbd"))
        return text


def read_text(f: BinaryIO, rel: str, tally: Tally, source: str = "text") -> Iterator[Document]:
    """The reference format: one sentence per line, a blank line between documents. Binary
    input is a bad record; UTF-16/32 with a byte-order mark is decoded; an empty file is
    counted as `documents_dropped.empty_file`."""
    f = text_stream(f, rel, tally)
    if f is None:
        return
    block: list[str] = []
    number = 0
    for line in iter_lines(f, tally):
        line = line.strip()
        if line:
            block.append(line)
            continue
        if block:
            yield Document(f"{source}:{rel}#{number}", source, tuple(block), presplit=True)
            number += 1
            block = []
    if block:
        yield Document(f"{source}:{rel}#{number}", source, tuple(block), presplit=True)
    elif number == 0:
        tally.drop("empty_file")


_SPACE = re.compile(r"\s+")


def read_book(f: BinaryIO, rel: str, tally: Tally, source: str = "books") -> Iterator[Document]:
    """One book per file; paragraphs split on blank lines, lines inside a paragraph joined.
    A file with no text at all is dropped (counted as `documents_dropped.empty_file`); a
    binary file is a bad record; front and back matter are stripped (`pipeline.boilerplate`)."""
    f = text_stream(f, rel, tally)
    if f is None:
        return
    paragraphs: list[str] = []
    current: list[str] = []
    too_long = tally.counts["lines_dropped.too_long"]
    for line in iter_lines(f, tally):
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(_SPACE.sub(" ", " ".join(current)))
            current = []
    if current:
        paragraphs.append(_SPACE.sub(" ", " ".join(current)))
    if not paragraphs:  # a book of overlong lines only is not an empty file
        overlong = tally.counts["lines_dropped.too_long"] > too_long
        tally.drop("only_overlong_lines" if overlong else "empty_file")
        return
    paragraphs = strip_boilerplate(paragraphs, tally)
    if not paragraphs:
        tally.drop("books_no_prose")
        return
    yield Document(f"{source}:{rel}", source, tuple(paragraphs))


def read_wikipedia(f: BinaryIO, rel: str, tally: Tally, source: str = "wikipedia"):
    """MediaWiki XML exports: see `pipeline.wikipedia` (imported here, as it builds on this)."""
    from pipeline.wikipedia import read_wikipedia as read

    return read(f, rel, tally, source)


def read_jsonl(f: BinaryIO, rel: str, tally: Tally, source: str = "jsonl"):
    """JSON Lines with `text` and optional `id`: see `pipeline.jsonl`."""
    from pipeline.jsonl import read_jsonl as read

    return read(f, rel, tally, source)


READERS = {"text": read_text, "books": read_book, "wikipedia": read_wikipedia, "jsonl": read_jsonl}
