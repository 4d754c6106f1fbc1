"""A corpus without document structure, as BooksCorpus often comes, and prose given as the
reference's sentence-per-line format: the build says so. Records that are sentences (Hugging
Face's `bookcorpus`) give random-next rows only, and a text file without blank lines (one
document) actual-next rows only: the build ends with a note; the sample's short documents,
whose labels a draw mostly decides, get none. A document too long to hold (a `text` block or a
book of more than 32 Mi characters: such a file of GBs) is dropped and counted, never held
whole, and the build says why; `vocab` and `punkt` left no text refuse to write. Prose read as
the text format (wrapped lines, or a paragraph a line) is noted before the build starts."""

from __future__ import annotations

import io
import json
import os
import tracemalloc

import pytest

import pipeline.sources.books as books
import pipeline.sources.text as text
from pipeline.shell.cli import main
from pipeline.shell.report import no_instances, too_long_note
from pipeline.sources.documents import Tally
from schemas.labels import forced_labels_note
from schemas.reader import ShardSet
from tests.helpers import SAMPLE, build_shards, file_digests


def sample_sentences() -> list[str]:
    """The sample's reference-format text, a sentence per line, in order."""
    folder = os.path.join(SAMPLE, "text")
    lines = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            lines += [line.strip() for line in f if line.strip()]
    return lines


def build(tmp_path, capsys, source: str) -> tuple[str, str]:
    out = str(tmp_path / "out")
    argv = ["build", "--input", source, "--out", out, "--workers", "1", "--vocab-size", "500"]
    assert main(argv) == 0
    return out, capsys.readouterr().out


