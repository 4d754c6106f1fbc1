"""Books: licence and edition front matter, back matter and binary files recognised."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pipeline.sources.books import (
    back_matter_start,
    front_matter_end,
    read_book,
    strip_boilerplate,
)
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.streams import PrefixedReader, looks_binary

ROOT = Path(__file__).resolve().parents[2]
STORY = [f"Paragraph {i} of the story, in which something quietly happens." for i in range(40)]

SMASHWORDS_FRONT = [
    "THE GLASS HARBOUR",
    "by Jane Example",
    "Copyright 2012 Jane Example",
    "Smashwords Edition",
    "Smashwords Edition, License Notes",
    "This ebook is licensed for your personal enjoyment only. This ebook may not be re-sold or "
    "given away to other people.",
    "* * * * *",
    "Table of Contents",
    "Chapter One",
    "Chapter Two",
    "About the Author",
    "Chapter One",
]
BACK = [
    "THE END",
    "About the Author",
    "Jane Example lives by the sea with two cats.",
    "Connect with Jane online: http://example.com/jane",
]


def test_smashwords_front_and_back_matter_are_stripped_and_counted() -> None:
    tally = Tally()
    assert strip_boilerplate(SMASHWORDS_FRONT + STORY + BACK, tally) == STORY
    assert tally.counts["books_paragraphs_dropped.boilerplate"] == 16


def test_a_book_without_boilerplate_is_untouched_and_nothing_is_counted() -> None:
    tally = Tally()
    assert strip_boilerplate(STORY, tally) == STORY
    assert not tally.counts


def test_story_phrases_far_from_the_edges_do_not_cut_the_story() -> None:
    middle = STORY[:20] + ["All rights reserved, he said, and the story went on."] + STORY[20:]
    middle += ["“Thank you for reading my letter,” she said."]
    assert front_matter_end(middle) == 0
    assert back_matter_start(middle) == len(middle)


def test_a_short_book_keeps_its_text_even_with_a_licence_phrase() -> None:
    short = ["The whole tale: it was copyright 1999 and all rights reserved.", "It ended."]
    assert strip_boilerplate(short, Tally()) == short


def test_gutenberg_style_markers_bound_the_text() -> None:
    book = ["Header of the file", "*** START OF THE PROJECT GUTENBERG EBOOK X ***"]
    book += STORY + ["*** END OF THE PROJECT GUTENBERG EBOOK X ***", "Licence text follows."]
    assert strip_boilerplate(book, Tally()) == STORY


def test_asterisks_that_begin_no_paragraph_bound_nothing() -> None:
    book = ["Header of the file", "A line with *** START OF THE BOOK *** inside it."] + STORY
    book += ["Three stars *** END OF THE BOOK here.", "The last words."]
    assert strip_boilerplate(book, Tally()) == book


def test_scene_breaks_without_letters_are_dropped() -> None:
    tally = Tally()
    assert strip_boilerplate(STORY[:3] + ["* * *", "~~~"] + STORY[3:], tally) == STORY
    assert tally.counts["books_paragraphs_dropped.no_letters"] == 2


def test_paragraphs_with_a_letter_after_other_characters_are_kept() -> None:
    """The first character decides most paragraphs; the others are read to their first letter."""
    kept = [
        "1984 was the year.",
        "\u201cQuoted,\u201d she said.",
        "\u2014 \u00e9t\u00e9",
        "42 \u00b7 \u03a9",
    ]
    tally = Tally()
    assert (
        strip_boilerplate(STORY + kept + ["1 2 3", "\u00b7 \u2014 \u00b2"], tally) == STORY + kept
    )
    assert tally.counts["books_paragraphs_dropped.no_letters"] == 2


def test_sample_book_loses_its_imitation_licence_pages() -> None:
    path = ROOT / "sample" / "books" / "fiction" / "the-lighthouse-keeper.txt"
    with open(path, "rb") as f:
        [doc] = read_book(f, "fiction/the-lighthouse-keeper.txt", Tally())
    text = " ".join(doc.paragraphs)
    assert doc.paragraphs[0].startswith("Mara Quill had kept the light")
    assert doc.paragraphs[-1] == "The light, of course, kept shining. It did not notice her go."
    for phrase in ("Copyright", "licensed", "ISBN", "START OF", "Thank you for reading"):
        assert phrase not in text


@pytest.mark.parametrize(
    ("head", "binary"),
    [
        (b"Plain text.\n\tIndented, with a form feed\f.\n", False),
        ("Unicode text: café, Ελληνικά, 中文.\n".encode(), False),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", True),
        (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", True),
        ("UTF-16 text".encode("utf-16"), True),
        (bytes(range(1, 32)) * 10 + b"mostly control bytes", True),
        (b"", False),
    ],
)
def test_binary_detection(head: bytes, binary: bool) -> None:
    assert looks_binary(head) is binary


def test_a_binary_book_stops_the_run_or_is_counted() -> None:
    data = b"\x7fELF\x02\x01\x01\x00" + bytes(200)
    with pytest.raises(BadInputError, match=r"lib/a\.txt: a binary file"):
        list(read_book(io.BytesIO(data), "lib/a.txt", Tally()))
    tally = Tally(skip_bad_input=True)
    assert list(read_book(io.BytesIO(data), "lib/a.txt", tally)) == []
    assert tally.counts["documents_dropped.binary_file"] == 1


def test_a_book_without_prose_is_a_counted_drop() -> None:
    data = b"* * *\n\n1\n\n~~~\n\n* * *\n"
    tally = Tally()
    assert list(read_book(io.BytesIO(data), "x.txt", tally)) == []
    assert tally.counts["documents_dropped.books_no_prose"] == 1


def test_prefixed_reader_gives_back_the_peeked_bytes_first() -> None:
    f = PrefixedReader(b"head-", io.BytesIO(b"rest of it"))
    assert [f.read(3), f.read(4), f.read()] == [b"hea", b"d-re", b"st of it"]
