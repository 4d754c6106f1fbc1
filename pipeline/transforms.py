"""The build's stages as composite PTransforms; each DoFn calls one plain function.

Stages pass `Chunk` records (`pipeline.spill`): every DoFn reads its chunk file, writes the
next one under the temporary area `tmp`, and yields a small record with its counts.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipeline.config import InstanceConfig, VocabConfig
from pipeline.counting import SEP
from pipeline.instances import (
    A_UNIT,
    FORCED,
    FORCED_ACTUAL,
    FORCED_RANDOM,
    RANDOM_NEXT,
    SHORT,
    TokenizedDoc,
    assemble_rows,
    mask_rows,
    pair_array,
    plan_document,
    unit_tables,
)
from pipeline.keys import generator, scalar_generator, stable_hash
from pipeline.progress import read_marker, write_marker
from pipeline.sentences import (
    params_to_json,
    sentence_tokenizer,
    split_paragraphs,
    train_parameters,
)
from pipeline.shards import finished_bucket, rows_to_columns, write_bucket_shard
from pipeline.sources.documents import BadInputError, Document, Tally
from pipeline.sources.wikipedia.reader import rendered
from pipeline.spill import (
    Chunk,
    finished,
    hash_range,
    read_documents,
    read_sentences,
    read_units,
    write_sentences,
    write_units,
)
from pipeline.tokenize import encode_documents, token_spec, train_vocab, vocab_of
from schemas.vocab import Vocab


def next_path(tmp: str, kind: str, chunk: Chunk) -> str:
    """The file of the next kind made from `chunk`: the same name in the kind's folder."""
    return FileSystems.join(tmp, kind, chunk.path.rsplit("/", 1)[-1])


class CountingDoFn(beam.DoFn):
    """Counts per (source, name) for one chunk; `take_counts` hands them to the chunk."""

    def count(self, source: str, name: str, n: int = 1) -> None:
        if n:
            self.counts[f"{source}{SEP}{name}"] += n

    def take_counts(self) -> dict:
        counts, self.counts = dict(self.counts), Counter()
        return counts

    def start_bundle(self):
        self.counts: Counter = Counter()


class SplitChunk(CountingDoFn):
    """A document chunk -> a sentence chunk of (id, source, sentences)."""

    def __init__(self, tmp: str, max_paragraph_chars: int, punkt_json: str | None = None):
        self.tmp = tmp
        self.max_paragraph_chars = max_paragraph_chars
        self.punkt_json = punkt_json

    def setup(self):
        self.tokenizer = sentence_tokenizer(self.punkt_json)

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
        sentences = paragraphs if doc.presplit else split_paragraphs(paragraphs, self.tokenizer)
        if not sentences:
            self.count(doc.source, "documents_dropped.no_sentences")
            return None
        self.count(doc.source, "sentences", len(sentences))
        return doc.id, doc.source, tuple(sentences)


class SplitSentences(beam.PTransform):
    """Document chunks -> sentence chunks; Punkt on prose, nothing on pre-split input."""

    def __init__(self, tmp: str, max_paragraph_chars: int, punkt_json: str | None = None):
        super().__init__()
        self.tmp = tmp
        self.max_paragraph_chars = max_paragraph_chars
        self.punkt_json = punkt_json  # None: English parameters

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


class TokenizeChunk(CountingDoFn):
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
        units = [
            (stable_hash(self.cfg.seed, "bucket", p, doc.id), p, doc)
            for doc in docs
            for p in range(self.cfg.dupe_factor)
        ]
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


class TokenizeDocuments(beam.PTransform):
    """Sentence chunks -> units chunks, each sorted by bucket hash (see `pipeline.spill`)."""

    def __init__(self, tmp: str, vocab, lowercase: bool, cfg: InstanceConfig):
        super().__init__()
        self.tmp = tmp
        self.vocab = vocab
        self.lowercase = lowercase
        self.cfg = cfg

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


class BuildBucket(beam.DoFn):
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
        units = [u for c in chunks for u in read_units(c, lo, hi)]
        try:
            built = build_bucket(bucket, units, self.cfg, token_spec(vocab))
        except RepeatedIdError as e:
            where = input_files_holding(e.id, chunks, lo, hi, self.tmp)
            raise RepeatedIdError(e.id, f" ({where})") from None
        if built is None:
            return
        columns, short, sources = built
        counts = {f"{source}{SEP}instances": n for source, n in sources.items()}
        entry = write_bucket_shard(
            self.out, bucket, columns, short, vocab, self.build_config, counts
        )
        yield bucket, entry, counts


class RepeatedIdError(BadInputError):
    def __init__(self, doc_id: str, where: str = ""):
        super().__init__(
            f"document id {doc_id!r} occurs twice in the input{where} (JSONL records with the "
            "same id in two files, or one Wikipedia page in two dumps); an id names one "
            "document: remove the repeat, or pass --dedup (make: ARGS=--dedup) when the copies "
            "are equal"
        )
        self.id = doc_id


