"""Inputs that cannot make a build are refused when they are listed, before any work starts and
before OUT is made, in one line naming the files and what to do: two files whose documents
would take the same ids (text and books ids are a file's name within its input), a named pipe
or device among the files, a dangling symbolic link, a FORMAT: prefix that is no format, and a
shard set among the files.
Ids are not changed to avoid a clash: they decide the shards' bytes. A clash only found when
the ids meet (JSONL ids, Wikipedia pages) says --dedup only where the copies could be equal."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from pipeline.core.buckets import RepeatedIdError, refuse_repeated_ids
from pipeline.core.instances import TokenizedDoc
from pipeline.files.listing import (
    InputSpec,
    listed,
    one_listing,
    refuse_shared_names,
    refuse_unusable_inputs,
    shard_set_inside,
    shared_name,
)
from pipeline.shell.cli import main
from pipeline.shell.configs import parse_inputs
from pipeline.sources.documents import BadInputError
from tests.helpers import SAMPLE

TEXT = os.path.join(SAMPLE, "text", "wiki-style.txt")


def build_refusal(tmp_path, *argv: str) -> str:
    """The one line a build is refused with; OUT is not made."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["build", *argv, "--out", str(out), "--workers", "1", "--vocab-size", "300"])
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert not out.exists()
    return message


@pytest.fixture
def two_inputs(tmp_path):
    """in/A/part-0.txt and in/B/part-0.txt: one name within two inputs, two texts."""
    for name, text in (("A", "One sentence here.\n"), ("B", "Another one, longer than that.\n")):
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "part-0.txt").write_text(text)
    return tmp_path / "in"


def specs(*patterns: str, fmt: str = "text") -> list[InputSpec]:
    return [InputSpec(fmt, p) for p in patterns]


# -- a shard set as input -----------------------------------------------------------------


def test_a_shard_set_in_the_input_is_refused_naming_its_manifest(sample_shards, tmp_path):
    """A build's OUT, given as the input or inside it: its shards are binary and its vocab and
    JSON would be read as text (with --skip-bad-input, silently)."""
    shutil.copytree(sample_shards, tmp_path / "parent" / "set")
    manifest = str(tmp_path / "parent" / "set" / "manifest.json")
    for inputs in (str(tmp_path / "parent" / "set"), f"books:{tmp_path}/parent/"):
        pattern = inputs.split(":")[-1]
        assert build_refusal(tmp_path, "--input", inputs, "--skip-bad-input") == (
            f"error: the input {pattern} holds a shard set ({manifest}), a build's output whose "
            f"files would be read as {'books' if 'books:' in inputs else 'text'} input; give the "
            "corpus folder, or a glob that leaves the set out"
        )
    corpus = tmp_path / "corpus"  # a manifest.json of someone's own, no shards/ beside it
    corpus.mkdir()
    (corpus / "manifest.json").write_text('{"pages": 1}\n')
    (corpus / "book.txt").write_text("A sentence of a book. Another one follows it.\n")
    assert shard_set_inside(InputSpec("text", str(corpus))) is None


# -- one name within two inputs ------------------------------------------------------------


def test_two_files_with_one_name_within_their_inputs_are_refused_naming_both(two_inputs):
    a, b = f"{two_inputs}/A", f"{two_inputs}/B"
    assert shared_name(specs(a, b)) == (
        f"{a}/part-0.txt and {b}/part-0.txt have the same name within their inputs "
        "(part-0.txt), which names their documents; rename one, give a folder above both as "
        "one input"
    )
    (two_inputs / "B" / "part-0.txt").write_text("One sentence HERE.\n")  # one size: copies?
    assert "pass --dedup (make: ARGS=--dedup) if they are copies" in shared_name(specs(a, b))
    with pytest.raises(SystemExit, match=r"^error: .*part-0\.txt and .*part-0\.txt have the"):
        refuse_shared_names(specs(a, b), dedup=False)
    refuse_shared_names(specs(a, b), dedup=True)  # equal copies are dropped before ids meet


@pytest.mark.parametrize(
    "patterns",
    [("x", "x"), ("x", "x/a.txt"), ("x/", "x/*.txt")],
)
def test_one_file_given_twice_is_refused(tmp_path, patterns):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.txt").write_text("A sentence.\n")
    given = [f"{tmp_path}/{p}" for p in patterns]
    line = shared_name(specs(*given))
    assert line == (
        f"{tmp_path}/x/a.txt is read twice, as a.txt of the inputs {given[0]} and {given[1]}, "
        "so each of its documents would be there twice; give each file once"
    )


