"""A corpus without document structure makes a next-sentence task with nothing to learn, and
the build says so when it ends: records that are sentences (as Hugging Face's `bookcorpus`
holds BooksCorpus) give random-next rows only, a text file without blank lines (one document)
actual-next rows only. The sample's short documents, whose labels a draw mostly decides, get
no note."""

from __future__ import annotations

import json
import os

from pipeline.shell.cli import main
from pipeline.shell.report import nsp_note
from schemas.reader import ShardSet
from tests.helpers import SAMPLE


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
    assert note == nsp_note(ShardSet.open(out).manifest)


def test_a_text_file_without_blank_lines_is_noted_as_one_document(tmp_path, capsys):
    flat = tmp_path / "books_large_p1.txt"
    flat.write_text("".join(s + "\n" for s in sample_sentences()))
    _, said = build(tmp_path, capsys, f"text:{flat}")
    (note,) = [line for line in said.splitlines() if line.startswith("note: ")]
    assert note.startswith("note: 0.0% of rows are random-next, not about 50%")
    assert "(the whole input is one document; the text format ends a document only at a " in note


def test_the_samples_short_documents_get_no_note(sample_shards):
    manifest = ShardSet.open(sample_shards).manifest
    forced = sum(s.forced_random_next + s.forced_actual_next for s in manifest.shards)
    assert 0.2 * manifest.rows < forced < 0.5 * manifest.rows  # many, but a draw decides most
    assert nsp_note(manifest) is None


def test_labels_forced_the_way_they_were_asked_get_no_note(sample_shards):
    from dataclasses import replace

    manifest = ShardSet.open(sample_shards).manifest
    forced = [replace(s, random_next=s.rows, forced_random_next=s.rows) for s in manifest.shards]
    config = {**manifest.config, "random_next_prob": 1.0}
    assert nsp_note(replace(manifest, shards=forced, config=config)) is None
    assert "random-next, not about 50%" in nsp_note(replace(manifest, shards=forced))
