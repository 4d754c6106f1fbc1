"""The reference text format: one sentence per line, a blank line between documents."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import Document, Tally
from pipeline.sources.streams import iter_lines, text_stream


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
