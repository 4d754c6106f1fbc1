"""Books as distributed: what is not the book's prose, recognised and dropped (counted).

- Binary files among the `.txt` files (NUL bytes, or many control characters in the first
  8 KiB): a bad input file, so the run stops naming it unless it skips bad input.
- Front matter: licence and edition notes (Smashwords' "License Notes", copyright lines, ISBN,
  "all rights reserved", "this is a work of fiction", a table of contents) within the first
  paragraphs: everything up to the last such paragraph, then any headings or contents entries
  that follow it.
- Back matter: "The End", "About the Author", "Other books by", "Connect with me", review
  requests and links to shops or social sites within the last paragraphs: from the first such
  paragraph to the end.
- `*** START OF THE/THIS ...` / `*** END OF ...` markers (Project Gutenberg's), when present,
  bound the text.
- Paragraphs without a letter (scene breaks such as `* * *`).

The windows are bounded (at most a quarter of the book each) so that a phrase in the story
itself cannot take the story with it.
"""

from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from pipeline.documents import Tally

SNIFF_BYTES = 8192
MAX_CONTROL_SHARE = 0.1  # of the sniffed bytes; text has tabs and newlines, almost nothing else
EDGE_WINDOW = 50  # paragraphs searched at each end, at most a quarter of the book
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\v\x1b")
_CONTROL = bytes(b for b in range(32) if b not in _TEXT_CONTROLS) + b"\x7f"

# Phrases that licence, edition and shop pages use and stories almost never do.
_LICENCE = (
    r"smashwords|license notes|licensed for your personal|all rights reserved|\bisbn\b|"
    r"copyright (?:\u00a9 ?|\(c\) ?)?\d{4}|\u00a9 ?\d{4}|\(c\) \d{4}|"
    r"is a work of fiction|no part of this (?:book|publication|ebook) may"
)
_FRONT = re.compile(
    _LICENCE + r"|table of contents|^contents$|^\w+ edition$|first (?:published|printing) in|"
    r"cover (?:design|art|image|photo)s? by|^published by|^edited by|^printed in",
    re.IGNORECASE,
)
_HEADING = re.compile(
    r"^(?:chapter|part|book|prologue|epilogue|contents|acknowledge?ments?|dedication|"
    r"about the author|introduction|preface|foreword|afterword|also by)\b|"
    r"^(?:[ivxlcdm]+|\d+)\W*$",
    re.IGNORECASE,
)
_BACK_START = re.compile(
    r"^(?:the end\W*$|about the authors?\b|other (?:books|titles|works) by|also by|"
    r"more (?:books|titles) (?:by|from)|books by|connect with|thank you for reading|"
    r"thanks for reading|if you enjoyed|did you enjoy|acknowledge?ments?\W*$|coming soon|"
    r"excerpt from|sneak peek|please (?:leave|consider leaving|take a moment)|"
    r"sign up for|follow (?:me|the author))",
    re.IGNORECASE,
)
_BACK_ANYWHERE = re.compile(
    _LICENCE + r"|https?://|www\.|\.com\b|goodreads|leave a review|write a review",
    re.IGNORECASE,
)
# Project Gutenberg's (and many imitators') markers around the text proper.
_TEXT_START = re.compile(r"^\*{3}\s*START OF (?:THE|THIS)\b", re.IGNORECASE)
_TEXT_END = re.compile(r"^\*{3}\s*END OF (?:THE|THIS)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?]")


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
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"PK\x03\x04", "zip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"(\xb5/\xfd", "zstd"),
    (b"%PDF-", "PDF"),
)
MAX_BAD_SHARE = 0.01  # NUL bytes or undecodable UTF-8 in the sniffed bytes: a binary file


def looks_binary(head: bytes) -> bool:
    """Many NUL bytes, more control characters than text ever holds, or bytes that are not
    UTF-8 (the last few may be a character cut by the sniff)."""
    if not head:
        return False
    if head.count(b"\0") > max(3, MAX_BAD_SHARE * len(head)):
        return True
    controls = len(head) - len(head.translate(None, _CONTROL))
    if controls / len(head) > MAX_CONTROL_SHARE:
        return True
    undecodable = head.decode("utf-8", errors="replace").count("\ufffd") - head.count(
        b"\xef\xbf\xbd"
    )
    return undecodable > max(3, MAX_BAD_SHARE * len(head))


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
    if head.startswith(b"\xef\xbb\xbf"):
        return PrefixedReader(head[3:], f)
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            tally.inc(f"files_decoded.{encoding}")
            return TranscodingReader(head[len(bom) :], f, encoding)
    kind = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
    if kind is not None:
        tally.bad(
            "binary_file",
            rel,
            f"a {kind} file, not text (compressed inputs are read by their extension: "
            "name it .gz or .bz2, or decompress it)",
        )
        return None
    if looks_binary(head):
        tally.bad("binary_file", rel, "a binary file, not UTF-8 text")
        return None
    return PrefixedReader(head, f)


def front_matter_end(paragraphs: list[str]) -> int:
    """How many leading paragraphs are front matter."""
    window = min(EDGE_WINDOW, len(paragraphs) // 4)
    last = max((i for i in range(window) if _FRONT.search(paragraphs[i])), default=-1)
    if last < 0:
        return 0
    end = last + 1
    while end < len(paragraphs) and _is_heading(paragraphs[end]):
        end += 1
    return end


def back_matter_start(paragraphs: list[str], start: int = 0) -> int:
    """Where the back matter begins (len(paragraphs) when there is none)."""
    window = min(EDGE_WINDOW, (len(paragraphs) - start) // 4)
    for i in range(len(paragraphs) - window, len(paragraphs)):
        p = paragraphs[i]
        if _BACK_START.search(p) or _BACK_ANYWHERE.search(p):
            return i
    return len(paragraphs)


def _is_heading(paragraph: str) -> bool:
    """A chapter title or contents entry: short, heading-like, no sentence in it."""
    return (
        len(paragraph) <= 200
        and bool(_HEADING.match(paragraph))
        and not (_SENTENCE_END.search(paragraph.rstrip(".").rstrip()))
    )


def marked_bounds(paragraphs: list[str]) -> tuple[int, int]:
    """The text between `*** START OF THE/THIS ...` and `*** END OF ...` markers (Project
    Gutenberg's), or everything."""
    start = next((i + 1 for i, p in enumerate(paragraphs) if _TEXT_START.match(p)), 0)
    end = next(
        (i for i in range(start, len(paragraphs)) if _TEXT_END.match(paragraphs[i])),
        len(paragraphs),
    )
    return start, end


def strip_boilerplate(paragraphs: list[str], tally: Tally) -> list[str]:
    """The book's prose: front and back matter and letterless paragraphs dropped, counted as
    `books_paragraphs_dropped.boilerplate` and `.no_letters`."""
    start, end = marked_bounds(paragraphs)
    body = paragraphs[start:end]
    front = front_matter_end(body)
    back = back_matter_start(body, front)
    kept = body[front:back]
    prose = [p for p in kept if any(c.isalpha() for c in p)]
    if len(kept) < len(paragraphs):
        tally.inc("books_paragraphs_dropped.boilerplate", len(paragraphs) - len(kept))
    if len(prose) < len(kept):
        tally.inc("books_paragraphs_dropped.no_letters", len(kept) - len(prose))
    return prose
