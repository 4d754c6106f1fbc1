"""The build's stages as composite PTransforms; each DoFn calls one plain function.

Stages pass `Chunk` records (`pipeline.spill`): every DoFn reads its chunk file, writes the
next one under the temporary area `tmp`, and yields a small record with its counts.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.buckets import RepeatedIdError, build_bucket, input_files_holding, unit_passes
from pipeline.config import InstanceConfig, VocabConfig
from pipeline.counting import SEP
from pipeline.instances import (
    TokenizedDoc,
)
from pipeline.keys import stable_hash
from pipeline.progress import write_marker
from pipeline.sentences import (
    params_to_json,
    sentence_tokenizer,
    split_paragraphs,
    train_parameters,
)
from pipeline.shards import finished_bucket, write_bucket_shard
from pipeline.sources.documents import Document, Tally
from pipeline.sources.wikipedia.reader import rendered
from pipeline.spill import (
    Chunk,
    finished,
    hash_range,
    read_bucket_units,
    read_documents,
    read_sentences,
    write_sentences,
    write_units,
)
from pipeline.stage import Stage, Step
from pipeline.tokenize import encode_documents, token_spec, train_vocab, vocab_of
from schemas.vocab import Vocab


def next_path(tmp: str, kind: str, chunk: Chunk) -> str:
    """The file of the next kind made from `chunk`: the same name in the kind's folder."""
    return FileSystems.join(tmp, kind, chunk.path.rsplit("/", 1)[-1])


class ChunkCountingDoFn(Step):
    """Counts per (source, name) for one chunk; `take_counts` hands them to the chunk
    (`pipeline.counting.CountingDoFn` instead emits them per bundle on a side output)."""

    def count(self, source: str, name: str, n: int = 1) -> None:
        if n:
            self.counts[f"{source}{SEP}{name}"] += n

    def take_counts(self) -> dict:
        counts, self.counts = dict(self.counts), Counter()
        return counts

    def start_bundle(self):
        self.counts: Counter = Counter()


class SplitChunk(ChunkCountingDoFn):
    """A document chunk -> a sentence chunk of (id, source, sentences)."""

    def __init__(self, tmp: str, max_paragraph_chars: int, punkt_json: str | None = None):
        self.tmp = tmp
        self.max_paragraph_chars = max_paragraph_chars
        self.punkt_json = punkt_json

    def setup(self):
        super().setup()
        self.tokenizer = None  # Punkt, made for the first document that is not split yet

    def process(self, chunk: Chunk):
        if not chunk.path:
            return
        target = next_path(self.tmp, "sentences", chunk)
        done = finished(target)  # an earlier attempt's, or an interrupted build's
        if done is not None:
            yield done
            return
        tally = Tally()
        docs = rendered(read_documents(chunk.path), tally)
        out = [s for s in map(self.split, docs) if s is not None]
        for name, n in tally.counts.items():
            self.count("wikipedia", name, n)
        counts = self.take_counts()
        yield write_sentences(target, out, counts) if out else Chunk("", counts=counts)

    def split(self, doc: Document):
        paragraphs = [p for p in doc.paragraphs if len(p) <= self.max_paragraph_chars]
        self.count(doc.source, "paragraphs_dropped.too_long", len(doc.paragraphs) - len(paragraphs))
        if doc.presplit:
            sentences = paragraphs
        else:
            self.tokenizer = self.tokenizer or sentence_tokenizer(self.punkt_json)
            sentences = split_paragraphs(paragraphs, self.tokenizer)
        if not sentences:
            self.count(doc.source, "documents_dropped.no_sentences")
            return None
        self.count(doc.source, "sentences", len(sentences))
        return doc.id, doc.source, tuple(sentences)


@dataclass(eq=False)
class SplitSentences(Stage):
    """Document chunks -> sentence chunks; Punkt on prose, nothing on pre-split input."""

    tmp: str
    max_paragraph_chars: int
    punkt_json: str | None = None  # None: English parameters

    def expand(self, chunks):
        split = SplitChunk(self.tmp, self.max_paragraph_chars, self.punkt_json)
        return chunks | "Spread" >> beam.Reshuffle() | "Split" >> beam.ParDo(split)


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


ENCODE_BATCH_SENTENCES = 20_000  # one tokenizer call; its encodings are held until converted


