"""Books: one book per file (`read_book`), and what is not the book's prose, recognised and
dropped (counted).

- Binary files among the `.txt` files (NUL bytes, or many control characters in the first
  8 KiB): a bad input file, so the run stops naming it unless it skips bad input
  (`pipeline.sources.streams`).
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

import re
from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import MAX_DOCUMENT_CHARS, Document, Tally, one_space
from pipeline.sources.streams import iter_lines, small_text, text_stream

EDGE_WINDOW = 50  # paragraphs searched at each end, at most a quarter of the book

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

# Every match of `_FRONT` (`_BACK_ANYWHERE`) holds one of these words, as case-insensitive
# matching reads the text: most paragraphs hold none, and a substring test is far cheaper than
# either search, which tries every alternative at every character (measured: docs/benchmarks.md,
# "Figures moved from other pages and from code comments").
# `tests/pipeline/test_books_reader.py` checks each alternative against these lists.
_LICENCE_WORDS = (
    "smashwords",
    "license notes",
    "licensed for your personal",
    "all rights reserved",
    "isbn",
    "copyright ",
    "\u00a9",
    "(c) ",
    "is a work of fiction",
    "no part of this ",
)
_FRONT_WORDS = _LICENCE_WORDS + (
    "contents",
    " edition",
    "first published in",
    "first printing in",
    "cover ",
    "published by",
    "edited by",
    "printed in",
)
_BACK_WORDS = _LICENCE_WORDS + (
    "http",
    "www.",
    ".com",
    "goodreads",
    "leave a review",
    "write a review",
)
# The characters other than A-Z that case-insensitive matching takes for an ASCII letter, and
# that lower() does not lower to it (tested over all of Unicode).
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})


def folded(text: str) -> str:
    """`text` lowercased so that a substring test agrees with case-insensitive matching."""
    # the keys of _FOLD, each looked for alone: translate() walks the text a character at a time
    if text.isascii() or not ("\u0130" in text or "\u0131" in text or "\u017f" in text):
        return text.lower()
    return text.translate(_FOLD).lower()


def _may_hold(text: str, words: tuple[str, ...]) -> bool:
    low = folded(text)
    for w in words:  # a loop, not any() over a generator: this runs for most paragraphs
        if w in low:
            return True
    return False


def _front(paragraph: str) -> bool:
    return _may_hold(paragraph, _FRONT_WORDS) and _FRONT.search(paragraph) is not None


def _back_anywhere(paragraph: str) -> bool:
    return _may_hold(paragraph, _BACK_WORDS) and _BACK_ANYWHERE.search(paragraph) is not None


def _joined(lines: list[str]) -> str:
    """A paragraph's stripped lines joined, every run of whitespace one space (as a regular
    expression's whitespace class would collapse it: it and `str.split` agree on whitespace)."""
    return one_space(" ".join(lines))


# a line break, then one or more lines of whitespace alone, each with its line break
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")


def text_paragraphs(text: str) -> list[str]:
    """`line_paragraphs` of a text held whole, without a Python step per line: the blocks
    between blank lines, each block's whitespace runs one space (`\\s` is `str.isspace`)."""
    return list(filter(None, map(one_space, _BLANK_LINES.split(text))))


def line_paragraphs(f: BinaryIO, tally: Tally) -> list[str] | None:
    """A stream's paragraphs, split on blank lines, a paragraph's lines joined (`_joined`), in
    bounded memory (`iter_lines`); None for a book of more than `MAX_DOCUMENT_CHARS`, whose
    reading stops there."""
    paragraphs: list[str] = []
    current: list[str] = []
    size = 0
    for line in iter_lines(f, tally):
        if line.strip():
            current.append(line.strip())
            size += len(current[-1])
            if size > MAX_DOCUMENT_CHARS:
                return None
        elif current:
            paragraphs.append(_joined(current))
            current = []
    if current:
        paragraphs.append(_joined(current))
    return paragraphs


def read_book(f: BinaryIO, rel: str, tally: Tally, source: str = "books") -> Iterator[Document]:
    """One book per file; paragraphs split on blank lines, lines inside a paragraph joined.
    A file with no text at all is dropped (counted as `documents_dropped.empty_file`), and one
    of more than `MAX_DOCUMENT_CHARS` (no book is so long; a corpus in one file may be) as
    `documents_dropped.books_too_long`; a binary file is a bad record; front and back matter
    are stripped (`strip_boilerplate`)."""
    f = text_stream(f, rel, tally)
    if f is None:
        return
    too_long = tally.counts["lines_dropped.too_long"]
    text, f = small_text(f)
    paragraphs = text_paragraphs(text) if text is not None else line_paragraphs(f, tally)
    if paragraphs is None:
        tally.drop("books_too_long")
        return
    if not paragraphs:  # a book of overlong lines only is not an empty file
        overlong = tally.counts["lines_dropped.too_long"] > too_long
        tally.drop("only_overlong_lines" if overlong else "empty_file")
        return
    paragraphs = strip_boilerplate(paragraphs, tally)
    if not paragraphs:
        tally.drop("books_no_prose")
        return
    yield Document(f"{source}:{rel}", source, tuple(paragraphs))


def front_matter_end(paragraphs: list[str]) -> int:
    """How many leading paragraphs are front matter."""
    window = min(EDGE_WINDOW, len(paragraphs) // 4)
    last = max((i for i in range(window) if _front(paragraphs[i])), default=-1)
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
        if _BACK_START.search(p) or _back_anywhere(p):
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
    # Both begin with three asterisks, which few books hold anywhere (the line breaks joining
    # the paragraphs are no asterisks, so none is made across two): one search skips both scans.
    if "***" not in "\n".join(paragraphs):
        return 0, len(paragraphs)
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
    # most paragraphs begin with a letter: the first character decides without a loop
    prose = [p for p in kept if p[:1].isalpha() or any(c.isalpha() for c in p)]
    if len(kept) < len(paragraphs):
        tally.inc("books_paragraphs_dropped.boilerplate", len(paragraphs) - len(kept))
    if len(prose) < len(kept):
        tally.inc("books_paragraphs_dropped.no_letters", len(kept) - len(prose))
    return prose
