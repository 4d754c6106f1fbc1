"""Spans: the parts of one large input file that workers read at once, each the bytes [start,
end) of the file (a Wikipedia dump's, `pipeline.sources.wikipedia.spans`; a text or JSON Lines
file's, `pipeline.sources.line_spans`; a Parquet file's, by row groups)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from pipeline.sources.streams import CHUNK_BYTES


class BoundedReader:
    """The bytes [start, end) of a seekable file, as a file-like `read(n)`."""

    def __init__(self, raw: BinaryIO, start: int, end: int | None):
        raw.seek(start)
        self._raw, self._left = raw, None if end is None else end - start

    def read(self, n: int = CHUNK_BYTES) -> bytes:
        if self._left is None:
            return self._raw.read(n)
        data = self._raw.read(min(n, self._left)) if self._left > 0 else b""
        self._left -= len(data)
        return data


@dataclass(frozen=True)
class Span:
    """The part of one input file that one worker reads: bytes [start, end) of the file."""

    start: int
    end: int
    header_end: int = 0  # a multistream dump: its first stream (the <siteinfo>) ends here
    # a text or JSON Lines file (`pipeline.sources.line_spans`), once its spans are counted: the
    # documents (lines) before this span, and whether the file holds none (said by its first span)
    first: int = 0
    empty: bool = False


def fixed_spans(size: int, target_bytes: int) -> list[Span]:
    """A file of `size` bytes cut at fixed offsets into spans of at most `target_bytes`, as
    even as they come (what a span owns is its reader's to say: the pages, lines or documents
    that start inside it)."""
    count = max(1, -(-size // target_bytes))
    step = -(-size // count) if size else 1
    return [Span(i * step, min(size, (i + 1) * step)) for i in range(count)]
