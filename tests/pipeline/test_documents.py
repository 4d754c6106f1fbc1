"""Readers: the reference text format and books, bounded lines, undecodable bytes."""

from __future__ import annotations

import io

from pipeline.sources.books import read_book
from pipeline.sources.documents import Tally
from pipeline.sources.streams import iter_lines
from pipeline.sources.text import read_text


def test_text_format_blocks_are_documents():
    data = b"First sentence.\nSecond one.\n\n\nOther doc.\n\nThird doc line.\n"
    tally = Tally()
    docs = list(read_text(io.BytesIO(data), "a/b.txt", tally))
    assert [d.paragraphs for d in docs] == [
        ("First sentence.", "Second one."),
        ("Other doc.",),
        ("Third doc line.",),
    ]
    assert [d.id for d in docs] == ["text:a/b.txt#0", "text:a/b.txt#1", "text:a/b.txt#2"]
    assert all(d.presplit for d in docs)


def test_text_lines_end_at_lf_or_crlf_and_a_lone_cr_ends_none():
    r"""A `\r\n` file reads as its `\n` twin; lone `\r` ends (classic Mac) end no line, so the
    file is one sentence of one document, as the reference's `tf.gfile` reading takes it."""
    lf = b"One here.\nTwo here.\n\nThree.\n"
    read = [
        list(read_text(io.BytesIO(d), "a.txt", Tally())) for d in (lf, lf.replace(b"\n", b"\r\n"))
    ]
    assert read[0] == read[1] and [d.paragraphs for d in read[0]] == [
        ("One here.", "Two here."),
        ("Three.",),
    ]
    [doc] = read_text(io.BytesIO(lf.replace(b"\n", b"\r")), "a.txt", Tally())
    assert doc.paragraphs == ("One here.\rTwo here.\r\rThree.",)


def test_book_paragraphs_split_on_blank_lines_and_join_wrapped_lines():
    data = b"Once upon\na time.\n\n  \nThe end\r\ncame.\n"
    [doc] = read_book(io.BytesIO(data), "x/y.txt", Tally())
    assert doc.id == "books:x/y.txt" and doc.paragraphs == ("Once upon a time.", "The end came.")


def test_empty_book_is_a_counted_drop():
    tally = Tally()
    assert list(read_book(io.BytesIO(b"\n \n"), "e.txt", tally)) == []
    assert tally.counts == {"documents_read": 1, "documents_dropped.empty_file": 1}


def test_undecodable_bytes_are_replaced_and_counted():
    tally = Tally()
    lines = list(iter_lines(io.BytesIO(b"ok\n\xff\xfebad\nfine \xef\xbf\xbd\n"), tally))
    assert lines == ["ok", "\ufffd\ufffdbad", "fine \ufffd"]
    assert tally.counts["undecodable_bytes_replaced"] == 2


def test_overlong_line_is_skipped_without_buffering_it():
    long_line = b"x" * (3 << 20)
    data = b"before\n" + long_line + b"\nafter\n" + long_line
    tally = Tally()
    assert list(iter_lines(io.BytesIO(data), tally, max_line_bytes=1 << 20)) == ["before", "after"]
    assert tally.counts["lines_dropped.too_long"] == 2
