"""Each PTransform on a TestPipeline with exact contents, and pickling of what Beam ships."""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.config import InstanceConfig, VocabConfig
from pipeline.counting import merge_counts
from pipeline.documents import Document
from pipeline.instances import TokenizedDoc
from pipeline.keys import stable_hash
from pipeline.sources import InputSpec, ReadDocuments
from pipeline.tokenize import token_spec
from pipeline.transforms import (
    BuildBucket,
    CreateInstances,
    EncodeBatch,
    SplitDocuments,
    SplitSentences,
    TokenizeDocuments,
    TrainVocab,
    build_bucket,
)
from schemas.vocab import Vocab

VOCAB = Vocab(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", ".", "dog", "ran", "##s")
)


def pipeline() -> BeamTestPipeline:
    return BeamTestPipeline(runner="FnApiRunner", options=PipelineOptions([]))


def test_read_documents_exact(tmp_path):
    (tmp_path / "a.txt").write_text("One.\nTwo.\n\nThree.\n", encoding="utf-8")
    with pipeline() as p:
        docs, counts = p | ReadDocuments([InputSpec("text", str(tmp_path / "*.txt"))])
        assert_that(
            docs | beam.Map(lambda d: (d.id, d.paragraphs)),
            equal_to([("text:a.txt#0", ("One.", "Two.")), ("text:a.txt#1", ("Three.",))]),
            label="docs",
        )
        total = (
            counts
            | beam.CombineGlobally(merge_counts)
            | beam.Map(lambda d: d["text/documents_read"])
        )
        assert_that(total, equal_to([2]), label="counts")


def test_split_sentences_exact():
    docs = [
        [
            Document("b:1", "books", ("Dr. Smith left. He came back!",)),
            Document("t:1", "text", ("Kept as is. Even this.",), presplit=True),
            Document("b:2", "books", ("   ",)),
        ],
    ]
    with pipeline() as p:
        out, _ = p | beam.Create(docs) | SplitSentences(max_paragraph_chars=1000)
        assert_that(
            out,
            equal_to(
                [
                    [
                        ("b:1", "books", ("Dr. Smith left.", "He came back!")),
                        ("t:1", "text", ("Kept as is. Even this.",)),
                    ]
                ]
            ),
        )


def test_tokenize_documents_exact():
    batch = [[("d1", "text", ("The cats sat.", "")), ("d2", "text", ("\u200b",))]]
    with pipeline() as p:
        vocab = p | "V" >> beam.Create([VOCAB])
        out, _ = p | beam.Create(batch) | TokenizeDocuments(vocab, lowercase=True)
        got = out | beam.Map(lambda b: [(d.id, d.ids.tolist(), d.offsets.tolist()) for d in b])
        assert_that(got, equal_to([[("d1", [5, 6, 11, 7, 8], [0, 5])]]))


def test_train_vocab_is_deterministic_and_specials_first():
    batches = [[("d", "t", ("the cat sat on the mat.", "the dog sat."))]] * 3
    cfg = VocabConfig(vocab_size=60, min_frequency=1)
    with pipeline() as p:
        vocab = p | beam.Create(batches) | TrainVocab(cfg)
        assert_that(
            vocab | beam.Map(lambda v: v.pieces[:5]),
            equal_to([("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]),
        )


def tokenized(doc_id: str, n_sentences: int) -> TokenizedDoc:
    ids = np.tile(np.array([5, 6, 7, 8], dtype=np.uint16), n_sentences)
    return TokenizedDoc(doc_id, ids, np.arange(0, 4 * n_sentences + 1, 4), "text")


def test_create_instances_equals_the_plain_function_whatever_the_batching():
    docs = [tokenized(f"d{i}", 3 + i % 6) for i in range(20)]  # 40 passes: 2 buckets
    cfg = InstanceConfig(max_seq_length=16, dupe_factor=2)
    expected = []
    for b in range(2):
        units = [(p, d) for d in docs for p in range(2) if assign(d, p, cfg) == b]
        columns, short, _ = build_bucket(b, units, cfg, token_spec(VOCAB))
        expected.append((b, columns.input_ids.tobytes(), columns.masked_positions.tobytes(), short))
    for batches in ([docs[:3], docs[3:]], [docs[::-1]]):
        with pipeline() as p:
            vocab = p | "V" >> beam.Create([VOCAB])
            out, _ = p | beam.Create(batches) | CreateInstances(vocab, cfg, 2, 1)
            got = out | beam.Map(
                lambda kv: (
                    kv[0],
                    kv[1][0].input_ids.tobytes(),
                    kv[1][0].masked_positions.tobytes(),
                    kv[1][1],
                )
            )
            assert_that(got, equal_to(expected))


def assign(doc, p, cfg):
    return stable_hash(cfg.seed, "bucket", p, doc.id) % 2


def test_dofns_pickle_round_trip():
    for obj in (
        SplitDocuments(10),
        EncodeBatch(True),
        BuildBucket(InstanceConfig()),
        VOCAB,
        tokenized("x", 2),
        InputSpec("books", "/x"),
    ):
        assert pickle.loads(pickle.dumps(obj)).__class__ is obj.__class__