def refuse_repeated_ids(units) -> None:
    """Two documents with one id would make the output depend on reading order (and one could
    be paired with itself as "another" document). Both passes of an id land in the same bucket
    (the bucket hash is of the id), so each bucket checks its own sorted units."""
    for (p, a), (q, b) in itertools.pairwise(units):
        if p == q and a.id == b.id:
            raise RepeatedIdError(a.id)


def input_files_holding(doc_id: str, chunks: list[Chunk], lo: int, hi: int, tmp: str) -> str:
    """Where a repeated id was read: the input files of the chunks whose units hold it (a chunk
    records its input files in its read marker; small files share a chunk)."""
    files: list[str] = []
    for chunk in chunks:
        if any(doc.id == doc_id for _, doc in read_units(chunk, lo, hi)):
            key = chunk.path.rsplit("/", 1)[-1].rsplit("-", 1)[0]  # see ChunkWriter.write
            marker = read_marker(FileSystems.join(tmp, "items", key + ".json"))
            files += [f for f in marker.get("inputs", []) if f not in files]
    return "read from " + ", ".join(files) if files else "input files unknown"


def plan_bucket(units, cfg: InstanceConfig) -> tuple[list[TokenizedDoc], np.ndarray]:
    """A bucket's (pass, document) units -> its documents and every pair (`pair_array`).

    Units are sorted by (pass, document id); each is planned with its own generator
    (seed, pass, document id)."""
    units = sorted(units, key=lambda u: (u[0], u[1].id))
    refuse_repeated_ids(units)
    docs = [doc for _, doc in units]
    offsets, ids = unit_tables(docs)
    can_pick_other = len(set(ids)) > 1
    pairs = []
    for i, (p, doc) in enumerate(units):
        rng = scalar_generator(cfg.seed, "instances", p, doc.id)
        pairs.extend(plan_document(offsets, ids, i, cfg, rng, can_pick_other))
    return docs, pair_array(pairs)


def build_bucket(bucket: int, units, cfg: InstanceConfig, spec):
    """A bucket's units -> (ShardColumns, pair counts, instances per source), or None."""
    docs, pairs = plan_bucket(units, cfg)
    return bucket_columns(bucket, docs, pairs, cfg, spec) if len(pairs) else None


def bucket_columns(bucket: int, docs, pairs: np.ndarray, cfg: InstanceConfig, spec):
    """Planned pairs -> shuffled, assembled and masked rows, with generators of (seed, bucket)."""
    pairs = pairs[generator(cfg.seed, "shuffle", bucket).permutation(len(pairs))]
    rows = mask_rows(
        assemble_rows(docs, pairs, spec), cfg, spec, generator(cfg.seed, "mask", bucket)
    )
    columns = rows_to_columns(rows, pairs[:, RANDOM_NEXT])
    return columns, pair_counts(pairs), instances_per_source(docs, pairs)


def pair_counts(pairs: np.ndarray) -> dict[str, int]:
    """What the manifest records per shard beside the rows: short targets and forced labels."""
    forced = np.bincount(pairs[:, FORCED], minlength=3)
    return {
        "short_rows": int(pairs[:, SHORT].sum()),
        "forced_random_next": int(forced[FORCED_RANDOM]),
        "forced_actual_next": int(forced[FORCED_ACTUAL]),
    }


def instances_per_source(docs: list[TokenizedDoc], pairs: np.ndarray) -> dict[str, int]:
    """Instances per source (the source of A's document), in order of first appearance."""
    names = list(dict.fromkeys(doc.source for doc in docs))
    code = {name: k for k, name in enumerate(names)}
    per_pair = np.array([code[doc.source] for doc in docs])[pairs[:, A_UNIT]]
    counts = np.bincount(per_pair, minlength=len(names))
    _, first = np.unique(per_pair, return_index=True)
    seen = np.unique(per_pair)[np.argsort(first)]
    return {names[k]: int(counts[k]) for k in seen.tolist()}


class CreateInstances(beam.PTransform):
    """Units chunks -> one shard per bucket, as (bucket, entry, counts).

    The number of buckets comes from the corpus totals; bucket b holds the dupe passes whose
    seeded hash h has (h * buckets) >> 64 == b. Each bucket's units are sorted, then the
    reference algorithm runs per document pass."""

    def __init__(
        self,
        tmp: str,
        out: str,
        vocab,
        cfg: InstanceConfig,
        build_config: dict,
        num_shards: int,
        bucket_tokens: int,
    ):
        super().__init__()
        self.tmp = tmp
        self.out = out
        self.vocab = vocab
        self.cfg = cfg
        self.build_config = build_config
        self.num_shards = num_shards
        self.bucket_tokens = bucket_tokens

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