def test_records_that_are_sentences_are_noted_as_all_random_next(tmp_path, capsys):
    records = tmp_path / "bookcorpus.jsonl"
    records.write_text("".join(json.dumps({"text": s}) + "\n" for s in sample_sentences()))
    out, said = build(tmp_path, capsys, f"jsonl:{records}")
    (note,) = [line for line in said.splitlines() if line.startswith("note: ")]
    assert note.startswith("note: 100.0% of rows are random-next, not about 50%")
    assert "documents of one sentence each" in note and "bookcorpus" in note
    assert note == forced_labels_note(ShardSet.open(out).manifest)
    # said again where the set is looked at and where it is trained on
    from model.cli import main as model_main
    from schemas.cli import main as schemas_main

    assert schemas_main(["inspect", out, "--n", "0"]) == 0
    assert note in capsys.readouterr().out.splitlines()
    run = ["pretrain", "--shards", out, "--run", str(tmp_path / "run"), "--steps", "1"]
    assert model_main([*run, "--batch-size", "4", "--eval-batches", "1"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert f"{note} (--no-nsp pre-trains the masked LM alone)" in said
    assert model_main([*run[:4], str(tmp_path / "mlm"), *run[5:], "--no-nsp"]) == 0
    assert not any(line.startswith("note: 100.0%") for line in capsys.readouterr().out.splitlines())


def test_a_text_file_without_blank_lines_is_noted_as_one_document(tmp_path, capsys):
    flat = tmp_path / "books_large_p1.txt"
    flat.write_text("".join(s + "\n" for s in sample_sentences()))
    _, said = build(tmp_path, capsys, f"text:{flat}")
    (note,) = [line for line in said.splitlines() if line.startswith("note: ")]
    assert note.startswith("note: 0.0% of rows are random-next, not about 50%")
    assert "(the whole input is one document; the text format ends a document only at a " in note


def random_next_share(out: str) -> tuple[float, int]:
    manifest = ShardSet.open(out).manifest
    return sum(s.random_next for s in manifest.shards) / manifest.rows, manifest.rows


@pytest.mark.parametrize("fmt", ["jsonl", "text"])
def test_records_per_document_joins_them_into_documents(tmp_path, capsys, fmt):
    """The sample's sentences as records (a line each for text): joined every 16, the
    next-sentence labels are drawn again (about half random-next), and the set says so."""
    path = tmp_path / ("bookcorpus.jsonl" if fmt == "jsonl" else "books_large_p1.txt")
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": s}) + "\n" for s in sample_sentences()))
    else:
        path.write_text("".join(s + "\n" for s in sample_sentences()))
    out, said = build(tmp_path, capsys, f"{fmt}:{path}")
    assert "records-per-document N" in said  # the note names the flag
    assert random_next_share(out)[0] in (0.0, 1.0)
    joined = str(tmp_path / "joined")
    argv = ["build", "--input", f"{fmt}:{path}", "--out", joined, "--workers", "1"]
    assert main([*argv, "--vocab", f"{out}/vocab.txt", "--records-per-document", "16"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if "random-next" in line]
    share, rows = random_next_share(joined)
    assert 0.4 < share < 0.65 and rows > 400
    manifest = ShardSet.open(joined).manifest
    assert manifest.config["records_per_document"] == 16
    assert manifest.counts["total"]["documents_used"] == 15  # 231 sentences: 14 of 16, one of 7


@pytest.mark.slow
def test_records_joined_on_a_local_dask_cluster_are_the_local_bytes(tmp_path):
    """The setting reaches Dask's workers with the read step's others: records and lines
    joined there build the local runner's bytes."""
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    records, flat = tmp_path / "bookcorpus.jsonl", tmp_path / "books_large_p1.txt"
    records.write_text("".join(json.dumps({"text": s}) + "\n" for s in sample_sentences()))
    flat.write_text("".join(s + "\n" for s in sample_sentences()))
    inputs = f"jsonl:{records},text:{flat}"
    local, dask = str(tmp_path / "local"), str(tmp_path / "dask")
    args = ("--vocab-size", "500", "--num-shards", "2", "--records-per-document", "16")
    assert build_shards(local, *args, inputs=inputs) == 0
    assert build_shards(dask, *args, "--runner", "DaskRunner", inputs=inputs) == 0
    assert file_digests(dask) == file_digests(local)
    assert ShardSet.open(dask).manifest.counts["total"]["documents_used"] == 30


def test_records_are_joined_in_order_under_the_first_ones_id():
    from pipeline.sources.readers import read_stream

    lines = b"".join(
        json.dumps({"id": f"r{i}", "text": f"Line {i}."}).encode() + b"\n" for i in range(5)
    )
    docs = list(read_stream("jsonl", io.BytesIO(lines), "a.jsonl", Tally(), ("text", "id", 2)))
    assert [(d.id, d.paragraphs) for d in docs] == [
        ("jsonl:r0", ("Line 0.", "Line 1.")),
        ("jsonl:r2", ("Line 2.", "Line 3.")),
        ("jsonl:r4", ("Line 4.",)),
    ]
    text = b"a1.\na2.\na3.\n\nb1.\nb2.\n \nc1.\nc2.\nc3.\nc4.\nc5.\n"
    docs = list(text_docs(text, 2))
    assert docs == [
        ("text:t.txt#0", ("a1.", "a2.")),
        ("text:t.txt#1", ("a3.",)),
        ("text:t.txt#2", ("b1.", "b2.")),
        ("text:t.txt#3", ("c1.", "c2.")),
        ("text:t.txt#4", ("c3.", "c4.")),
        ("text:t.txt#5", ("c5.",)),
    ]
    assert text_docs(text, 0) == [
        ("text:t.txt#0", ("a1.", "a2.", "a3.")),
        ("text:t.txt#1", ("b1.", "b2.")),
        ("text:t.txt#2", ("c1.", "c2.", "c3.", "c4.", "c5.")),
    ]


def text_docs(data: bytes, n: int) -> list:
    docs = text.read_text(io.BytesIO(data), "t.txt", Tally(), per_document=n)
    return [(d.id, d.paragraphs) for d in docs]


def test_files_whose_records_are_joined_are_read_whole(tmp_path, monkeypatch):
    """A span would not know where a document of joined records starts."""
    import pipeline.stages.read as read
    from pipeline.files.listing import InputSpec

    path = tmp_path / "big.txt"
    path.write_text("".join(f"Sentence {i} of the corpus.\n" for i in range(2000)))
    monkeypatch.setattr(read, "LINE_SPAN_BYTES", 4096)
    specs = [InputSpec("text", str(path))]
    assert len(read.plan_groups(specs, 1 << 30)[0]) > 1  # spans
    (whole,) = read.plan_groups(specs, 1 << 30, span_bytes=read.NO_SPANS)
    assert [item[3] for item in whole] == [None]


def test_records_per_document_is_refused_where_it_means_nothing(tmp_path):
    for argv, said in (
        (["--input", f"books:{SAMPLE}/books", "--records-per-document", "8"], "is read from text"),
        (["--input", f"{SAMPLE}/text", "--records-per-document", "1"], "joins nothing"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["build", *argv, "--out", str(tmp_path / "out"), "--workers", "1"])
        assert str(e.value.code).startswith("error: --records-per-document: records_per_document")
        assert said in str(e.value.code) and not (tmp_path / "out").exists()


def test_sentences_that_fill_a_row_alone_are_noted_as_such(tmp_path, capsys):
    """Random-next forced because each chunk is one sentence, the documents having many: the
    note names the sequence length, not documents of one sentence."""
    out, said = build(tmp_path, capsys, f"books:{SAMPLE}/books")  # 4 books, about 20 pieces
    assert forced_labels_note(ShardSet.open(out).manifest) is None  # a sentence at seq 128
    short = str(tmp_path / "short")
    argv = ["build", "--input", f"books:{SAMPLE}/books", "--out", short, "--workers", "1"]
    assert main([*argv, "--vocab", f"{out}/vocab.txt", "--max-seq-length", "8"]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert "had to take B from another document, A filling its chunk alone: the documents " in note
    assert "so with --max-seq-length 8 most chunks are one sentence" in note
    assert "bookcorpus" not in note


def test_documents_of_one_sentence_among_longer_ones_are_named_as_the_cause(sample_shards):
    """Two sentences a document on average, each short against the row: the one-sentence
    documents force the labels, and the note says so."""
    from dataclasses import replace

    manifest = ShardSet.open(sample_shards).manifest
    forced = [replace(s, random_next=s.rows, forced_random_next=s.rows) for s in manifest.shards]
    counts = {"total": {"documents_used": 100, "sentences": 300, "tokens": 300 * 20}}
    note = forced_labels_note(replace(manifest, shards=forced, counts=counts))
    assert "documents of one sentence each" in note
    counts["total"]["tokens"] = 300 * 70  # a sentence more than half a row of 128 pieces
    note = forced_labels_note(replace(manifest, shards=forced, counts=counts))
    assert "a sentence holds 70 pieces, so with --max-seq-length 128" in note


def test_the_samples_short_documents_get_no_note(sample_shards):
    manifest = ShardSet.open(sample_shards).manifest
    forced = sum(s.forced_random_next + s.forced_actual_next for s in manifest.shards)
    assert 0.2 * manifest.rows < forced < 0.5 * manifest.rows  # many, but a draw decides most
    assert forced_labels_note(manifest) is None


def test_labels_forced_the_way_they_were_asked_get_no_note(sample_shards):
    from dataclasses import replace

    manifest = ShardSet.open(sample_shards).manifest
    forced = [replace(s, random_next=s.rows, forced_random_next=s.rows) for s in manifest.shards]
    config = {**manifest.config, "random_next_prob": 1.0}
    assert forced_labels_note(replace(manifest, shards=forced, config=config)) is None
    assert "random-next, not about 50%" in forced_labels_note(replace(manifest, shards=forced))


def test_a_text_document_over_the_bound_is_dropped_keeping_the_later_ids(monkeypatch) -> None:
    monkeypatch.setattr(text, "MAX_DOCUMENT_CHARS", 20)
    data = b"short one.\nshort two.\n\nthis line is long enough.\nand more.\n\nlast doc.\n"
    tally = Tally()
    docs = [(d.id, d.paragraphs) for d in text.read_text(io.BytesIO(data), "a.txt", tally)]
    assert docs == [
        ("text:a.txt#0", ("short one.", "short two.")),
        ("text:a.txt#2", ("last doc.",)),
    ]
    assert tally.counts == {"documents_read": 1, "documents_dropped.text_document_too_long": 1}
    only = Tally()  # a file that is one such document is no empty file
    assert list(text.read_text(io.BytesIO(data[22:48]), "b.txt", only)) == []
    assert only.counts == {"documents_read": 1, "documents_dropped.text_document_too_long": 1}


def test_a_book_over_the_bound_is_dropped(monkeypatch) -> None:
    monkeypatch.setattr(books, "MAX_DOCUMENT_CHARS", 3 << 20)
    line = ("A sentence of a book that goes on. " * 20 + "\n").encode()
    big = line * ((4 << 20) // len(line))  # over the 1 MiB a book is read whole within
    tally = Tally()
    assert list(books.read_book(io.BytesIO(big), "corpus.txt", tally)) == []
    assert tally.counts == {"documents_read": 1, "documents_dropped.books_too_long": 1}
    kept = Tally()
    assert len(list(books.read_book(io.BytesIO(big[: 2 << 20]), "book.txt", kept))) == 1


@pytest.mark.parametrize("module", [text, books], ids=["text", "books"])
def test_a_file_without_document_breaks_is_read_in_bounded_memory(module, monkeypatch) -> None:
    """A file without a blank line, 8 times the bound (2 Mi characters here, 32 Mi in use): what
    is held stays near the bound (the text reader held it all, and a build held each byte 25
    times over: a 93 MB file peaked at 2.4 GB)."""
    monkeypatch.setattr(module, "MAX_DOCUMENT_CHARS", 2 << 20)
    line = b"One sentence of a corpus without any document breaks in it at all, on and on.\n"
    data = line * ((16 << 20) // len(line))
    reader = text.read_text if module is text else books.read_book
    tally = Tally()
    tracemalloc.start()
    try:
        assert list(reader(io.BytesIO(data), "books_large_p1.txt", tally)) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, peak  # the bound's characters as line strings, and a chunk read
    assert sum(n for k, n in tally.counts.items() if k.endswith("too_long")) == 1


def test_the_drop_is_said_in_the_builds_note_and_beside_its_no_instances(capsys) -> None:
    total = {"documents_read": 1, "documents_dropped.text_document_too_long": 1}
    note = too_long_note(total)
    assert note.startswith("note: documents of more than 32 Mi characters were dropped, never ")
    assert "(1 text_document_too_long)" in note and "bookcorpus" in note
    assert too_long_note({"documents_read": 5}) is None
    no_instances({"total": total})
    said = capsys.readouterr()
    assert note in said.out.splitlines()
    assert said.err.startswith("error: no instances were made")


@pytest.mark.parametrize(
    ("command", "written", "said"),
    [
        ("vocab", ("vocab.txt", "tokenizer.json"), "the vocab trainer, and no vocab was"),
        ("punkt", ("punkt.json",), "the Punkt trainer, and no parameter file was"),
    ],
)
def test_a_vocab_or_punkt_of_no_text_is_refused_writing_nothing(
    command, written, said, tmp_path, capsys
) -> None:
    """`bert-shards vocab` and `punkt` on input that leaves no text (here a blank file; the
    dump without document breaks likewise) wrote a vocab of the five special pieces (with a
    note blaming the corpus's size) and empty Punkt parameters."""
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n  \n")
    out = tmp_path / "out"
    argv = [command, "--input", f"books:{blank}", "--out", str(out), "--workers", "1"]
    assert main(argv) == 1
    lines = capsys.readouterr()
    assert lines.err.startswith(f"error: no text reached {said} written")
    assert "32 Mi characters" in lines.err and "wrote" not in lines.out
    assert not any(os.path.exists(out / name) for name in written)


def first_file_note(tmp_path, text: str, name: str = "corpus.txt") -> str | None:
    from pipeline.sources.head import check_head

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return check_head("text", str(path), name, lambda p: open(p, "rb"))


def test_prose_given_as_text_is_noted_before_the_build(tmp_path, capsys) -> None:
    """The default format is the reference's, a sentence per line: a folder of ordinary prose
    given without FORMAT=books became line fragments taken as sentences, without a word."""
    book = open(os.path.join(SAMPLE, "books", "a-field-guide-to-small-machines.txt")).read()
    note = first_file_note(tmp_path, book)
    assert note.startswith("note: corpus.txt reads as prose, not a sentence per line (")
    assert "lines end mid-sentence, the next going on" in note and "--format books" in note
    paragraphs = [" ".join(p.split()) for p in book.split("\n\n") if p.strip()]
    note = first_file_note(tmp_path, "\n\n".join(paragraphs) + "\n")  # a paragraph a line
    assert "lines hold two sentences or more" in note
    out = str(tmp_path / "out")
    argv = ["build", "--input", str(tmp_path / "corpus.txt"), "--out", out, "--workers", "1"]
    assert main([*argv, "--vocab-size", "500"]) == 0  # said, and built as asked
    assert capsys.readouterr().out.startswith("note: corpus.txt reads as prose")


def test_the_reference_layout_gets_no_note(tmp_path) -> None:
    sentences = sample_sentences()
    assert len(sentences) > 100
    assert first_file_note(tmp_path, "\n".join(sentences[:200]) + "\n") is None
    assert first_file_note(tmp_path, "Too few lines.\nto say.\n") is None