def test_what_cannot_clash_is_not_refused(tmp_path, two_inputs):
    a, b = f"{two_inputs}/A", f"{two_inputs}/B"
    assert shared_name(specs(f"{two_inputs}")) is None  # A/part-0.txt, B/part-0.txt
    assert shared_name(specs(a, f"{two_inputs}")) is None  # part-0.txt, A/part-0.txt: two ids
    assert shared_name([InputSpec("text", a), InputSpec("books", b)]) is None  # text:, books:
    (two_inputs / "B" / "part-0.txt").write_text("")
    assert shared_name(specs(a, b)) is None  # an empty file makes no document
    # JSONL ids come from the records when they have one: only one file read twice must clash
    for name in ("A", "B"):
        (two_inputs / name / "part-0.jsonl").write_text(f'{{"id": "{name}", "text": "Hi."}}\n')
    jsonl = specs(f"{a}/*.jsonl", f"{b}/*.jsonl", fmt="jsonl")
    assert shared_name(jsonl) is None
    assert "is read twice" in shared_name([jsonl[0], jsonl[0]])


def test_a_build_of_two_inputs_sharing_a_name_is_refused_before_out(tmp_path, two_inputs):
    message = build_refusal(tmp_path, "--input", f"{two_inputs}/A", "--input", f"{two_inputs}/B")
    assert message.endswith("rename one, give a folder above both as one input")
    message = build_refusal(tmp_path, "--input", f"{two_inputs}/A,{two_inputs}/A/part-0.txt")
    assert "part-0.txt is read twice" in message


# -- names that are no files ------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "in").mkdir()
    shutil.copy(TEXT, tmp_path / "in" / "ok.txt")
    return tmp_path / "in"


@pytest.mark.parametrize("given", ["{in}", "{in}/", "{in}/*.txt", "{in}/**", "{in}/pipe.txt"])
def test_a_named_pipe_among_the_files_is_refused(folder, given):
    os.mkfifo(folder / "pipe.txt")
    spec = InputSpec("text", given.format(**{"in": folder}))
    with pytest.raises(SystemExit) as e:
        refuse_unusable_inputs([spec])
    what = f"error: {folder}/pipe.txt is a named pipe (FIFO), not a regular file, so it cannot be "
    if given.endswith("pipe.txt"):  # the pipe itself given, as /dev/stdin under `cat x |`
        assert e.value.code == what + (
            "read as input (the command reads its files more than once); write what it gives "
            "to a file, and give that file"
        )
    else:
        assert e.value.code == what + (
            "read as input; remove it from the input folder, or name the input's files with a "
            "glob that leaves it out"
        )
    with pytest.raises(BadInputError):  # a listing inside the graph does not read it either
        listed(spec)
    refuse_unusable_inputs([InputSpec("text", f"{folder}/ok.txt")])  # left out: fine


@pytest.mark.parametrize("given", ["{in}", "{in}/*.txt", "{in}/gone.txt"])
def test_a_dangling_symbolic_link_is_refused(folder, given, tmp_path):
    os.symlink(tmp_path / "missing.txt", folder / "gone.txt")
    with pytest.raises(SystemExit) as e, one_listing():
        refuse_unusable_inputs([InputSpec("text", given.format(**{"in": folder}))])
    assert e.value.code == (
        f"error: {folder}/gone.txt is a symbolic link to {tmp_path}/missing.txt, which does not "
        "exist; remove the link or restore what it points to"
    )


def test_a_dangling_link_matched_by_a_glob_relative_to_here_is_refused(
    folder, tmp_path, monkeypatch
):
    """A glob with no folder before it ("*.txt") is matched in the working folder, and a
    dangling link it matches is named as the pattern spells it."""
    os.symlink(tmp_path / "missing.txt", folder / "gone.txt")
    monkeypatch.chdir(folder)
    with pytest.raises(SystemExit) as e, one_listing():
        refuse_unusable_inputs([InputSpec("text", "*.txt")])
    assert e.value.code == (
        f"error: gone.txt is a symbolic link to {tmp_path}/missing.txt, which does not exist; "
        "remove the link or restore what it points to"
    )


def test_links_that_resolve_and_empty_files_are_listed(folder):
    os.symlink(folder / "ok.txt", folder / "link.txt")
    (folder / "empty.txt").write_text("")
    refuse_unusable_inputs([InputSpec("text", str(folder))])
    assert [rel for _, _, rel, _ in listed(InputSpec("text", str(folder)))] == [
        "empty.txt",
        "link.txt",
        "ok.txt",
    ]


def test_a_build_with_a_pipe_in_its_input_is_refused_before_out(tmp_path, folder):
    os.mkfifo(folder / "pipe.txt")
    message = build_refusal(tmp_path, "--input", str(folder))
    assert message.startswith(f"error: {folder}/pipe.txt is a named pipe (FIFO)")


@pytest.mark.parametrize("given", ["{in}", "{in}/*.txt", "{in}/caf\udce9.txt"])
def test_a_name_that_is_not_utf8_is_refused_naming_its_bytes(folder, tmp_path, given):
    """A Latin-1 name (Python holds its byte as a surrogate) stopped the build at its first
    step, in words of Beam's; refused before OUT, its byte escaped."""
    (folder / "caf\udce9.txt").write_text("One sentence here.\n")  # b"caf\xe9.txt"
    assert os.path.exists(os.fsencode(folder) + b"/caf\xe9.txt")
    message = build_refusal(tmp_path, "--input", given.format(**{"in": folder}))
    assert message == (
        f"error: {folder}/caf\\xe9.txt: the file's name is not UTF-8 (its bytes shown escaped), "
        "and ids and the build's records are text; rename it (`convmv -f latin1 -t utf-8 "
        "--notest -r DIR` renames a folder's), or leave it out of the input"
    )


