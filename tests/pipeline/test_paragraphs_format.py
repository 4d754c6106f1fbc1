"""The `paragraphs` format: a paragraph per line, a blank line between documents (CC-100's
layout, XLM-R's corpus). The text format would take each line as a sentence; books would take a
whole file as one document. Each line is a paragraph cut into sentences as books' are."""

from __future__ import annotations

import glob
import io
import os

from pipeline.sources.books import read_book
from pipeline.sources.documents import Tally
from pipeline.sources.head import check_head
from pipeline.sources.text import read_paragraphs
from schemas.reader import ShardSet
from tests.helpers import SAMPLE, build_shards


def sample_paragraphs() -> list[list[str]]:
    """Each sample book's paragraphs as the books format reads them (wrapped lines joined, its
    licence's boilerplate left out)."""
    books = []
    for path in sorted(glob.glob(f"{SAMPLE}/books/**/*.txt", recursive=True)):
        with open(path, "rb") as f:
            [doc] = read_book(f, os.path.basename(path), Tally())
        books.append(list(doc.paragraphs))
    return books


def write_documents(path, documents: list[list[str]]) -> None:
    """Documents in the paragraphs format: a paragraph a line, a blank line between them."""
    path.write_text("".join("\n".join(d) + "\n\n" for d in documents), encoding="utf-8")


def test_a_document_is_a_block_of_lines_each_a_paragraph():
    text = "One paragraph. Two sentences.\nA second paragraph.\n\n\nAnother document.\n"
    docs = list(read_paragraphs(io.BytesIO(text.encode()), "cc/part-0.txt", Tally()))
    assert [(d.id, d.paragraphs, d.presplit) for d in docs] == [
        (
            "paragraphs:cc/part-0.txt#0",
            ("One paragraph. Two sentences.", "A second paragraph."),
            False,
        ),
        ("paragraphs:cc/part-0.txt#1", ("Another document.",), False),
    ]


def test_its_sentences_are_those_of_the_same_paragraphs_as_books(tmp_path):
    """The sample's books, their paragraphs a line each, one document each: the same sentences
    and pieces as the books themselves, each book's document of its own."""
    books = sample_paragraphs()
    (tmp_path / "cc").mkdir()
    write_documents(tmp_path / "cc" / "part-0.txt", books)
    (tmp_path / "books").mkdir()
    for k, paragraphs in enumerate(books):
        (tmp_path / "books" / f"{k}.txt").write_text("\n\n".join(paragraphs) + "\n")
    sets = {}
    for fmt in ("paragraphs", "books"):
        out = str(tmp_path / f"out-{fmt}")
        inputs = f"{fmt}:{tmp_path / ('cc' if fmt == 'paragraphs' else 'books')}"
        assert build_shards(out, "--vocab-size", "500", inputs=inputs) == 0
        sets[fmt] = ShardSet.open(out).manifest.counts["total"]
    keys = ("documents_used", "sentences", "tokens")
    assert [sets["paragraphs"][k] for k in keys] == [sets["books"][k] for k in keys]
    assert sets["paragraphs"]["documents_used"] == len(books) > 3


def test_the_layout_given_as_text_is_noted_naming_it_and_wrapped_lines_name_books(tmp_path):
    """Short documents of a paragraph a line, given as text (the default format), are noted
    naming the paragraphs format; wrapped prose given as paragraphs is noted naming books; and
    `--cjk-sentences` is taken beside paragraphs inputs alone (they are prose)."""
    documents = [book[k : k + 3] for book in sample_paragraphs() for k in range(0, len(book), 3)]
    path = tmp_path / "part-0.txt"
    write_documents(path, documents)
    note = check_head("text", str(path), "part-0.txt", lambda p: open(p, "rb"))
    assert note.startswith("note: part-0.txt reads as prose, not a sentence per line (")
    assert note.endswith(
        "for a paragraph per line and a blank line between documents, --format paragraphs "
        "(make: FORMAT=paragraphs) splits sentences with Punkt"
    )
    assert check_head("paragraphs", str(path), "part-0.txt", lambda p: open(p, "rb")) is None
    wrapped = os.path.join(SAMPLE, "books", "a-field-guide-to-small-machines.txt")
    note = check_head("paragraphs", wrapped, "a.txt", lambda p: open(p, "rb"))
    assert note.startswith("note: a.txt reads as wrapped prose (")
    assert "--format books (make: FORMAT=books) joins them" in note
    out = str(tmp_path / "out")
    inputs = f"paragraphs:{path}"
    assert build_shards(out, "--vocab-size", "500", "--cjk-sentences", inputs=inputs) == 0
    assert ShardSet.open(out).manifest.config["inputs"] == ["paragraphs"]
