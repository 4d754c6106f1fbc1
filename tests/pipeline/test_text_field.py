"""`--text-field`: JSON Lines records and Parquet rows whose text is under another name
(`content`, `raw_content`, ...) build what the same records under `text` build; the name is
recorded in the set's config only when it is not `text` (every earlier set stays the same), a
resume across a change of it is refused, and a wrong name is said in one line naming what is
there."""

from __future__ import annotations

import io
import json
import os

import pytest

from pipeline.build import resume_problem
from pipeline.shell.cli import main
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.head import check_head
from pipeline.sources.readers import READERS
from schemas.reader import ShardSet
from tests.helpers import SAMPLE

BOOKS = os.path.join(SAMPLE, "books")


def book_records() -> list[dict]:
    """The sample's books, a record each, in a stable order."""
    paths = sorted(
        os.path.join(d, f) for d, _, files in os.walk(BOOKS) for f in files if f.endswith(".txt")
    )
    with_text = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            with_text.append({"id": os.path.relpath(path, BOOKS), "text": f.read()})
    return with_text


def renamed(records: list[dict], field: str) -> list[dict]:
    """The records with their text under `field`, and a `text` that is no text beside it."""
    return [{"id": r["id"], field: r["text"], "text": 7} for r in records]


def write_jsonl(path, records: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return str(path)


def build(tmp_path, name: str, *argv: str) -> str:
    out = str(tmp_path / name)
    assert main(["build", *argv, "--out", out, "--workers", "1", "--vocab-size", "500"]) == 0
    return out


def test_a_jsonl_build_from_another_field_is_the_build_from_text(tmp_path):
    records = book_records()
    plain = write_jsonl(tmp_path / "plain.jsonl", records)
    other = write_jsonl(tmp_path / "other.jsonl", renamed(records, "content"))
    a = build(tmp_path, "a", "--input", f"jsonl:{plain}")
    b = build(tmp_path, "b", "--input", f"jsonl:{other}", "--text-field", "content")
    sa, sb = ShardSet.open(a), ShardSet.open(b)
    assert len(sa) == len(sb) and all(sa.table(i).equals(sb.table(i)) for i in range(len(sa)))
    with open(f"{a}/vocab.txt") as fa, open(f"{b}/vocab.txt") as fb:
        assert fa.read() == fb.read()
    ca, cb = sa.manifest.config, sb.manifest.config
    assert "text_field" not in ca and cb.pop("text_field") == "content" and ca == cb
    # the vocab command reads the same field, and trains the build's vocab
    argv = ["--input", f"jsonl:{other}", "--text-field", "content", "--workers", "1"]
    assert main(["vocab", *argv, "--out", str(tmp_path / "v"), "--vocab-size", "500"]) == 0
    with open(tmp_path / "v" / "vocab.txt") as fv, open(f"{a}/vocab.txt") as fa:
        assert fv.read() == fa.read()
    # and punkt learns from the same paragraphs
    named = ["--input", f"jsonl:{other}", "--text-field", "content"]
    for name, given in (("pa", ["--input", f"jsonl:{plain}"]), ("pb", named)):
        assert main(["punkt", *given, "--workers", "1", "--out", str(tmp_path / name)]) == 0
    with open(tmp_path / "pa" / "punkt.json") as pa, open(tmp_path / "pb" / "punkt.json") as pb:
        assert pa.read() == pb.read()


def test_parquet_rows_from_another_column_are_the_rows_from_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = book_records()[:3]
    columns = {"id": [r["id"] for r in records], "body": [r["text"] for r in records]}
    path = str(tmp_path / "b.parquet")
    pq.write_table(pa.table(columns), path, row_group_size=2)
    plain = str(tmp_path / "p.parquet")
    pq.write_table(pa.table({"id": columns["id"], "text": columns["body"]}), plain)

    def docs(p: str, **field):
        with open(p, "rb") as f:
            return list(READERS["parquet"](f, "x.parquet", Tally(), "parquet", **field))

    assert docs(path, text_field="body") == docs(plain) and len(docs(plain)) == 3
    check_head("parquet", path, "b.parquet", lambda _: open(path, "rb"), text_field="body")
    with pytest.raises(BadInputError) as e:
        docs(path)
    assert str(e.value) == (
        "x.parquet: no `text` column among ['id', 'body']; the parquet format reads a "
        "document's text from the string column --text-field names (text)"
    )


def test_a_record_without_the_field_names_the_fields_it_has():
    data = b'{"text": "Good."}\n{"title": "T", "body": "B"}\n'
    with pytest.raises(BadInputError) as e:
        list(READERS["jsonl"](io.BytesIO(data), "part.jsonl", Tally(), "jsonl"))
    assert str(e.value).startswith(
        "part.jsonl:2: no `text` field (its fields: 'title', 'body'); each line needs a string "
        "`text` (--text-field names the field)"
    )
    docs = READERS["jsonl"](io.BytesIO(data), "part.jsonl", Tally(), "jsonl", text_field="body")
    with pytest.raises(BadInputError, match=r"^part\.jsonl:1: no `body` field \(its fields: 'tex"):
        list(docs)


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["--input", f"books:{BOOKS}", "--text-field", "content"],
            "--text-field: text_field 'content' is read from jsonl, parquet and arrow inputs, "
            "and no input is one: leave it out, or give the input its format (jsonl:PATH)",
        ),
        (
            ["--input", f"jsonl:{BOOKS}", "--text-field", "id"],
            "--text-field: text_field 'id' names no field of text: give the name of the "
            "records' field (Parquet: column) that holds each document's text",
        ),
        (
            ["--input", f"jsonl:{BOOKS}", "--text-field", ""],
            "--text-field: text_field '' names no field of text: give the name of the "
            "records' field (Parquet: column) that holds each document's text",
        ),
    ],
)
def test_a_text_field_that_cannot_be_read_is_refused_before_out(tmp_path, argv, said):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["build", *argv, "--out", str(out), "--workers", "1"])
    assert e.value.code == f"error: {said}"
    assert not out.exists()


def test_a_resume_across_a_change_of_the_field_is_refused_either_way():
    record = {"config": {"seed": 1}, "inputs": [], "vocab_sha256": None}
    other = {**record, "config": {"seed": 1, "text_field": "content"}}
    assert resume_problem(record, other) == (
        "the config differs from the interrupted build's (text_field None -> 'content')"
    )
    assert resume_problem(other, record) == (
        "the config differs from the interrupted build's (text_field 'content' -> None)"
    )
    assert resume_problem(other, other) is None
