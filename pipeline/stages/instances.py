"""Stage 5, instances: units chunks -> one shard per bucket in the build area.

The bucket count comes from the corpus totals; each bucket reads its slice of every units file,
plans, assembles and masks its rows with `pipeline.core.buckets`, and writes its shard
(`pipeline.stages.shards`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.core.buckets import RepeatedIdError, build_bucket
from pipeline.core.config import InstanceConfig
from pipeline.core.tokenize import token_spec, vocab_of
from pipeline.files.chunks import Chunk
from pipeline.files.fsio import read_marker, write_marker
from pipeline.files.units import hash_range, read_bucket_units, read_units
from pipeline.stages.base import Stage, Step
from pipeline.stages.counting import count_key
from pipeline.stages.shards import finished_bucket, write_bucket_shard

MIN_UNITS_PER_BUCKET = 20  # document passes: fewer, and random-next pairs have no other document


def num_buckets(totals: tuple[int, int], cfg: InstanceConfig, num_shards: int, bucket_tokens: int):
    """Buckets from (tokens, units) over every dupe pass: `num_shards` when given, else one per
    `bucket_tokens`; either way capped so that a bucket holds about MIN_UNITS_PER_BUCKET
    document passes (a --num-shards far above what the corpus fills would leave buckets of one
    document, whose pairs can only be actual-next). The report says when the cap applied."""
    tokens, units = totals
    wanted = num_shards or math.ceil(tokens / bucket_tokens)
    cap = max(1, units // MIN_UNITS_PER_BUCKET)
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
            raise RepeatedIdError.of(e.id, f" ({where})", equal=e.equal) from None
        if built is None:
            return
        columns, short, sources = built
        counts = {count_key(source, "instances"): n for source, n in sources.items()}
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


def input_files_holding(doc_id: str, chunks: list[Chunk], lo: int, hi: int, tmp: str) -> str:
    """Where a repeated id was read: the input files of the chunks whose units hold it (a chunk
    records its input files in its read marker; small files share a chunk)."""
    files: list[str] = []
    for chunk in chunks:
        if any(doc.id == doc_id for _, doc in read_units(chunk, lo, hi)):
            key = chunk.path.rsplit("/", 1)[-1].rsplit("-", 1)[0]  # see ChunkWriter.write
            marker = read_marker(FileSystems.join(tmp, "items", key + ".json"))
            files += [f for f in marker.get("inputs", []) if f not in files]
    return "read from " + named_files(doc_id, files) if files else "input files unknown"


def named_files(doc_id: str, files: list[str], most: int = 4) -> str:
    """The files a chunk read that can hold `doc_id`: those whose path ends in the id's path (a
    file's document id is its source and relative path), else the first `most` of them."""
    rel = doc_id.split(":", 1)[-1]
    named = [f for f in files if f == rel or f.endswith("/" + rel)] or files
    more = f" and {len(named) - most} more files" if len(named) > most else ""
    return ", ".join(named[:most]) + more
