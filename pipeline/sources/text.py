"""The reference text format: one sentence per line, a blank line between documents; and the
`paragraphs` format, its layout with a paragraph per line (CC-100's: XLM-R's corpus), whose
lines the split step cuts into sentences."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import MAX_DOCUMENT_CHARS, Document, Tally
from pipeline.sources.streams import iter_lines, text_stream

# MAX_DOCUMENT_CHARS bounds the lines between two blank lines: a file without blank lines is one
# document (Hugging Face's bookcorpus dump is 4.6 GB so)


def read_text(
    f: BinaryIO,
    rel: str,
    tally: Tally,
    source: str = "text",
    presplit: bool = True,
    per_document: int = 0,
) -> Iterator[Document]:
    """The reference format: one sentence per line, a blank line between documents. Binary
    input is a bad record; UTF-16/32 with a byte-order mark is decoded; an empty file is
    counted as `documents_dropped.empty_file`; a document of more than `MAX_DOCUMENT_CHARS` as
    `documents_dropped.text_document_too_long` (it keeps its number: later ids stay). Not
    `presplit`: each line is a paragraph of prose (`read_paragraphs`). With `per_document`,
    a document also ends after that many lines (`--records-per-document`)."""
    f = text_stream(f, rel, tally)
    if f is None:
        return
    block: list[str] = []
    number = size = 0
    lines = iter_lines(f, tally)
    for line in cut_every(lines, per_document) if per_document else lines:
        line = line.strip()
        if line:
            size += len(line)
            if size <= MAX_DOCUMENT_CHARS:
                block.append(line)
            elif block:
                block = []  # dropped when the document ends
            continue
        if size:
            doc_id = f"{source}:{rel}#{number}"
            yield from text_document(block, size, doc_id, source, tally, presplit)
            number += 1
            block, size = [], 0
    if size:
        yield from text_document(block, size, f"{source}:{rel}#{number}", source, tally, presplit)
    elif number == 0:
        tally.drop("empty_file")


def read_paragraphs(
    f: BinaryIO, rel: str, tally: Tally, source: str = "paragraphs", per_document: int = 0
) -> Iterator[Document]:
    """A paragraph per line, a blank line between documents: the text format's layout, each
    line cut into sentences by the split step (Punkt, and `--cjk-sentences`) as books' are."""
    return read_text(f, rel, tally, source, presplit=False, per_document=per_document)


def cut_every(lines, n: int):
    """`lines` with a blank line after every `n` lines that hold something and follow one
    another: a document of the text format ends there as at a blank line of the file."""
    run = 0
    for line in lines:
        if line.isspace() or not line:
            run = 0
        elif run == n:
            yield ""
            run = 1
        else:
            run += 1
        yield line


def text_document(block: list[str], size: int, doc_id: str, source: str, tally: Tally, presplit):
    """The document of a block of `size` characters, or none (too long: dropped, counted)."""
    if size > MAX_DOCUMENT_CHARS:
        tally.drop("text_document_too_long")
    else:
        yield Document(doc_id, source, tuple(block), presplit=presplit)
