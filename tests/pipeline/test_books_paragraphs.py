"""A book held whole is split into paragraphs at once (`text_paragraphs`); it must give what the
line loop (`line_paragraphs`) gives, and `small_text` must hand every other file to the loop
with none of its bytes lost."""

from __future__ import annotations

import io
import random
import sys

import pytest

from pipeline.sources.books import line_paragraphs, read_book, strip_boilerplate, text_paragraphs
from pipeline.sources.documents import Tally
from pipeline.sources.streams import small_text, text_stream

# every character Python takes for whitespace, some that look like it and are not, and text
WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
NOT_WHITESPACE = ["\u200b", "\ufeff", "\u2060", "\x01", "\u180e"]
WORDS = ["Word", "x", "é", "日本", "a.b", "'", "--", "##", "ß", "\U0001f600"]


def hostile_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randrange(0, 60)):
        roll = rng.random()
        if roll < 0.3:
            parts.append("\n" * rng.randrange(1, 4))
        elif roll < 0.55:
            parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randrange(1, 4))))
        elif roll < 0.6:
            parts.append(rng.choice(NOT_WHITESPACE))
        else:
            parts.append(rng.choice(WORDS))
    return "".join(parts)


def by_lines(text: str) -> list[str]:
    return line_paragraphs(io.BytesIO(text.encode("utf-8")), Tally())


def test_every_whitespace_character_is_one_both_ways():
    assert "\n" in WHITESPACE and "\u3000" in WHITESPACE and "\x1c" in WHITESPACE
    for c in WHITESPACE:
        for text in (f"a{c}b", f"a\n{c}\nb", f"{c}\na\n{c}", f"a\n{c}{c}\n\nb{c}"):
            assert text_paragraphs(text) == by_lines(text), repr(text)


@pytest.mark.parametrize("seed", range(4))
def test_hostile_texts_give_the_same_paragraphs_both_ways(seed):
    rng = random.Random(seed)
    for _ in range(500):
        text = hostile_text(rng)
        assert text_paragraphs(text) == by_lines(text), repr(text)


def test_every_whitespace_character_but_space_and_line_break_is_unprintable():
    # what lets `text_paragraphs` keep a block of single spaces and line breaks as it is
    assert [c for c in WHITESPACE if c.isprintable()] == [" "]


@pytest.mark.parametrize("seed", range(2))
def test_blocks_of_single_spaces_and_line_breaks_give_the_same_paragraphs(seed):
    rng = random.Random(seed)
    gaps = [" ", "\n", " ", "\n\n", "\n \n", "  ", "\u3000"]
    for _ in range(500):
        parts = [rng.choice(gaps + WORDS + NOT_WHITESPACE) for _ in range(rng.randrange(0, 30))]
        text = "".join(parts)
        assert text_paragraphs(text) == by_lines(text), repr(text)


def test_line_ends_and_edges():
    for text in ("", "\n", "\r\n\r\n", "a\r\nb\r\n\r\nc\r\n", "\n\n\na\n\n\n", "a", "a\n \t\n"):
        assert text_paragraphs(text) == by_lines(text), repr(text)
    assert text_paragraphs("one\r\n  two \r\n\r\n three") == ["one two", "three"]


@pytest.mark.parametrize(
    "data",
    [
        b"x" * 40 + b"\n\n" + b"y" * 40,  # over the limit
        b"a\nb\x00c\n",  # a NUL byte
        b"caf\xe9\n\nau lait\n",  # Latin-1, not UTF-8
    ],
)
def test_other_files_go_to_the_line_loop_with_all_their_bytes(data):
    text, rest = small_text(io.BytesIO(data), limit=64)
    assert text is None and rest.read() == data


def test_a_file_within_the_limit_is_read_whole():
    data = "Ein Buch.\n\nZwei Absätze.\n".encode() * 3
    text, _ = small_text(io.BytesIO(data), limit=len(data))
    assert text == data.decode()
    assert small_text(io.BytesIO(data), limit=len(data) - 1)[0] is None


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf", "\ufeff".encode("utf-16-le")])
def test_read_book_gives_the_line_loops_paragraphs(bom):
    body = "Chapter 1\n\nIt was a dark night.\r\nThe rain fell.\n\n\u3000\n\nThe End?\n"
    data = bom + (body.encode("utf-16-le") if len(bom) == 2 else body.encode())
    (doc,) = read_book(io.BytesIO(data), "b.txt", Tally())
    stream = text_stream(io.BytesIO(data), "b.txt", Tally())
    assert list(doc.paragraphs) == strip_boilerplate(line_paragraphs(stream, Tally()), Tally())
    assert doc.paragraphs[-2:] == ("It was a dark night. The rain fell.", "The End?")
