"""JSON Lines reader: `text` plus optional `id`, stable ids, bad records."""

from __future__ import annotations

import io
import json
import random
import re
import sys

import pytest

from pipeline.sources.documents import BadInputError, Document, Tally
from pipeline.sources.jsonl import numbered_lines, read_jsonl, text_paragraphs
from pipeline.sources.readers import READERS


def jsonl(*records) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )


def read(data: bytes, skip: bool = False) -> tuple[list[Document], Tally]:
    tally = Tally(skip_bad_input=skip)
    return list(read_jsonl(io.BytesIO(data), "part-0.jsonl", tally)), tally


def test_text_and_id_make_documents_with_stable_ids() -> None:
    data = jsonl(
        {"id": "doc-7", "text": "First paragraph here.\n\nSecond\nparagraph  wraps."},
        {"text": "No id: the line number names it.", "meta": {"x": 1}},
        {"id": 42, "text": "Integer ids are kept."},
        {"id": None, "text": "A null id is no id."},
    )
    docs, tally = read(data)
    assert docs == [
        Document("jsonl:doc-7", "jsonl", ("First paragraph here.", "Second paragraph wraps.")),
        Document("jsonl:part-0.jsonl#2", "jsonl", ("No id: the line number names it.",)),
        Document("jsonl:42", "jsonl", ("Integer ids are kept.",)),
        Document("jsonl:part-0.jsonl#4", "jsonl", ("A null id is no id.",)),
    ]
    assert not tally.counts
    assert READERS["jsonl"](io.BytesIO(data), "part-0.jsonl", Tally(), "jsonl") is not None


def test_blank_lines_are_not_records_and_line_numbers_stay_exact() -> None:
    data = b"\n" + jsonl({"text": "Third line."}) + b"  \n" + jsonl({"text": "Fifth line."})
    docs, _ = read(data)
    assert [d.id for d in docs] == ["jsonl:part-0.jsonl#2", "jsonl:part-0.jsonl#4"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (json.dumps({"title": "no text"}).encode(), "no `text` field"),
        (json.dumps({"text": 12}).encode(), "`text` is a int"),
    ],
)
def test_a_bad_record_stops_the_run_naming_file_and_line(line: bytes, message: str) -> None:
    data = jsonl({"text": "Good one."}, line, {"text": "Never reached."})
    with pytest.raises(BadInputError, match=rf"part-0\.jsonl:2: .*{message}.*--skip-bad-input"):
        read(data)


def test_bad_records_are_skipped_and_counted_when_asked() -> None:
    data = jsonl({"text": "Good one."}, b"{broken", {"title": "x"}, {"text": "Also good."})
    docs, tally = read(data, skip=True)
    assert [d.paragraphs for d in docs] == [("Good one.",), ("Also good.",)]
    assert tally.counts["documents_dropped.jsonl_bad_record"] == 2
    assert tally.counts["documents_read"] == 2  # the dropped ones; the reader's caller counts kept


def test_empty_text_and_empty_file_are_counted_drops() -> None:
    docs, tally = read(jsonl({"text": "  \n\n "}, {"text": "Kept."}))
    assert len(docs) == 1 and tally.counts["documents_dropped.jsonl_empty_text"] == 1
    docs, tally = read(b"")
    assert docs == [] and tally.counts["documents_dropped.empty_file"] == 1


def test_undecodable_bytes_inside_a_record_are_replaced_and_counted() -> None:
    docs, tally = read(b'{"text": "caf\xe9 au lait"}\n')
    assert docs[0].paragraphs == ("caf\ufffd au lait",)
    assert tally.counts["undecodable_bytes_replaced"] == 1


def test_numbered_lines_skip_an_overlong_line_without_holding_it() -> None:
    data = b"short\n" + b"x" * 5000 + b"\nafter\n" + b"y" * 3000
    lines = list(numbered_lines(io.BytesIO(data), Tally(), max_line_bytes=1000))
    assert lines == [(1, "short"), (2, None), (3, "after"), (4, None)]


def test_paragraphs_split_on_blank_lines_only() -> None:
    assert text_paragraphs("a\nb\n \t\nc\r\n\r\nd") == ("a b", "c", "d")


def test_paragraphs_collapse_every_whitespace_character_as_a_regular_expression_does() -> None:
    # each block as `re.sub(r"\s+", " ", block).strip()` writes it, on text of every character
    # Python takes for whitespace (its quick route keeps blocks of single spaces as they are)
    spaces = re.compile(r"\s+")
    whitespace = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    words = ["Word", "é", "日本", "\u200b", "\x01", "a.b", "\U0001f600"]
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(
            rng.choice([" ", " ", "\n", "\n\n", "\n \n", "  "] + whitespace + words)
            for _ in range(rng.randrange(0, 25))
        )
        blocks = (spaces.sub(" ", b).strip() for b in re.split(r"\n[ \t\r\f\v]*\n", text))
        assert text_paragraphs(text) == tuple(b for b in blocks if b), repr(text)


def test_a_zstd_file_reads_as_its_text(tmp_path) -> None:
    """`.jsonl.zst`, The Pile's and SlimPajama's layout: decompressed by its extension, in
    the first-file check and in the read, into the documents of the same file uncompressed."""
    import zstandard

    from pipeline.sources.head import check_head
    from pipeline.sources.readers import read_input

    data = jsonl(
        *({"id": i, "text": f"Record {i} says one thing.\n\nThen more."} for i in range(50))
    )
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))

    def docs(name: str) -> list[Document]:
        path = str(tmp_path / name)
        check_head("jsonl", path, name, lambda p: open(p, "rb"))
        return list(read_input(("jsonl", path, name, None), Tally(), lambda p: open(p, "rb")))

    assert docs("a.jsonl.zst") == docs("a.jsonl") and len(docs("a.jsonl")) == 50
