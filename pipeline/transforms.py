"""The build's stages as composite PTransforms; each DoFn calls one plain function."""

from __future__ import annotations

import math
from collections import Counter

import apache_beam as beam

from pipeline.config import InstanceConfig, VocabConfig
from pipeline.counting import COUNTS, CountingDoFn
from pipeline.documents import Document
from pipeline.instances import (
    FORCED_ACTUAL,
    FORCED_RANDOM,
    TokenizedDoc,
    assemble_rows,
    mask_rows,
    plan_document,
    unit_tables,
)
from pipeline.keys import generator, scalar_generator, stable_hash
from pipeline.sentences import (
    params_to_json,
    sentence_tokenizer,
    split_paragraphs,
    train_parameters,
)
from pipeline.shards import rows_to_columns
from pipeline.tokenize import encode_documents, token_spec, train_vocab
from schemas.vocab import Vocab


class BatchDocuments(beam.PTransform):
    """Documents -> lists of documents: Beam's cost is per element, so the stages after reading
    work on lists (one tokenizer call per list). Batch composition never changes the output."""

    def expand(self, docs):
        return docs | "Batch" >> beam.BatchElements(min_batch_size=16, max_batch_size=512)


class SplitDocuments(CountingDoFn):
    """A list of documents -> a list of (id, source, sentences)."""

    def __init__(self, max_paragraph_chars: int, punkt_json: str | None = None):
        self.max_paragraph_chars = max_paragraph_chars
        self.punkt_json = punkt_json

    def setup(self):
        self.tokenizer = sentence_tokenizer(self.punkt_json)

    def process(self, docs: list[Document]):
        out = [s for s in map(self.split, docs) if s is not None]
        if out:
            yield out

    def split(self, doc: Document):
        paragraphs = [p for p in doc.paragraphs if len(p) <= self.max_paragraph_chars]
        self.count(doc.source, "paragraphs_dropped.too_long", len(doc.paragraphs) - len(paragraphs))
        sentences = paragraphs if doc.presplit else split_paragraphs(paragraphs, self.tokenizer)
        if not sentences:
            self.count(doc.source, "documents_dropped.no_sentences")
            return None
        self.count(doc.source, "sentences", len(sentences))
        return doc.id, doc.source, tuple(sentences)


class SplitSentences(beam.PTransform):
    """Lists of documents -> lists of (id, source, sentences); Punkt on prose, nothing on
    pre-split input."""

    def __init__(self, max_paragraph_chars: int, punkt_json: str | None = None):
        super().__init__()
        self.max_paragraph_chars = max_paragraph_chars
        self.punkt_json = punkt_json  # None: English parameters

    def expand(self, docs):
        split = beam.ParDo(SplitDocuments(self.max_paragraph_chars, self.punkt_json))
        out = docs | "Split" >> split.with_outputs(COUNTS, main="main")
        return out.main, out[COUNTS]


def sample_paragraphs(batch: list[Document], total: int, bound: int, seed: int):
    """Paragraphs kept with probability bound / total by a stable hash (see sample_sentences)."""
    limit = min(1.0, bound / max(total, 1)) * 2.0**64
    out = []
    for doc in batch:
        for i, p in enumerate(doc.paragraphs):
            key = stable_hash(seed, "punkt-sample", doc.id, i)
            if key < limit:
                out.append((key, p))
    return out


class TrainPunkt(beam.PTransform):
    """A deterministic sample of about `bound` paragraphs -> Punkt parameters as JSON, for
    languages other than English (`bert-shards punkt`, then `build --punkt FILE`)."""

    def __init__(self, bound: int, seed: int):
        super().__init__()
        self.bound = bound
        self.seed = seed

    def expand(self, batches):
        total = (
            batches
            | "CountParagraphs" >> beam.Map(lambda b: sum(len(d.paragraphs) for d in b))
            | "Total" >> beam.CombineGlobally(sum)
        )
        return (
            batches
            | "Sample"
            >> beam.Map(sample_paragraphs, beam.pvalue.AsSingleton(total), self.bound, self.seed)
            | "Gather" >> beam.CombineGlobally(concat)
            | "Train"
            >> beam.Map(
                lambda sample: params_to_json(train_parameters(p for _, p in sorted(sample)))
            )
        )


def sample_sentences(batch, total: int, cfg: VocabConfig) -> list[tuple[int, str]]:
    """Each sentence kept with probability sample_sentences / total, decided by a stable hash,
    so the sample is the same whatever the runner, and its size is about the bound."""
    limit = min(1.0, cfg.sample_sentences / max(total, 1)) * 2.0**64
    out = []
    for doc_id, _, sentences in batch:
        for i, s in enumerate(sentences):
            key = stable_hash(cfg.seed, "vocab-sample", doc_id, i)
            if key < limit:
                out.append((key, s))
    return out


def concat(lists) -> list:
    return [x for chunk in lists for x in chunk]


