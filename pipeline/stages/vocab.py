"""Stage 3, vocab (when none is given): a WordPiece vocab trained on a seeded-hash sample of the
sentences, and the same sampling for `bert-shards punkt`'s parameters.

Only the sample is ever gathered, in key order, so the vocab is the same on every runner and
chunking (`pipeline.core.tokenize.train_vocab` trains it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

import apache_beam as beam

from pipeline.core.config import VocabConfig
from pipeline.core.keys import stable_hash
from pipeline.core.sentences import (
    params_to_json,
    train_parameters,
)
from pipeline.core.tokenize import train_vocab, train_vocab_cut
from pipeline.files.chunks import Chunk, read_documents, read_sentence_groups
from pipeline.sources.documents import Tally
from pipeline.sources.wikipedia.reader import rendered
from pipeline.stages.base import Stage, has_file
from schemas.vocab import SPECIAL_TOKENS, Vocab


def hash_sample(
    docs, total: int, bound: int, seed: int, label: str, rates=None
) -> list[tuple[int, str]]:
    """(key, text) for each text of each (document id, texts) kept with probability
    bound / total, decided by a stable hash of (seed, label, document id, position): the sample
    is the same whatever the runner or the chunking, and its size is about the bound. `rates`:
    each document's sampling rate beside the others' (its input group's), which scales that
    probability (at most 1)."""
    base = bound / max(total, 1)
    limit = min(1.0, base) * 2.0**64
    out = []
    for k, (doc_id, texts) in enumerate(docs):
        if rates is not None:
            limit = min(1.0, base * rates[k]) * 2.0**64
        for i, text in enumerate(texts):
            key = stable_hash(seed, label, doc_id, i)
            if key < limit:
                out.append((key, text))
    return out


def sample_paragraphs(chunk: Chunk, total: int, bound: int, seed: int):
    docs = ((d.id, d.paragraphs) for d in rendered(read_documents(chunk.path), Tally()))
    return hash_sample(docs, total, bound, seed, "punkt-sample")


def sample_sentences(
    chunk: Chunk, total: int, weighted: tuple | None = None, *, cfg: VocabConfig
) -> list[tuple[int, str]]:
    """The chunk's part of the vocab's sample; `weighted`: (characters, rate) per input group,
    when the inputs are weighted (`--language-smoothing`)."""
    sentences, groups = read_sentence_groups(chunk.path)
    docs = [(doc_id, texts) for doc_id, _, texts in sentences]
    rates = [weighted[1][g] for g in groups] if weighted is not None else None
    return hash_sample(docs, total, cfg.sample_sentences, cfg.seed, "vocab-sample", rates)


@dataclass(eq=False)
class TotalParts(Stage):
    """Paragraphs (or sentences) over all chunks with a file: the sampling rate's denominator."""

    def expand(self, chunks):
        return (
            chunks
            | "WithFile" >> beam.Filter(has_file)
            | "Parts" >> beam.Map(lambda c: c.parts)
            | "Total" >> beam.CombineGlobally(sum)
        )


def concat(lists) -> list:
    return [x for chunk in lists for x in chunk]


def train_in_key_order(sample: list[tuple[int, str]], train):
    return train([text for _, text in sorted(sample)])


@dataclass(eq=False)
class TrainOnSample(Stage):
    """Chunks -> `train(texts)` on a deterministic sample: `sample(chunk, total)` draws from
    each chunk file, and only the sample is ever gathered, in key order. A subclass names the
    two (`sampler`, `trainer`: plain functions, which Beam ships to the workers)."""

    def sampler(self) -> Callable[[Chunk, int], list[tuple[int, str]]]:
        raise NotImplementedError

    def trainer(self) -> Callable[[list[str]], object]:
        raise NotImplementedError

    def weights(self) -> list:
        """The sampler's side inputs after the total: none here."""
        return []

    def expand(self, chunks):
        total = chunks | "Count" >> TotalParts()
        sides = [beam.pvalue.AsSingleton(total), *self.weights()]
        return (
            chunks
            | "WithFile" >> beam.Filter(has_file)
            | "Sample" >> beam.Map(self.sampler(), *sides)
            | "Gather" >> beam.CombineGlobally(concat)
            | "Train" >> beam.Map(train_in_key_order, self.trainer())
        )


NO_TEXT = "no-text"  # a command's marker in its temporary area: its trainer saw no text


def learnt_nothing(result) -> bool:
    """Whether a trainer saw no text: a vocab of the special pieces alone, or Punkt parameters
    (JSON) without a word's context."""
    if isinstance(result, str):
        return not json.loads(result)["ortho_context"]
    return set(result.pieces) <= set(SPECIAL_TOKENS)


def trained_punkt(texts: list[str]) -> str:
    return params_to_json(train_parameters(texts))


@dataclass(eq=False)
class TrainPunkt(TrainOnSample):
    """Document chunks -> Punkt parameters as JSON from about `bound` paragraphs, for languages
    other than English (`bert-shards punkt`, then `build --punkt FILE`)."""

    bound: int
    seed: int

    def sampler(self):
        return functools.partial(sample_paragraphs, bound=self.bound, seed=self.seed)

    def trainer(self):
        return trained_punkt


def trained_vocab(texts: list[str], cfg: VocabConfig) -> Vocab:
    return train_vocab(texts, cfg)[0]


def trained_vocab_cut(texts: list[str], cfg: VocabConfig) -> tuple[Vocab, tuple]:
    """The vocab, and what its alphabet left out of the sample (`alphabet_cut`)."""
    vocab, _, cut = train_vocab_cut(texts, cfg)
    return vocab, cut


@dataclass(eq=False)
class TrainVocab(TrainOnSample):
    """Sentence chunks -> a WordPiece vocab trained on about `sample_sentences` sentences."""

    cfg: VocabConfig
    rates: beam.PCollection | None = None  # of (characters, rate) per input group, when weighted

    def sampler(self):
        return functools.partial(sample_sentences, cfg=self.cfg)

    def weights(self) -> list:
        return [] if self.rates is None else [beam.pvalue.AsSingleton(self.rates)]

    def trainer(self):
        return functools.partial(trained_vocab, cfg=self.cfg)


@dataclass(eq=False)
class TrainVocabCut(TrainVocab):
    """`TrainVocab` for the `vocab` command: (the vocab, its alphabet's cut), which the command
    says in a note when words of the sample will be `[UNK]`."""

    def trainer(self):
        return functools.partial(trained_vocab_cut, cfg=self.cfg)
