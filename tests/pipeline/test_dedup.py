"""Exact de-duplication: which copy stays, counts by source and with the documents they were
dropped for, independence from order."""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipeline.files.chunks import Chunk, read_documents, write_documents
from pipeline.runners.run import make_pipeline, pipeline_options
from pipeline.sources.documents import Document
from pipeline.stages.counting import SumCounts
from pipeline.stages.dedup import (
    DedupConfig,
    Deduplicate,
    DeduplicateChunks,
    KeepSmallestId,
    document_key,
    later_copies,
    paragraph_refs,
    remove_paragraphs,
    write_batch,
)

LICENCE = "This ebook is licensed for your personal enjoyment only and may not be re-sold."
BLURB = "Jane Example lives by the sea with two cats and writes stories about lighthouses."


def doc(doc_id: str, *paragraphs: str, source: str = "books") -> Document:
    return Document(doc_id, source, paragraphs)


CORPUS = [
    doc("books:b/2.txt", LICENCE, "The second book begins here, with its own story.", BLURB),
    doc("books:a/1.txt", LICENCE, "The first book begins here, with another story.", BLURB),
    doc("books:c/copy-of-1.txt", LICENCE, "The first book begins here, with another story.", BLURB),
    doc("books:d/only-licence.txt", LICENCE),
    doc("wikipedia:7", "Short.", "Short.", "An article that shares nothing with the books."),
    doc("jsonl:x", "Short.", source="jsonl"),
]
EXPECTED = [
    doc("books:a/1.txt", LICENCE, "The first book begins here, with another story.", BLURB),
    doc("books:b/2.txt", "The second book begins here, with its own story."),
    doc("wikipedia:7", "Short.", "Short.", "An article that shares nothing with the books."),
    doc("jsonl:x", "Short.", source="jsonl"),
]
EXPECTED_COUNTS = {
    "books/documents_dropped.duplicate": 1,  # c/copy-of-1.txt
    "books/paragraphs_dropped.duplicate": 3,  # b/2's licence and blurb, d's licence
    "books/documents_dropped.duplicate_paragraphs": 1,  # d/only-licence.txt, left empty
}


CFG = DedupConfig(min_paragraph_chars=20)


def run(corpus: list[Document]) -> None:
    with make_pipeline(pipeline_options([], "DirectRunner", 1)) as p:
        kept = p | beam.Create(corpus) | Deduplicate(CFG)
        docs = kept | "Docs" >> beam.FlatMap(lambda dc: [dc[0]] if dc[0] is not None else [])
        assert_that(docs, equal_to(EXPECTED))
        totals = (kept | "CountsOf" >> beam.Map(lambda dc: dc[1]),) | SumCounts()
        assert_that(totals, equal_to([EXPECTED_COUNTS]), label="Counts")


def test_the_copy_with_the_smallest_id_stays_and_drops_are_counted_by_source() -> None:
    run(CORPUS)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_result_does_not_depend_on_input_order(seed: int) -> None:
    order = np.random.default_rng(seed).permutation(len(CORPUS))
    run([CORPUS[i] for i in order])


def test_each_document_carries_the_counts_of_what_was_dropped_for_it() -> None:
    with make_pipeline(pipeline_options([], "DirectRunner", 1)) as p:
        kept = p | beam.Create(CORPUS) | Deduplicate(CFG)
        by_id = kept | beam.Map(lambda dc: (dc[0].id if dc[0] else None, dc[1]))
        expected = [
            ("books:a/1.txt", {"books/documents_dropped.duplicate": 1}),
            ("books:b/2.txt", {"books/paragraphs_dropped.duplicate": 2}),
            (
                None,  # d/only-licence.txt
                {
                    "books/paragraphs_dropped.duplicate": 1,
                    "books/documents_dropped.duplicate_paragraphs": 1,
                },
            ),
            ("wikipedia:7", {}),
            ("jsonl:x", {}),
        ]
        assert_that(by_id, equal_to(expected))


def test_deduplicated_chunks_carry_the_counts_and_every_kept_document(tmp_path) -> None:
    chunk = write_documents(str(tmp_path / "documents" / "in.arrow"), CORPUS)
    with make_pipeline(pipeline_options([], "DirectRunner", 1)) as p:
        chunks = p | beam.Create([chunk, Chunk("")]) | DeduplicateChunks(CFG, str(tmp_path))
        docs = chunks | "Docs" >> beam.FlatMap(lambda c: read_documents(c.path) if c.path else [])
        assert_that(docs, equal_to(EXPECTED))
        totals = (chunks | "CountsOf" >> beam.Map(lambda c: c.counts),) | SumCounts()
        assert_that(totals, equal_to([EXPECTED_COUNTS]), label="Counts")


def test_a_batch_of_dropped_documents_is_a_record_of_counts_alone(tmp_path) -> None:
    batch = [(None, {"books/documents_dropped.duplicate_paragraphs": 1}), (None, {})]
    assert write_batch(batch, str(tmp_path)) == Chunk(
        "", counts={"books/documents_dropped.duplicate_paragraphs": 1}
    )
    assert not list(tmp_path.iterdir())


def test_short_paragraphs_are_never_treated_as_duplicates() -> None:
    refs = list(paragraph_refs(doc("x", "Short.", LICENCE), min_chars=20))
    assert [ref for _, ref in refs] == [("x", 1)]


def test_pure_helpers() -> None:
    assert later_copies([("b", 0), ("a", 3), ("a", 1)]) == [("a", 3), ("b", 0)]
    assert remove_paragraphs(doc("x", "p0", "p1", "p2"), {0, 2}) == doc("x", "p1")
    assert remove_paragraphs(doc("x", "p0"), {0}) is None
    assert document_key(doc("a", "p")) == document_key(doc("b", "p"))
    assert document_key(doc("a", "p", "q")) != document_key(doc("a", "pq"))
    presplit = Document("a", "text", ("p",), presplit=True)
    assert document_key(presplit) != document_key(doc("a", "p"))


def test_combiner_merges_in_any_grouping() -> None:
    fn, docs = KeepSmallestId(), [doc(f"books:{c}", "same") for c in "dbca"]
    one = fn.create_accumulator()
    for d in docs:
        one = fn.add_input(one, d)
    halves = [fn.create_accumulator(), fn.create_accumulator()]
    for i, d in enumerate(docs):
        halves[i % 2] = fn.add_input(halves[i % 2], d)
    merged = fn.merge_accumulators(halves)
    assert fn.extract_output(one) == fn.extract_output(merged) == (docs[3], {"books": 3})
    assert pickle.loads(pickle.dumps(fn)) is not None


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="min_paragraph_chars"):
        DedupConfig(min_paragraph_chars=0)
