"""Writing: instances -> Arrow shard files under temporary names -> published dataset.

Shards are written to `OUT/shards/.building/` and moved into place by `publish` (renamed
locally; on gs:// copied inside the store once, the build area then removed by prefix), which
writes `vocab.txt`, `tokenizer.json` and, last, `manifest.json`. A crashed run never leaves a
manifest, so it never leaves a directory that validates.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import platform
import posixpath

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.core.smoothing import described
from pipeline.core.tokenize import tokenizer_json, vocab_of
from pipeline.files.fsio import (
    building_dir,
    match,
    move,
    read_bytes,
    remove,
    remove_tree,
    write_bytes,
    write_text,
)
from pipeline.stages.base import Stage
from pipeline.stages.counting import manifest_counts
from schemas.manifest import MANIFEST_NAME, SHARDS_DIR, Manifest, ShardEntry, shard_name
from schemas.reader import TOKENIZER_NAME, VOCAB_NAME
from schemas.shard import ShardColumns, shard_metadata, shard_to_bytes
from schemas.vocab import Vocab, tokenizer_config_files


def shard_path(index: int, total: int) -> str:
    return f"{SHARDS_DIR}/{shard_name(index, total)}"


def bucket_path(out: str, bucket: int) -> str:
    return FileSystems.join(building_dir(out), f"bucket-{bucket:06d}.arrow")


def write_bucket_shard(
    out: str,
    bucket: int,
    columns: ShardColumns,
    pair_counts: dict,
    vocab: Vocab,
    config: dict,
    counts: dict | None = None,
) -> ShardEntry:
    """A bucket's shard under a temporary name in the build area, and its entry; beside it, a
    record of the entry and `counts`, written last, so a resumed build can take the shard."""
    metadata = shard_metadata(vocab.sha256, len(vocab), vocab.special_ids.to_dict(), config)
    data = shard_to_bytes(columns.to_table(vocab.id_type, metadata))
    path = bucket_path(out, bucket)
    write_bytes(path, data)
    entry = ShardEntry.describe(path, data, columns, **pair_counts)
    record = {"entry": dataclasses.asdict(entry), "counts": counts or {}}
    write_text(path[: -len(".arrow")] + ".json", json.dumps(record))
    return entry


def finished_bucket(out: str, bucket: int):
    """(bucket, entry, counts) of a shard a build wrote before, when its bytes still match the
    recorded sha256; else None (the bucket is built again)."""
    path = bucket_path(out, bucket)
    try:  # the record first: on a fresh build its absence is the only request
        record = json.loads(read_bytes(path[: -len(".arrow")] + ".json").decode("utf-8"))
        digest = hashlib.sha256(read_bytes(path)).hexdigest()
    except (OSError, ValueError):  # FileNotFoundError among them
        return None
    entry = ShardEntry(**record["entry"])
    if digest != entry.sha256 or entry.path != path:
        return None
    return bucket, entry, record["counts"]


def publish(
    out: str,
    entries,
    counts: dict,
    vocab: Vocab,
    tokenizer_json: str,
    config: dict,
    by_input: dict | None = None,
):
    """Move shards into place, write vocab, tokenizer and (last) the manifest; then remove the
    build area. With no shard at all nothing is published: the counts go to the build area
    (`NO_INSTANCES`, for the report of what was dropped) and the directory has no manifest.
    `by_input`: the weighting of the inputs, when they were weighted (in the manifest's counts)."""
    entries = [e for _, e in sorted(entries, key=lambda kv: kv[0])]
    if not entries:
        path = FileSystems.join(building_dir(out), NO_INSTANCES)
        write_text(path, json.dumps(manifest_counts(counts), sort_keys=True))
        return None
    final = []
    for i, e in enumerate(entries):
        rel = shard_path(i, len(entries))
        move(e.path, FileSystems.join(out, rel))
        final.append(ShardEntry(**{**e.__dict__, "path": rel}))
    remove_stale_shards(out, {e.path for e in final})
    write_text(FileSystems.join(out, VOCAB_NAME), vocab.to_text())
    write_text(FileSystems.join(out, TOKENIZER_NAME), tokenizer_json)
    files = tokenizer_config_files(config["lowercase"], config["max_seq_length"])
    for name, text in files.items():
        write_text(FileSystems.join(out, name), text)
    manifest = Manifest(
        shards=tuple(final),
        config=config,
        vocab_sha256=vocab.sha256,
        vocab_size=len(vocab),
        special_ids=vocab.special_ids.to_dict(),
        counts={**manifest_counts(counts), **({"by_input": by_input} if by_input else {})},
        created={
            "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(),
            "out": out,
        },
    )
    write_text(FileSystems.join(out, MANIFEST_NAME), manifest.to_json())
    remove_tree(building_dir(out))
    return manifest


NO_INSTANCES = "no-instances.json"  # in the build area: the counts of a build that made none


def remove_stale_shards(out: str, keep: set[str]) -> None:
    """Shards of an earlier build into the same directory that this one did not write (another
    shard count): removed before the manifest appears, so it never lists fewer files than exist."""
    shards_dir = FileSystems.join(out, SHARDS_DIR)
    found = [m.path for m in match(FileSystems.join(shards_dir, "train-*.arrow"))]
    # The name inside OUT/shards/, never a split on "/shards/": OUT itself may contain it.
    stale = [path for path in found if "shards/" + posixpath.basename(path) not in keep]
    if stale:
        remove(stale)


@dataclasses.dataclass(eq=False)
class Publish(Stage):
    """(bucket, entry, counts) of every shard, and the counts of the other stages -> the
    published dataset; returns its row count."""

    out: str
    build_config: dict
    vocab: beam.PCollection  # of the vocab's text
    counts: beam.PCollection  # one dict of every count
    lowercase: bool
    rates: beam.PCollection | None = None  # of (characters, rate) per input group, when weighted
    labels: tuple[str, ...] = ()  # the inputs as given, in their order (`input_order`)

    def expand(self, built):
        entries = built | "Entries" >> beam.Map(lambda b: (b[0], b[1]))
        return (
            built.pipeline
            | "Once" >> beam.Create([None])
            | "Publish"
            >> beam.Map(
                published_rows,
                beam.pvalue.AsList(entries),
                beam.pvalue.AsSingleton(self.counts),
                beam.pvalue.AsSingleton(self.vocab),
                self.out,
                self.build_config,
                self.lowercase,
                *([] if self.rates is None else [beam.pvalue.AsSingleton(self.rates), self.labels]),
            )
        )


def published_rows(
    _,
    entries,
    counts: dict,
    vocab_text: str,
    out: str,
    config: dict,
    lowercase,
    rates=None,
    labels=(),
):
    """`publish` with the vocab's text; the set's row count (0 when nothing was published).
    `rates`: (characters, rate) per input group, when the inputs were weighted."""
    vocab = vocab_of(vocab_text)
    dupe = config["dupe_factor"]
    by_input = described(*rates, list(labels), dupe) if rates is not None else None
    tokenizer = tokenizer_json(vocab, lowercase)
    manifest = publish(out, entries, counts, vocab, tokenizer, config, by_input)
    return manifest.rows if manifest is not None else 0
