"""Input bytes read as text: what a reader sees before its first line, and the lines.

`text_stream` sniffs a file's first bytes: a UTF-8 byte-order mark is dropped, UTF-16/32 with
one is decoded, and a binary file is a bad record. Binary means a known magic number at the
start (compressed, PDF, an executable, an image), more than 3 NUL bytes in the first 8 KiB, or
more than 5% of them control characters that text never holds; nothing else, whatever the
file's size. Bytes that are not UTF-8 never make a file binary: text in Latin-1 or cp1252 is
read, each undecodable byte replaced by U+FFFD and counted (`undecodable_bytes_replaced`).

`iter_lines` then yields decoded lines in bounded memory, skipping (and counting) a line too
long to hold. `PrefixedReader` lets any reader look at a stream's first bytes and still read
them.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import Tally

CHUNK_BYTES = 1 << 20
DEFAULT_MAX_LINE_BYTES = 1 << 20  # longer lines are skipped and counted, never buffered whole

SNIFF_BYTES = 8192
MAX_CONTROL_SHARE = 0.05  # of the sniffed bytes; text has tabs and newlines, almost nothing else
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\v\x1b")
# NUL has its own rule (`MAX_NUL_BYTES`)
_CONTROL = bytes(b for b in range(1, 32) if b not in _TEXT_CONTROLS) + b"\x7f"


class PrefixedReader:
    """`head` then the rest of `f`: lets a reader look at a stream's first bytes."""

    def __init__(self, head: bytes, f: BinaryIO):
        self._head, self._f = head, f

    def read(self, n: int = -1) -> bytes:
        if not self._head:
            return self._f.read(n)
        if n is None or n < 0:
            out, self._head = self._head, b""
            return out + self._f.read()
        out, self._head = self._head[:n], self._head[n:]
        return out + self._f.read(n - len(out)) if len(out) < n else out


_BOMS = (  # UTF-32 before UTF-16: their byte-order marks start alike
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
WIDE_BOMS = tuple(bom for bom, _ in _BOMS)  # UTF-16 and UTF-32: not to be cut at any byte
_COMPRESSED = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"PK\x03\x04", "zip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"(\xb5/\xfd", "zstd"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip"),
    (b"Rar!\x1a\x07", "RAR"),
)
_OTHER_BINARY = (
    (b"%PDF-", "a PDF"),
    (b"\x7fELF", "an ELF executable"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
MAX_NUL_BYTES = 3  # in the sniffed bytes; more make a binary file (fewer are dropped, counted)
_MAGICS = tuple(magic for magic, _ in _COMPRESSED + _OTHER_BINARY)
_COMPRESSED_KINDS = frozenset(name for _, name in _COMPRESSED)
_BOM_PREFIXES = (b"\xef\xbb\xbf", *(bom for bom, _ in _BOMS))


def magic_kind(head: bytes) -> str | None:
    """The kind of binary file a known magic number at the start names, else None."""
    if not head.startswith(_MAGICS):  # one test for all: most files are text
        return None
    return next(
        (name for magic, name in _COMPRESSED + _OTHER_BINARY if head.startswith(magic)), None
    )


def looks_binary(head: bytes) -> bool:
    """More than `MAX_NUL_BYTES` NUL bytes, or more control characters than text ever holds.
    Bytes that are not UTF-8 do not count: they are text in another encoding, replaced and
    counted when the lines are decoded."""
    if not head:
        return False
    if b"\0" in head and head.count(b"\0") > MAX_NUL_BYTES:  # `in` finds none far faster
        return True
    controls = len(head) - len(head.translate(None, _CONTROL))
    return controls / len(head) > MAX_CONTROL_SHARE


class TranscodingReader:
    """A UTF-16 or UTF-32 stream (found by its byte-order mark) read as UTF-8 bytes."""

    def __init__(self, head: bytes, f: BinaryIO, encoding: str):
        self._head, self._f = head, f
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")

    def read(self, n: int = -1) -> bytes:
        raw, self._head = (self._head or self._f.read(n)), b""
        return self._decoder.decode(raw, final=not raw).encode("utf-8")


def text_stream(f: BinaryIO, rel: str, tally: Tally) -> BinaryIO | None:
    """The stream to read as UTF-8 text, or None when it is binary (a bad record, see
    `Tally.bad`). A UTF-8 byte-order mark is dropped; UTF-16/32 with one is decoded."""
    head = f.read(SNIFF_BYTES)
    if head.startswith(_BOM_PREFIXES):
        if head.startswith(b"\xef\xbb\xbf"):
            return PrefixedReader(head[3:], f)
        for bom, encoding in _BOMS:
            if head.startswith(bom):
                tally.inc(f"files_decoded.{encoding}")
                return TranscodingReader(head[len(bom) :], f, encoding)
    kind = magic_kind(head)
    if kind == "zip" or head[257:262] == b"ustar":  # a tar's magic, after its first name
        name = ".zip" if kind == "zip" else ".tar (.tar.gz if it came gzipped, and so on)"
        tally.bad(
            "binary_file",
            rel,
            f"a {kind or 'tar'} archive, not text (archives are read as folders by their "
            f"extension: name it {name}, or extract it)",
        )
        return None
    if kind in _COMPRESSED_KINDS:
        tally.bad(
            "binary_file",
            rel,
            f"a {kind} file, not text (compressed inputs are read by their extension: "
            "name it .gz, .bz2, .xz or .zst, or decompress it)",
        )
        return None
    if kind is not None:
        tally.bad("binary_file", rel, f"a binary file ({kind}), not text")
        return None
    if looks_binary(head):
        tally.bad("binary_file", rel, "a binary file (NUL or control bytes), not text")
        return None
    return PrefixedReader(head, f)


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


def small_text(f: BinaryIO, limit: int | None = None) -> tuple[str | None, BinaryIO]:
    """A whole stream as text when `iter_lines` would yield all of it as it is: at most `limit`
    bytes (`DEFAULT_MAX_LINE_BYTES`: so no line is too long), no NUL byte, valid UTF-8. Else
    None, and the stream to read instead (the bytes read so far, then the rest)."""
    limit = DEFAULT_MAX_LINE_BYTES if limit is None else limit
    parts, size = [], 0
    while size <= limit:
        chunk = f.read(CHUNK_BYTES)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    data = b"".join(parts)
    if size <= limit and b"\0" not in data:
        try:
            return data.decode("utf-8"), f
        except UnicodeDecodeError:
            pass
    return None, PrefixedReader(data, f)


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
