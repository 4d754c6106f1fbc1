"""The two plain-text formats: the reference one-sentence-per-line layout, and books."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from pipeline.boilerplate import strip_boilerplate, text_stream
from pipeline.documents import Document, Tally, iter_lines


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