class TokenizeChunk(ChunkCountingDoFn):
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
        docs = self.encode(read_sentences(chunk.path), vocab_of(vocab_text))
        units = unit_passes(docs, self.cfg)
        tokens = sum(len(d.ids) for d in docs)
        counts = self.take_counts()
        if not units:
            yield Chunk("", counts=counts)
            return
        yield write_units(target, units, len(docs), tokens, counts)

    def encode(self, sentences, vocab: Vocab) -> list[TokenizedDoc]:
        out: list[TokenizedDoc] = []
        for batch in sentence_batches(sentences, ENCODE_BATCH_SENTENCES):
            controls: Counter = Counter()
            encoded = encode_documents(batch, vocab, self.lowercase, controls)
            for (source, name), n in controls.items():
                self.count(source, name, n)
            kept = {d.id for d in encoded}
            for doc_id, source, _ in batch:
                if doc_id not in kept:
                    self.count(source, "documents_dropped.no_tokens")
            for doc in encoded:
                self.count(doc.source, "documents_used")
                self.count(doc.source, "tokens", len(doc.ids))
            out.extend(encoded)
        return out


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
    """Sentence chunks -> units chunks, each sorted by bucket hash (see `pipeline.spill`)."""

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


MIN_UNITS_PER_BUCKET = 20  # document passes: fewer, and random-next pairs have no other document


def num_buckets(totals: tuple[int, int], cfg: InstanceConfig, num_shards: int, bucket_tokens: int):
    """Buckets from (tokens, documents): `num_shards` when given, else one per `bucket_tokens`;
    either way capped so that a bucket holds about MIN_UNITS_PER_BUCKET document passes (a
    --num-shards far above what the corpus fills would leave buckets of one document, whose
    pairs can only be actual-next). The report says when the cap applied."""
    tokens, documents = totals
    wanted = num_shards or math.ceil(tokens * cfg.dupe_factor / bucket_tokens)
    cap = max(1, documents * cfg.dupe_factor // MIN_UNITS_PER_BUCKET)
    return max(1, min(wanted, cap))


def note_buckets(buckets: int, tmp: str) -> int:
    """The bucket count, also left for the progress line."""
    write_marker(FileSystems.join(tmp, "buckets.json"), {"buckets": buckets})
    return buckets


def sum_pairs(pairs) -> tuple[int, int]:
    tokens = documents = 0
    for t, d in pairs:
        tokens, documents = tokens + t, documents + d
    return tokens, documents


class BuildBucket(Step):
    """A bucket number -> its shard in the build area, and (bucket, entry, counts).

    The bucket's units are the rows of every units chunk whose bucket hash falls in its range.
    """

    def __init__(self, tmp: str, out: str, cfg: InstanceConfig, build_config: dict):
        self.tmp = tmp
        self.out = out
        self.cfg = cfg
        self.build_config = build_config

    def process(self, bucket: int, buckets: int, chunks: list[Chunk], vocab_text: str):
        vocab = vocab_of(vocab_text)
        done = finished_bucket(self.out, bucket)
        if done is not None:
            yield done
            return
        lo, hi = hash_range(bucket, buckets)
        chunks = [c for c in chunks if c.path]
        units = read_bucket_units(chunks, lo, hi)
        try:
            built = build_bucket(bucket, units, self.cfg, token_spec(vocab))
        except RepeatedIdError as e:
            where = input_files_holding(e.id, chunks, lo, hi, self.tmp)
            raise RepeatedIdError.of(e.id, f" ({where})") from None
        if built is None:
            return
        columns, short, sources = built
        counts = {f"{source}{SEP}instances": n for source, n in sources.items()}
        entry = write_bucket_shard(
            self.out, bucket, columns, short, vocab, self.build_config, counts
        )
        yield bucket, entry, counts


@dataclass(eq=False)
class CreateInstances(Stage):
    """Units chunks -> one shard per bucket, as (bucket, entry, counts).

    The number of buckets comes from the corpus totals; bucket b holds the dupe passes whose
    seeded hash h has (h * buckets) >> 64 == b. Each bucket's units are sorted, then the
    reference algorithm runs per document pass."""

    tmp: str
    out: str
    vocab: beam.PCollection  # of the vocab's text
    cfg: InstanceConfig
    build_config: dict
    num_shards: int
    bucket_tokens: int

    def expand(self, chunks):
        cfg, shards, per_bucket = self.cfg, self.num_shards, self.bucket_tokens
        buckets = (
            chunks
            | "Sizes" >> beam.Map(lambda c: (c.tokens, c.items))
            | "Total" >> beam.CombineGlobally(sum_pairs)
            | "NumBuckets" >> beam.Map(num_buckets, cfg, shards, per_bucket)
            | "NoteBuckets" >> beam.Map(note_buckets, self.tmp)
        )
        build = BuildBucket(self.tmp, self.out, cfg, self.build_config)
        return (
            buckets
            | "Each" >> beam.FlatMap(lambda n: range(n))
            | "Spread" >> beam.Reshuffle()
            | "Build"
            >> beam.ParDo(
                build,
                beam.pvalue.AsSingleton(buckets),
                beam.pvalue.AsList(chunks),
                beam.pvalue.AsSingleton(self.vocab),
            )
        )
