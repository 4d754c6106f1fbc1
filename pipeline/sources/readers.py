"""The input formats by name: each maps to a reader `(file, relative path, tally, source)`
yielding documents (see `pipeline.sources.documents`); `read_input` reads one planned item of
any format, compressed or not, whole or a span, or an archive's members (`archives`)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import BinaryIO

from pipeline.sources.archives import archive_kind, read_archive, refuse_seeking_format
from pipeline.sources.arrow import read_arrow
from pipeline.sources.books import read_book
from pipeline.sources.compressed import decompressed
from pipeline.sources.documents import Document, Tally
from pipeline.sources.jsonl import read_jsonl
from pipeline.sources.line_spans import LINE_FORMATS, read_line_span
from pipeline.sources.parquet import read_parquet, read_parquet_span
from pipeline.sources.text import read_paragraphs, read_text
from pipeline.sources.wikiextractor import read_wikiextractor
from pipeline.sources.wikipedia.pages import WikiPage, iter_pages
from pipeline.sources.wikipedia.reader import read_wikipedia
from pipeline.sources.wikipedia.spans import read_span

READERS = {
    "text": read_text,
    "paragraphs": read_paragraphs,
    "books": read_book,
    "wikipedia": read_wikipedia,
    "jsonl": read_jsonl,
    "parquet": read_parquet,
    "arrow": read_arrow,
    "wikiextractor": read_wikiextractor,
}


# formats whose records hold the text in a named field (`--text-field`)
FIELD_FORMATS = ("jsonl", "parquet", "arrow")
# formats whose records (text, paragraphs: lines) `--records-per-document` joins
GROUPED_FORMATS = ("text", "paragraphs", *FIELD_FORMATS)


def read_input(
    item: tuple,
    tally: Tally,
    open_raw,
    text_field: str = "text",
    id_field: str | None = "id",
    per_document: int = 0,
) -> Iterator[Document | WikiPage]:
    """What one read step yields for `(format, path, rel, span)`: documents, or for Wikipedia
    the pages (rendered later, after they are spread over workers: rendering is the costly
    part). `open_raw(path)` opens a file without decompression; compressed files are
    decompressed here, checked (`pipeline.sources.compressed`). JSON Lines, Parquet and Arrow
    records hold their text in `text_field` and their id in `id_field`; with `per_document`
    (a file read whole), every so many records (text, paragraphs: lines) make one document."""
    fmt, path, rel, span = item
    fields = (text_field, id_field, per_document)
    with open_raw(path) as raw:
        if span is not None and fmt in LINE_FORMATS:
            yield from read_line_span(raw, fmt, rel, span, tally, text_field, id_field)
        elif span is not None and fmt == "parquet":
            yield from read_parquet_span(raw, rel, span, tally, fmt, text_field, id_field)
        elif span is not None:
            yield from read_span(raw, rel, span, tally)
        elif archive_kind(path):
            refuse_seeking_format(fmt, rel)
            read = partial(read_stream, fmt, tally=tally, fields=fields)
            yield from read_archive(raw, path, rel, tally, read)
        else:
            yield from read_stream(fmt, decompressed(raw, path), rel, tally, fields)


def read_stream(fmt: str, f: BinaryIO, rel: str, tally: Tally, fields: tuple) -> Iterator:
    """What a whole file (or an archive's member) of `fmt`, decompressed, yields: documents,
    or Wikipedia's pages. `fields`: (text_field, id_field) of the formats with records, and
    how many records make a document (0: each its own; text and paragraphs: lines)."""
    if fmt == "wikipedia":
        yield from iter_pages(f, rel, tally)
        return
    text_field, id_field, per_document = (*fields, 0)[:3]
    named = {"text_field": text_field, "id_field": id_field} if fmt in FIELD_FORMATS else {}
    if per_document and fmt in ("text", "paragraphs"):
        named = {"per_document": per_document}
    docs = READERS[fmt](f, rel, tally, source=fmt, **named)
    yield from joined(docs, per_document) if per_document and fmt in FIELD_FORMATS else docs


def joined(docs: Iterator[Document], n: int) -> Iterator[Document]:
    """Every `n` consecutive documents (records) as one, under the first one's id, their
    paragraphs in order; the last of a file may hold fewer."""
    group: list[Document] = []
    for doc in docs:
        group.append(doc)
        if len(group) == n:
            yield _one_of(group)
            group = []
    if group:
        yield _one_of(group)


def _one_of(group: list[Document]) -> Document:
    first = group[0]
    paragraphs = tuple(p for doc in group for p in doc.paragraphs)
    return Document(first.id, first.source, paragraphs, first.presplit, first.input_index)
