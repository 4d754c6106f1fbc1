"""Documents, the counts readers keep, and bounded-memory line reading: the readers' base.

The readers that turn one input file into documents live in their own modules
(`pipeline.text_formats`, `pipeline.wikipedia`, `pipeline.jsonl`) and are named by format in
`pipeline.readers`; this module imports none of them. A reader takes a binary file object,
the file's path relative to its input root (which makes document ids stable, whatever the
worker or the reading order) and a `Tally` for counts, and yields `Document`s in reading
order. Readers for other formats follow the same shape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

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
                f"{where}: {detail}. Fix or remove it, or pass --skip-bad-input (make: "
                "ARGS=--skip-bad-input) to skip and count such input"
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
