"""The input formats by name: each maps to a reader `(file, relative path, tally, source)`
yielding documents (see `pipeline.documents`)."""

from __future__ import annotations

from pipeline.jsonl import read_jsonl
from pipeline.text_formats import read_book, read_text
from pipeline.wikipedia import read_wikipedia

READERS = {"text": read_text, "books": read_book, "wikipedia": read_wikipedia, "jsonl": read_jsonl}
