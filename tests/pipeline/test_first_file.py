"""A wrong --format is refused before any work starts: each input's first file is read as its
format's reader reads it (`pipeline.sources.head`), in the reader's words, before OUT is made;
and a MediaWiki export or JSON Lines given as text or books, with --skip-bad-input too."""

from __future__ import annotations

import bz2
import gzip
import io
import json

import pytest

from pipeline.shell.cli import main
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.head import HEAD_BYTES, check_head
from pipeline.sources.wikipedia.pages import iter_pages
from schemas.manifest import Manifest
from tests.helpers import SAMPLE_TEXT, read
from tests.pipeline.wikidata import BULGARIAN, gensim_xml, page_xml

PROSE = SAMPLE_TEXT + "/wiki-style.txt"


def export(*pages: str) -> bytes:
    body = "".join(pages)
    return f'<mediawiki xml:lang="en">\n  <siteinfo></siteinfo>\n{body}</mediawiki>\n'.encode()


def head_refusal(fmt: str, data: bytes, name: str = "input") -> str | None:
    """check_head's message for a file holding `data`, or None when it passes."""
    try:
        check_head(fmt, name, name, lambda _: io.BytesIO(data))
    except BadInputError as e:
        return str(e)
    return None


@pytest.mark.parametrize(
    "fmt, write, said",
    [
        ("jsonl", lambda p: p.write_text("Plain prose.\n"), "input.txt:1: not JSON"),
        ("jsonl", lambda p: p.write_text('{"text": "a"}\n[1]\n'), "input.txt:2: a JSON list"),
        ("books", lambda p: p.write_bytes(gzip.compress(b"prose\n")), "a gzip file, not text"),
        ("text", lambda p: p.write_bytes(b"\x00\x01\x02\x00" * 64), "a binary file"),
        ("wikipedia", lambda p: p.write_text('{"text": "a"}\n'), "not a MediaWiki XML export"),
    ],
)
@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_a_first_file_not_in_its_format_is_refused_before_out_is_made(
    tmp_path, fmt, write, said, command
):
    write(tmp_path / "input.txt")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main([command, "--input", f"{fmt}:{tmp_path}/input.txt", "--out", str(out)])
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message
    assert said in message and "--skip-bad-input" in message
    assert not out.exists()


def test_with_skip_bad_input_the_first_file_is_counted_not_refused(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(b"\x00\x01\x02\x00" * 64)
    (corpus / "b.txt").write_bytes(read(PROSE))
    out = tmp_path / "out"
    argv = ["build", "--input", f"text:{corpus}", "--out", str(out), "--workers", "1"]
    assert main([*argv, "--skip-bad-input"]) == 0
    counts = Manifest.from_json((out / "manifest.json").read_text()).counts["total"]
    assert counts["documents_dropped.binary_file"] == 1 and counts["files_read"] == 2
    assert counts["documents_used"] == counts["documents_read"] - 1 > 0


@pytest.mark.parametrize("skip", [[], ["--skip-bad-input"]])
@pytest.mark.parametrize("fmt", ["text", "books"])
def test_an_export_or_json_lines_read_as_prose_is_refused_with_skip_bad_input_too(
    tmp_path, fmt, skip
):
    """The default format takes an input without a prefix as text, which would read markup
    as prose: no bad record for --skip-bad-input to count, so refused with it too."""
    records = "".join(json.dumps({"id": i, "text": f"Record {i}."}) + "\n" for i in range(3))
    (tmp_path / "r.jsonl").write_text(records)
    dump = export(page_xml(1, "T", "Some prose."))
    (tmp_path / "d.xml.bz2").write_bytes(bz2.compress(b'<?xml version="1.0"?>\n' + dump))
    kinds = {"jsonl": "JSON Lines, a record per line", "wikipedia": "a MediaWiki XML export"}
    for name, other in (("r.jsonl", "jsonl"), ("d.xml.bz2", "wikipedia")):
        out = tmp_path / "out"
        with pytest.raises(SystemExit) as e:
            main(["build", "--input", f"{fmt}:{tmp_path}/{name}", "--out", str(out), *skip])
        assert str(e.value.code) == (
            f"error: {name}: {kinds[other]}, whose markup the {fmt} format would take as "
            f"prose; pass --format {other} (make: FORMAT={other}) or prefix the input with "
            f"{other}:, or leave the file out of the input"
        )
        assert not out.exists()


def test_prose_that_holds_some_markup_is_read_as_prose():
    mixed = b'Prose first.\n{"text": "a record"}\n'
    starts_late = b"A note on the export format.\n<mediawiki>\n"
    for data in (mixed, starts_late, b"{not json}\n", b'{"title": "no text"}\n'):
        assert head_refusal("text", data) is None, data
    one_long_line = json.dumps({"text": "w" * HEAD_BYTES}).encode()  # no whole line in the head
    assert head_refusal("books", one_long_line) is None


def test_only_whole_lines_of_the_head_are_read():
    long_record = json.dumps({"text": "word " * (HEAD_BYTES // 4)}) + "\n"
    assert head_refusal("jsonl", long_record.encode() + b"not json\n") is None
    near_the_end = json.dumps({"text": "w" * (HEAD_BYTES - 20)}) + "\n" + '{"text": "cut'
    assert len(near_the_end) > HEAD_BYTES
    assert head_refusal("jsonl", near_the_end.encode()) is None


def test_heads_of_good_files_pass():
    prose = read(PROSE)
    records = "".join(json.dumps({"id": i, "text": f"Record {i}."}) + "\n" for i in range(9999))
    assert len(records) > HEAD_BYTES
    dump = export(*(page_xml(i, f"T{i}", "Some prose. " * 50) for i in range(1, 200)))
    assert len(dump) > HEAD_BYTES
    cases = [
        ("text", prose, "a.txt"),
        ("books", gzip.compress(prose), "a.txt.gz"),
        ("jsonl", records.encode(), "a.jsonl"),
        ("jsonl", b"\xff\xfe" + records.encode("utf-16-le"), "a.jsonl"),  # cut inside a record
        ("wikipedia", bz2.compress(dump), "a.xml.bz2"),
        ("wikipedia", b"", "empty.xml"),  # dropped and counted by the reader
        ("wikipedia", b"  \n", "blank.xml"),
    ]
    for fmt, data, name in cases:
        assert head_refusal(fmt, data, name) is None, (fmt, name)


def test_a_utf16_export_passes_and_pages_before_any_header_do_not():
    assert head_refusal("wikipedia", gensim_xml(BULGARIAN), "bg.xml") is None
    pages = page_xml(1, "T", "prose").encode()
    with pytest.raises(BadInputError) as e:
        list(iter_pages(io.BytesIO(pages), "x.xml", Tally()))
    assert head_refusal("wikipedia", pages, "x.xml") == str(e.value)  # the reader's words
