"""Every format detects binary input and byte-order marks the same way: nothing becomes rows
of garbage, nothing is silently mangled."""

from __future__ import annotations

import bz2
import io

import pytest

from pipeline.sources.books import read_book
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.jsonl import read_jsonl
from pipeline.sources.text import read_text

PROSE = "Ünïcode läuft gut.\nZweiter Satz hier.\n\nA second document.\nWith two lines.\n"


def read(reader, data: bytes, skip: bool = False):
    tally = Tally(skip_bad_input=skip)
    return list(reader(io.BytesIO(data), "f.txt", tally)), tally.counts


@pytest.mark.parametrize("reader", [read_text, read_book, read_jsonl])
def test_a_compressed_file_named_as_text_is_refused(reader):
    data = bz2.compress(PROSE.encode() * 50)
    with pytest.raises(BadInputError, match="a bzip2 file, not text"):
        read(reader, data)
    docs, counts = read(reader, data, skip=True)
    assert docs == [] and counts["documents_dropped.binary_file"] == 1


@pytest.mark.parametrize("reader", [read_text, read_book, read_jsonl])
def test_random_bytes_are_refused(reader):
    data = bytes((i * 7919 + 13) % 251 + 5 for i in range(20000))
    docs, counts = read(reader, data, skip=True)
    assert docs == [] and counts["documents_dropped.binary_file"] == 1


@pytest.mark.parametrize(
    "encoding, counted",
    [("utf-16", "utf-16-le"), ("utf-32", "utf-32-le"), ("utf-8-sig", None)],
)
def test_text_with_a_byte_order_mark_is_decoded(encoding, counted):
    docs, counts = read(read_text, PROSE.encode(encoding))
    assert [d.paragraphs for d in docs] == [
        ("Ünïcode läuft gut.", "Zweiter Satz hier."),
        ("A second document.", "With two lines."),
    ]
    assert "undecodable_bytes_replaced" not in counts
    decoded = {k: v for k, v in counts.items() if k.startswith("files_decoded.")}
    assert decoded == ({f"files_decoded.{counted}": 1} if counted else {})  # UTF-8's is dropped


def test_jsonl_in_utf16_is_decoded():
    docs, _ = read(read_jsonl, '{"id": "a", "text": "Grüße aus Köln."}\n'.encode("utf-16"))
    assert docs[0].paragraphs == ("Grüße aus Köln.",)


def test_nul_bytes_are_dropped_and_counted():
    docs, counts = read(read_text, b"One sen\0tence.\nTwo.\n")
    assert docs[0].paragraphs == ("One sentence.", "Two.")
    assert counts["nul_bytes_dropped"] == 1


def test_an_empty_text_file_is_counted_as_such():
    docs, counts = read(read_text, b"")
    assert docs == [] and counts["documents_dropped.empty_file"] == 1
    assert counts["documents_read"] == 1


def test_a_book_of_one_overlong_line_is_not_an_empty_file(monkeypatch):
    import pipeline.sources.books as books
    import pipeline.sources.streams as streams

    monkeypatch.setattr(streams, "DEFAULT_MAX_LINE_BYTES", 100)
    original = streams.iter_lines
    monkeypatch.setattr(books, "iter_lines", lambda f, t: original(f, t, 100))
    docs, counts = read(read_book, b"word " * 1000)
    assert docs == []
    assert counts["documents_dropped.only_overlong_lines"] == 1
    assert "documents_dropped.empty_file" not in counts


def test_a_repeated_jsonl_id_is_refused_naming_both_lines():
    data = (
        b'{"id": "a", "text": "One."}\n{"id": "b", "text": "Two."}\n{"id": "a", "text": "Three."}\n'
    )
    with pytest.raises(BadInputError, match=r"f\.txt:3: id 'a' was already used on line 1"):
        read(read_jsonl, data)
    docs, counts = read(read_jsonl, data, skip=True)
    assert [d.id for d in docs] == ["jsonl:a", "jsonl:b"]
    assert counts["documents_dropped.jsonl_duplicate_id"] == 1


def test_one_id_in_two_jsonl_files_stops_the_build(tmp_path):
    """Both copies differ, so --dedup could not help: the line does not offer it."""
    from tests.helpers import build_shards

    (tmp_path / "in").mkdir()
    for name, text in (("a.jsonl", "First copy. It has words."), ("b.jsonl", "Second one. Other.")):
        stem = name.split(".")[0]
        lines = [f'{{"id": "{stem}-{i}", "text": "Filler number {i}. More."}}' for i in range(30)]
        lines.append(f'{{"id": "same", "text": "{text}"}}')
        (tmp_path / "in" / name).write_text("\n".join(lines) + "\n")
    with pytest.raises(
        SystemExit, match=r"document id 'jsonl:same' occurs twice in the input"
    ) as e:
        build_shards(str(tmp_path / "out"), "--vocab-size", "200", inputs=f"jsonl:{tmp_path}/in")
    assert f"read from {tmp_path}/in/a.jsonl, {tmp_path}/in/b.jsonl" in str(e.value)
    assert "--dedup" not in str(e.value)
    assert not (tmp_path / "out" / "manifest.json").exists()
