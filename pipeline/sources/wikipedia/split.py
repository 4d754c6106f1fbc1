"""A MediaWiki XML byte stream -> `<page>...</page>` chunks, never more than one page in memory.

The splitter does not parse XML: it finds page tags in the bytes, so one malformed page is one
bad record rather than the end of the file, and memory stays bounded on a dump of any size.
What lies outside pages (the `<siteinfo>` header, `</mediawiki>`, damaged tags) is recorded.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from pipeline.sources.documents import BadInputError
from pipeline.sources.streams import CHUNK_BYTES, PrefixedReader

MAX_PAGE_BYTES = 32 << 20  # articles hold a few MB of wikitext at most; beyond: skipped
MAX_HEADER_BYTES = 4 << 20  # <mediawiki><siteinfo>...; no <page> by then: not an export
PAGE_OPEN, PAGE_CLOSE = b"<page>", b"</page>"
DUMP_CLOSE = b"</mediawiki>"
MAX_GAP_BYTES = 1 << 16  # between pages: whitespace, or the closing tag


class Utf16ToUtf8:
    """A UTF-16 export (BOM first) read as UTF-8 bytes, chunk by chunk."""

    def __init__(self, f: BinaryIO, first: bytes):
        self._f = f
        self._decoder = codecs.getincrementaldecoder("utf-16")()
        self._first = first

    def read(self, n: int = CHUNK_BYTES) -> bytes:
        while True:
            raw = self._first + self._f.read(n)
            self._first = b""
            text = self._decoder.decode(raw, final=not raw)
            if text or not raw:  # an odd byte count can decode to nothing yet: read on
                return text.encode("utf-8")


def as_utf8(f: BinaryIO) -> BinaryIO:
    """The stream itself, or a transcoding view when it starts with a UTF-16 byte order mark."""
    first = f.read(4)
    if first[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return Utf16ToUtf8(f, first)
    return PrefixedReader(first[3:] if first.startswith(codecs.BOM_UTF8) else first, f)


@dataclass
class PageSplitter:
    """Cuts a MediaWiki XML byte stream into `<page>...</page>` chunks, one page in memory.

    Records what lies outside pages: `header` (up to the first page), whether `</mediawiki>`
    closed the stream, and stray markup between pages (a page whose `<page>` tag was damaged).
    """

    name: str  # for messages
    max_page_bytes: int = MAX_PAGE_BYTES
    keep_header: bool = True  # False: a span cut from a file; what precedes its first page is
    # the end of a page that belongs to the previous span
    header: bytes = b""
    closed: bool = False
    pages_seen: int = 0
    oversized: int = 0
    stray: int = 0
    _gap: bytes = b""  # text between two pages, up to MAX_GAP_BYTES

    def split(self, f: BinaryIO) -> Iterator[tuple[int, bytes]]:
        """(offset in the stream, page bytes) for every page, in order."""
        buf, base, pos, start = b"", 0, 0, -1  # start: offset in buf of the open page, or -1
        skipping = False
        while chunk := f.read(CHUNK_BYTES):
            keep = start if start >= 0 else pos
            buf, base, pos = buf[keep:] + chunk, base + keep, pos - keep
            start = 0 if start >= 0 else -1
            while True:
                if start < 0:
                    i = buf.find(PAGE_OPEN, pos)
                    if i < 0:
                        cut = max(pos, len(buf) - len(PAGE_OPEN) + 1)
                        self._outside(buf[pos:cut])
                        pos = cut
                        break
                    self._outside(buf[pos:i])
                    self._end_gap()
                    start, pos = i, i + len(PAGE_OPEN)
                j = buf.find(PAGE_CLOSE, pos)
                if j < 0:
                    if not skipping and len(buf) - start > self.max_page_bytes:
                        skipping, self.oversized = True, self.oversized + 1
                    if skipping:  # forget the page body, keep what may begin `</page>`
                        start = max(start, len(buf) - len(PAGE_CLOSE) + 1)
                    pos = max(pos, len(buf) - len(PAGE_CLOSE) + 1)
                    break
                end = j + len(PAGE_CLOSE)
                if not skipping:
                    yield from self._page(buf, start, end, base)
                skipping, start, pos = False, -1, end
        if start >= 0:
            self.stray += 1  # the stream ended inside a page
        else:
            self._outside(buf[pos:])
            self._end_gap(last=True)

    def _page(self, buf: bytes, start: int, end: int, base: int) -> Iterator[tuple[int, bytes]]:
        # A page whose </page> was lost runs into the next one: split at the inner <page>.
        inner = buf.rfind(PAGE_OPEN, start + len(PAGE_OPEN), end)
        if inner >= 0:
            self.stray += 1
            start = inner
        self.pages_seen += 1
        yield base + start, buf[start:end]

    def _outside(self, data: bytes) -> None:
        if not self.pages_seen and not self.stray:
            if not self.keep_header:
                return
            self.header += data
            if len(self.header) > MAX_HEADER_BYTES:
                raise BadInputError(
                    f"{self.name}: no <page> in the first {MAX_HEADER_BYTES >> 20} MiB; "
                    "this is not a MediaWiki XML export"
                )
        elif data:
            self._gap = (self._gap + data)[-MAX_GAP_BYTES:]

    def _end_gap(self, last: bool = False) -> None:
        """Between pages only whitespace may lie; at the end, `</mediawiki>` too."""
        gap, self._gap = self._gap.strip(), b""
        if last and gap.endswith(DUMP_CLOSE):
            self.closed, gap = True, gap[: -len(DUMP_CLOSE)].strip()
        if gap and (self.pages_seen or self.stray):
            self.stray += 1
