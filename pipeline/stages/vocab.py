"""Stage 3, vocab (when none is given): a WordPiece vocab trained on a seeded-hash sample of the
sentences, and the same sampling for `bert-shards punkt`'s parameters.

Only the sample is ever gathered, in key order, so the vocab is the same on every runner and
chunking (`pipeline.core.tokenize.train_vocab` trains it).
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.core.config import VocabConfig
from pipeline.core.keys import stable_hash
from pipeline.core.sentences import (
    params_to_json,
    train_parameters,
)
from pipeline.core.tokenize import train_vocab
from pipeline.files.chunks import (
    Chunk,
    read_documents,
    read_sentences,
)
from pipeline.sources.documents import Tally
from pipeline.sources.wikipedia.reader import rendered


def hash_sample(docs, total: int, bound: int, seed: int, label: str) -> list[tuple[int, str]]:
    """(key, text) for each text of each (document id, texts) kept with probability
    bound / total, decided by a stable hash of (seed, label, document id, position): the sample
    is the same whatever the runner or the chunking, and its size is about the bound."""
    limit = min(1.0, bound / max(total, 1)) * 2.0**64
    out = []
    for doc_id, texts in docs:
        for i, text in enumerate(texts):
            key = stable_hash(seed, label, doc_id, i)
            if key < limit:
                out.append((key, text))
    return out


def sample_paragraphs(chunk: Chunk, total: int, bound: int, seed: int):
    docs = ((d.id, d.paragraphs) for d in rendered(read_documents(chunk.path), Tally()))
    return hash_sample(docs, total, bound, seed, "punkt-sample")


def sample_sentences(chunk: Chunk, total: int, cfg: VocabConfig) -> list[tuple[int, str]]:
    docs = ((doc_id, sentences) for doc_id, _, sentences in read_sentences(chunk.path))
    return hash_sample(docs, total, cfg.sample_sentences, cfg.seed, "vocab-sample")


@beam.ptransform_fn
def TotalParts(chunks):  # noqa: N802 (a PTransform, named as one)
    """Paragraphs (or sentences) over all chunks with a file: the sampling rate's denominator."""
    return (
        chunks
        | "WithFile" >> beam.Filter(lambda c: bool(c.path))
        | "Parts" >> beam.Map(lambda c: c.parts)
        | "Total" >> beam.CombineGlobally(sum)
    )


def concat(lists) -> list:
    return [x for chunk in lists for x in chunk]


class TrainOnSample(beam.PTransform):
    """Chunks -> `train(texts)` on a deterministic sample: `sample(chunk, total)` draws from
    each chunk file, and only the sample is ever gathered, in key order."""

    def __init__(self, sample, train):
        super().__init__()
        self.sample = sample
        self.train = train

    def expand(self, chunks):
        total = chunks | "Count" >> TotalParts()
        train = self.train
        return (
            chunks
            | "WithFile" >> beam.Filter(lambda c: bool(c.path))
            | "Sample" >> beam.Map(self.sample, beam.pvalue.AsSingleton(total))
            | "Gather" >> beam.CombineGlobally(concat)
            | "Train" >> beam.Map(lambda sample: train([t for _, t in sorted(sample)]))
        )


class TrainPunkt(TrainOnSample):
    """Document chunks -> Punkt parameters as JSON from about `bound` paragraphs, for languages
    other than English (`bert-shards punkt`, then `build --punkt FILE`)."""

    def __init__(self, bound: int, seed: int):
        super().__init__(
            lambda chunk, total: sample_paragraphs(chunk, total, bound, seed),
            lambda texts: params_to_json(train_parameters(texts)),
        )


class TrainVocab(TrainOnSample):
    """Sentence chunks -> a WordPiece vocab trained on about `sample_sentences` sentences."""

    def __init__(self, cfg: VocabConfig):
        super().__init__(
            lambda chunk, total: sample_sentences(chunk, total, cfg),
            lambda texts: train_vocab(texts, cfg)[0],
        )