def test_standard_input_is_refused_before_out(tmp_path):
    message = build_refusal(tmp_path, "--input", "-")
    assert message == (
        "error: --input -: standard input cannot be an input (the command reads its files more "
        "than once); write it to a file, and give that file"
    )


# -- a FORMAT: prefix that is no format -------------------------------------------------------


def test_a_prefix_that_is_no_format_is_refused_naming_the_formats(tmp_path):
    with pytest.raises(ValueError) as e:
        parse_inputs([f"xml:{SAMPLE}/books"], "text")
    assert str(e.value) == (
        f"--input xml:{SAMPLE}/books: xml is not an input format (arrow, books, jsonl, "
        f"paragraphs, parquet, text, wikiextractor, wikipedia), and no file is named "
        f"xml:{SAMPLE}/books; "
        "write FORMAT:PATH with one of those formats"
    )
    message = build_refusal(tmp_path, "--input", f"xml:{SAMPLE}/books")
    assert message.startswith("error: --input xml:") and "is not an input format" in message


def test_paths_with_a_colon_are_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("notes:2020")
    shutil.copy(TEXT, "notes:2020/a.txt")
    assert parse_inputs(["notes:2020", "gs://bucket/x", "C:/corpus"], "books") == (
        InputSpec("books", "notes:2020"),  # a folder of that name
        InputSpec("books", "gs://bucket/x"),  # a scheme, not a prefix
        InputSpec("books", "C:/corpus"),  # one letter: a drive
    )


@pytest.mark.parametrize(
    "command, flag, url",
    [
        ("build", "--out", "s3://bucket/set"),  # Beam's S3 filesystem would be made optionless
        ("build", "--input", "s3://bucket/books"),  # else "no input files match" hid why
        ("build", "--input", "books:hdfs://host/books"),
        ("build", "--input", f"{TEXT},azfs://account/container/x"),  # one item of a value
        ("build", "--vocab", "s3://bucket/vocab.txt"),
        ("build", "--punkt", "s3://bucket/punkt.json"),
        ("vocab", "--out", "s3://bucket/vocab"),
        ("punkt", "--input", "s3://bucket/books"),
    ],
)
def test_a_url_of_another_store_is_refused_before_any_work(
    tmp_path, monkeypatch, command, flag, url
):
    monkeypatch.chdir(tmp_path)  # a URL taken for a local path would leave a folder `s3:` here
    given = {"--input": TEXT, "--out": "out", flag: url}
    argv = [command, *(x for item in given.items() for x in item), "--workers", "1"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    shown = url.split(",")[-1]
    scheme = shown.split("://")[0].rpartition(":")[2]
    assert e.value.code == (
        f"error: {flag} {shown}: {scheme}:// is not a store this reads or writes; give a local "
        "path or a gs:// URL"
    )
    assert os.listdir(tmp_path) == []


# -- one id twice, found when the ids meet ----------------------------------------------------


def doc(doc_id: str, ids) -> tuple[int, TokenizedDoc]:
    return 0, TokenizedDoc(doc_id, np.array(ids, np.int32), np.array([0, len(ids)], np.int64))


def test_a_repeat_says_dedup_only_when_the_copies_could_be_equal():
    with pytest.raises(RepeatedIdError) as e:
        refuse_repeated_ids([doc("jsonl:same", [5, 6]), doc("jsonl:same", [5, 7])])
    assert e.value.equal is False and "--dedup" not in str(e.value)
    assert "JSONL records with the same id in two files" in str(e.value)
    with pytest.raises(RepeatedIdError) as e:
        refuse_repeated_ids([doc("wikipedia:12", [5, 6]), doc("wikipedia:12", [5, 6])])
    assert e.value.equal is True
    assert str(e.value) == (
        "document id 'wikipedia:12' occurs twice in the input (one Wikipedia page in two "
        "dumps); an id names one document: give each dump once; when the copies are equal, "
        "--dedup (make: ARGS=--dedup) keeps one"
    )


@pytest.mark.parametrize(
    "doc_id, cause",
    [
        ("text:part-0.txt#0", "two files with the same name within their inputs"),
        ("books:a.txt", "two books with the same name within their inputs"),
        ("jsonl:x", "JSONL records with the same id in two files"),
        ("wikipedia:3", "one Wikipedia page in two dumps"),
    ],
)
def test_a_repeat_names_how_its_source_repeats_ids(doc_id, cause):
    message = str(RepeatedIdError.of(doc_id, " (read from a, b)", equal=False))
    assert message.startswith(f"document id {doc_id!r} occurs twice in the input (read from a, b)")
    assert cause in message and "--dedup" not in message
    assert RepeatedIdError(message).id == ""  # Beam makes it again from the message alone
