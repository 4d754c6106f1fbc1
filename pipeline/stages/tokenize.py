"""Stage 4, tokenize: sentence chunks -> units chunks, every dupe pass of every document,
sorted by bucket hash (`pipeline.files.chunks`); encoding is `pipeline.core.tokenize`'s.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import apache_beam as beam

from pipeline.core.buckets import unit_passes
from pipeline.core.config import InstanceConfig
from pipeline.core.instances import TokenizedDoc
from pipeline.core.smoothing import smoothed_passes
from pipeline.core.tokenize import encode_documents, vocab_of
from pipeline.files.chunks import Chunk, finished, read_sentence_groups
from pipeline.files.units import write_units
from pipeline.stages.base import Stage, next_path
from pipeline.stages.counting import CountingStep
from schemas.vocab import Vocab

ENCODE_BATCH_SENTENCES = 20_000  # one tokenizer call; its encodings are held until converted


def encode_counted(sentences, vocab: Vocab, lowercase: bool, count) -> list[TokenizedDoc]:
    """(id, source, sentences) documents -> the tokenized ones (a document with no token is
    dropped), `ENCODE_BATCH_SENTENCES` sentences per tokenizer call; `count(source, name, n)`
    takes the counts."""
    out: list[TokenizedDoc] = []
    for batch in sentence_batches(sentences, ENCODE_BATCH_SENTENCES):
        controls: Counter = Counter()
        encoded = encode_documents(batch, vocab, lowercase, controls)
        for (source, name), n in controls.items():
            count(source, name, n)
        kept = {d.id for d in encoded}
        for doc_id, source, _ in batch:
            if doc_id not in kept:
                count(source, "documents_dropped.no_tokens")
        for doc in encoded:
            count(doc.source, "documents_used")
            count(doc.source, "tokens", len(doc.ids))
        out.extend(encoded)
    return out


class TokenizeChunk(CountingStep):
    """A sentence chunk -> a units chunk: every dupe pass of every tokenized document."""

    def __init__(self, tmp: str, lowercase: bool, cfg: InstanceConfig):
        self.tmp = tmp
        self.lowercase = lowercase
        self.cfg = cfg

    def process(self, chunk: Chunk, vocab_text: str, rates: tuple | None = None):
        """`rates`: (characters, rate) per input group when the inputs are weighted."""
        if not chunk.path:
            return
        target = next_path(self.tmp, "units", chunk)
        done = finished(target)
        if done is not None:
            yield done
            return
        sentences, groups = read_sentence_groups(chunk.path)
        docs = encode_counted(sentences, vocab_of(vocab_text), self.lowercase, self.count)
        passes = None
        if rates is not None:
            group_of = {doc[0]: group for doc, group in zip(sentences, groups, strict=True)}
            passes = self.smoothed(group_of, rates[1])
        units = unit_passes(docs, self.cfg, passes)
        tokens = sum(len(u[2].ids) for u in units)
        counts = self.take_counts()
        if not units:
            yield Chunk("", counts=counts)
            return
        yield write_units(target, units, len(units), tokens, counts)

    def smoothed(self, group_of: dict[str, str], rates: dict[str, float]):
        """A document's passes at its group's rate, counted per source as `passes`."""
        cfg = self.cfg

        def passes(doc) -> int:
            n = smoothed_passes(doc.id, rates[group_of[doc.id]], cfg.dupe_factor, cfg.seed)
            self.count(doc.source, "passes", n)
            return n

        return passes


def sentence_batches(docs, limit: int):
    """Documents in runs of about `limit` sentences (a document is never cut)."""
    batch, size = [], 0
    for doc in docs:
        batch.append(doc)
        size += len(doc[2])
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


@dataclass(eq=False)
class TokenizeDocuments(Stage):
    """Sentence chunks -> units chunks, each sorted by bucket hash (see `pipeline.files.chunks`)."""

    tmp: str
    vocab: beam.PCollection  # of the vocab's text
    lowercase: bool
    cfg: InstanceConfig
    rates: beam.PCollection | None = None  # of (characters, rate) per group, when weighted

    def expand(self, chunks):
        encode = TokenizeChunk(self.tmp, self.lowercase, self.cfg)
        sides = [beam.pvalue.AsSingleton(c) for c in (self.vocab, self.rates) if c is not None]
        return chunks | "Spread" >> beam.Reshuffle() | "Encode" >> beam.ParDo(encode, *sides)