class TrainVocab(beam.PTransform):
    """A deterministic sample of about `sample_sentences` sentences -> a WordPiece vocab."""

    def __init__(self, cfg: VocabConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, batches):
        cfg = self.cfg
        total = (
            batches
            | "CountSentences" >> beam.Map(lambda b: sum(len(s) for _, _, s in b))
            | "Total" >> beam.CombineGlobally(sum)
        )
        return (
            batches
            | "Sample" >> beam.Map(sample_sentences, beam.pvalue.AsSingleton(total), cfg)
            | "Gather" >> beam.CombineGlobally(concat)
            | "Train"
            >> beam.Map(lambda sample: train_vocab([s for _, s in sorted(sample)], cfg)[0])
        )


class EncodeBatch(CountingDoFn):
    def __init__(self, lowercase: bool):
        self.lowercase = lowercase

    def process(self, batch, vocab: Vocab):
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
        if encoded:
            yield encoded


class TokenizeDocuments(beam.PTransform):
    """Lists of (id, source, sentences) -> lists of TokenizedDoc; a list is one tokenizer call."""

    def __init__(self, vocab, lowercase: bool):
        super().__init__()
        self.vocab = vocab
        self.lowercase = lowercase

    def expand(self, batches):
        encode = beam.ParDo(EncodeBatch(self.lowercase), beam.pvalue.AsSingleton(self.vocab))
        out = batches | "Encode" >> encode.with_outputs(COUNTS, main="main")
        return out.main, out[COUNTS]


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


def sum_pairs(pairs) -> tuple[int, int]:
    tokens = documents = 0
    for t, d in pairs:
        tokens, documents = tokens + t, documents + d
    return tokens, documents


def assign_buckets(batch: list[TokenizedDoc], buckets: int, cfg: InstanceConfig):
    """(bucket, [(pass, doc), ...]) for every dupe pass of every document of the batch."""
    keyed: dict[int, list] = {}
    for doc in batch:
        for p in range(cfg.dupe_factor):
            keyed.setdefault(stable_hash(cfg.seed, "bucket", p, doc.id) % buckets, []).append(
                (p, doc)
            )
    yield from keyed.items()


class BuildBucket(CountingDoFn):
    def __init__(self, cfg: InstanceConfig):
        self.cfg = cfg

    def process(self, element, vocab: Vocab):
        bucket, lists = element
        built = build_bucket(bucket, concat(lists), self.cfg, token_spec(vocab))
        if built is None:
            return
        columns, short, sources = built
        for source, n in sources.items():
            self.count(source, "instances", n)
        yield bucket, (columns, short)


def build_bucket(bucket: int, units, cfg: InstanceConfig, spec):
    """A bucket's (pass, document) units -> (ShardColumns, pair counts, instances per source).

    Units are sorted by (pass, document id); each is planned with its own generator
    (seed, pass, document id); the pairs are shuffled and the bucket masked with (seed, bucket).
    """
    units = sorted(units, key=lambda u: (u[0], u[1].id))
    docs = [doc for _, doc in units]
    offsets, ids = unit_tables(docs)
    can_pick_other = len(set(ids)) > 1
    pairs = []
    for i, (p, doc) in enumerate(units):
        rng = scalar_generator(cfg.seed, "instances", p, doc.id)
        pairs.extend(plan_document(offsets, ids, i, cfg, rng, can_pick_other))
    if not pairs:
        return None
    order = generator(cfg.seed, "shuffle", bucket).permutation(len(pairs))
    pairs = [pairs[k] for k in order]
    rows = mask_rows(
        assemble_rows(docs, pairs, spec), cfg, spec, generator(cfg.seed, "mask", bucket)
    )
    sources = Counter(docs[pair.a_unit].source for pair in pairs)
    return rows_to_columns(rows, pairs), pair_counts(pairs), sources


def pair_counts(pairs) -> dict[str, int]:
    """What the manifest records per shard beside the rows: short targets and forced labels."""
    forced = Counter(pair.forced for pair in pairs)
    return {
        "short_rows": sum(pair.short for pair in pairs),
        "forced_random_next": forced[FORCED_RANDOM],
        "forced_actual_next": forced[FORCED_ACTUAL],
    }


class CreateInstances(beam.PTransform):
    """Tokenized documents -> (bucket, (ShardColumns, pair counts)).

    Dupe passes are keyed by a seeded hash into buckets; each bucket's documents are sorted,
    then the reference algorithm runs per document pass."""

    def __init__(self, vocab, cfg: InstanceConfig, num_shards: int, bucket_tokens: int):
        super().__init__()
        self.vocab = vocab
        self.cfg = cfg
        self.num_shards = num_shards
        self.bucket_tokens = bucket_tokens

    def expand(self, docs):
        cfg, shards, per_bucket = self.cfg, self.num_shards, self.bucket_tokens
        buckets = (
            docs
            | "CountTokens" >> beam.Map(lambda batch: (sum(len(d.ids) for d in batch), len(batch)))
            | "Total" >> beam.CombineGlobally(sum_pairs)
            | "NumBuckets" >> beam.Map(num_buckets, cfg, shards, per_bucket)
        )
        out = (
            docs
            | "Key" >> beam.FlatMap(assign_buckets, beam.pvalue.AsSingleton(buckets), cfg)
            | "Group" >> beam.GroupByKey()
            | "Build"
            >> beam.ParDo(BuildBucket(cfg), beam.pvalue.AsSingleton(self.vocab)).with_outputs(
                COUNTS, main="main"
            )
        )
        return out.main, out[COUNTS]
