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
from pipeline.core.tokenize import encode_documents, vocab_of
from pipeline.files.chunks import Chunk, finished, read_sentences
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

    def process(self, chunk: Chunk, vocab_text: str):
        if not chunk.path:
            return
        target = next_path(self.tmp, "units", chunk)
        done = finished(target)
        if done is not None:
            yield done
            return
        sentences = read_sentences(chunk.path)
        docs = encode_counted(sentences, vocab_of(vocab_text), self.lowercase, self.count)
        units = unit_passes(docs, self.cfg)
        tokens = sum(len(d.ids) for d in docs)
        counts = self.take_counts()
        if not units:
            yield Chunk("", counts=counts)
            return
        yield write_units(target, units, len(docs), tokens, counts)


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

    def expand(self, chunks):
        encode = TokenizeChunk(self.tmp, self.lowercase, self.cfg)
        return (
            chunks
            | "Spread" >> beam.Reshuffle()
            | "Encode" >> beam.ParDo(encode, beam.pvalue.AsSingleton(self.vocab))
        )
