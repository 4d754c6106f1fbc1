"""A document id read twice stops the build naming the files that hold it, not every file
that was read with them; `--dedup` keeps one of equal copies."""

from __future__ import annotations

import shutil

import pytest

from pipeline.stages.instances import named_files
from schemas.reader import ShardSet
from tests.helpers import ROOT, build_shards
from tests.pipeline.wikidata import export, page_xml


def test_the_files_named_are_those_whose_path_is_the_ids():
    files = [f"/c/copy-{k}/{name}" for k in (0, 1) for name in ("a.txt", "b/a.txt", "b.txt")]
    assert named_files("books:b/a.txt", files) == "/c/copy-0/b/a.txt, /c/copy-1/b/a.txt"
    # a file below another folder may have that id too (its input's folder is not known here)
    assert named_files("books:a.txt", files) == (
        "/c/copy-0/a.txt, /c/copy-0/b/a.txt, /c/copy-1/a.txt, /c/copy-1/b/a.txt"
    )


def test_an_id_no_path_holds_names_the_first_files_and_counts_the_rest():
    files = [f"/in/{k}.jsonl" for k in range(7)]
    assert named_files("jsonl:same", files[:2]) == "/in/0.jsonl, /in/1.jsonl"
    assert named_files("jsonl:same", files) == (
        "/in/0.jsonl, /in/1.jsonl, /in/2.jsonl, /in/3.jsonl and 3 more files"
    )


def test_two_copies_of_a_book_folder_are_refused_before_the_build_naming_two_files(tmp_path):
    """Books ids are the files' names within their inputs: the clash is seen in the listing."""
    for k in (0, 1):
        shutil.copytree(f"{ROOT}/sample/books", tmp_path / f"copy-{k}")
    inputs = ",".join(f"books:{tmp_path}/copy-{k}" for k in (0, 1))
    with pytest.raises(SystemExit, match="have the same name within their inputs") as e:
        build_shards(str(tmp_path / "out"), "--vocab-size", "300", inputs=inputs)
    message = str(e.value)
    assert message.count(str(tmp_path)) == 2 and "--dedup" in message  # one size: copies
    assert not (tmp_path / "out").exists()


def test_two_jsonl_files_of_one_name_stop_the_build_naming_the_two_files(tmp_path):
    """Records without an id take their file's name within its input and their line: two
    files of one name repeat them, found when the ids meet."""
    for k in (0, 1):
        (tmp_path / f"copy-{k}").mkdir()
        lines = [f'{{"text": "Copy {k} says line {i}. It goes on."}}' for i in range(30)]
        (tmp_path / f"copy-{k}" / "part.jsonl").write_text("\n".join(lines) + "\n")
    inputs = ",".join(f"jsonl:{tmp_path}/copy-{k}" for k in (0, 1))
    with pytest.raises(SystemExit, match="occurs twice in the input") as e:
        build_shards(str(tmp_path / "out"), "--vocab-size", "300", inputs=inputs)
    message = str(e.value)
    assert f"read from {tmp_path}/copy-0/part.jsonl, {tmp_path}/copy-1/part.jsonl)" in message
    assert message.count(str(tmp_path)) == 2 and "--dedup" not in message  # they differ


SHARED = "The shared page is in both dumps. Its text says the same thing in each of them."


def write_two_dumps(root, shared_text: str) -> str:
    """Two Wikipedia dumps that both hold page 7, as the `wikipedia:` input of both."""
    prose = "{} is a page of its own. It has a second sentence, and a third one follows it."
    (root / "a.xml").write_bytes(
        export(page_xml(1, "A", prose.format("A")), page_xml(7, "S", SHARED))
    )
    (root / "b.xml").write_bytes(
        export(page_xml(7, "S", shared_text), page_xml(9, "B", prose.format("B")))
    )
    return f"wikipedia:{root}/a.xml,wikipedia:{root}/b.xml"


@pytest.mark.parametrize("flag", [[], ["--skip-bad-input"]])
def test_one_wikipedia_page_in_two_dumps_stops_the_build_naming_both(tmp_path, flag):
    """Also with --skip-bad-input: the input is not bad, it is given twice; the copies are equal,
    so the line offers --dedup."""
    inputs = write_two_dumps(tmp_path, SHARED)
    with pytest.raises(SystemExit, match="one Wikipedia page in two dumps") as e:
        build_shards(str(tmp_path / "out"), "--vocab-size", "300", *flag, inputs=inputs)
    message = str(e.value)
    assert "document id 'wikipedia:7' occurs twice" in message
    assert f"{tmp_path}/a.xml, {tmp_path}/b.xml" in message and "--dedup" in message


def test_dedup_keeps_one_copy_of_a_page_in_two_dumps_and_refuses_copies_that_differ(tmp_path):
    inputs = write_two_dumps(tmp_path, SHARED)
    out = str(tmp_path / "out")
    assert build_shards(out, "--vocab-size", "300", "--dedup", inputs=inputs) == 0
    total = ShardSet.open(out).manifest.counts["total"]
    assert total["documents_dropped.duplicate"] == 1 and total["documents_read"] == 4
    other = tmp_path / "other"
    other.mkdir()
    inputs = write_two_dumps(other, SHARED.replace("same thing", "other thing"))
    with pytest.raises(SystemExit, match="'wikipedia:7' occurs twice") as e:
        build_shards(str(other / "out"), "--vocab-size", "300", "--dedup", inputs=inputs)
    assert "--dedup" not in str(e.value)  # the copies differ: keeping one would lose the other
