"""The checks of the shard files: every listed shard present and none extra, sizes and sha256
as listed, a readable Arrow IPC file with the contract's columns and metadata, and the figures
of its rows as the manifest lists them. A set in an object store is listed in one request per
1,000 objects, and each shard is copied once to a scratch folder (hashed as it arrives) and
checked there like a local one."""

from __future__ import annotations

import json
import os
from collections import Counter
from concurrent.futures import Future

import pyarrow as pa

from schemas import storage
from schemas.manifest import MANIFEST_NAME, SHARDS_DIR, ShardEntry, shard_path_problem
from schemas.rows import BatchStats
from schemas.shard import arrow_schema, schema_metadata, schema_problem
from schemas.validate.rows import check_batches
from schemas.validate.state import Context


def check_files(ctx: Context) -> set[str]:
    """Shard paths safe (relative, inside `shards/`, no symlink out), listed shards present,
    none extra, none listed twice; returns the present ones. Linear in the number of shards."""
    t = ctx.checks["files"]
    t.ran = True
    if not ctx.manifest.shards:
        t.fail(
            f"{MANIFEST_NAME}: lists no shards; an empty set has nothing to train on: check the "
            "input and rebuild it with `make shards`"
        )
    safe: list[str] = []
    remote = storage.is_remote(ctx.directory)
    for i, e in enumerate(ctx.manifest.shards):
        problem = shard_path_problem(e.path, None if remote else ctx.directory)  # no links there
        if problem:
            t.fail(
                f"{MANIFEST_NAME}: shard entry {i} ({e.path!r}): {problem}; shard paths must be "
                f"relative and inside {SHARDS_DIR}/: rebuild the set (it is not read)"
            )
        else:
            safe.append(e.path)
    listed = [e.path for e in ctx.manifest.shards]
    times = Counter(safe)
    for rel in sorted(p for p, n in times.items() if n > 1):
        t.fail(f"{rel}: listed {times[rel]} times in the manifest")
    if remote:
        try:
            stored = storage.list_files(storage.join(ctx.directory, SHARDS_DIR))
        except OSError as e:  # not "missing" then: each listed shard is still read, or not
            t.fail(f"{SHARDS_DIR}/: cannot be listed ({e}); the listed shards are still read")
            stored = {p[len(SHARDS_DIR) + 1 :]: 0 for p in times}
        present = {p for p in times if p[len(SHARDS_DIR) + 1 :] in stored}
        found = sorted(n for n in stored if "/" not in n)
    else:
        present = {p for p in times if os.path.isfile(os.path.join(ctx.directory, p))}
        folder = os.path.join(ctx.directory, SHARDS_DIR)
        found = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for rel in times:
        if rel not in present:
            t.fail(f"{rel}: listed in the manifest but missing; the set is incomplete: rebuild it")
    extra = [f"{SHARDS_DIR}/{n}" for n in found if n.endswith(".arrow")]
    for rel in [r for r in extra if r not in times]:
        t.fail(
            f"{rel}: not listed in the manifest; a leftover of another build? remove it or "
            "rebuild the set"
        )
    t.summary = f"{len(present)} of {len(listed)} listed shards present, {len(found)} files found"
    return present


def sha256_file(path: str) -> str:
    """A local file's sha256 (`storage.sha256_of`)."""
    with open(path, "rb", buffering=0) as f:
        return storage.sha256_of(f.fileno())[0]


def check_remote_shard(ctx: Context, entry: ShardEntry, scratch: str) -> None:
    """One shard of a set in an object store: copied into the folder `scratch` (its sha256
    taken on the way), checked there by `check_shard`, then removed."""
    local = os.path.join(scratch, "shard.arrow")
    try:
        digest = storage.fetch(storage.join(ctx.directory, entry.path), local)
    except OSError as e:
        t = ctx.checks["integrity"]
        t.ran = True
        t.fail(f"{entry.path}: could not be read ({e}); the other shards are still checked")
        return
    try:
        if ctx.options.hashes:
            done: Future = Future()
            done.set_result(digest)
            ctx.digests[entry.path] = done
        check_shard(ctx, entry, local)
    finally:
        os.unlink(local)


def check_shard(ctx: Context, entry: ShardEntry, path: str | None = None) -> None:
    """One shard: bytes, hash, structure, metadata, then every row batch by batch. `path`: where
    its bytes are (a local copy of a remote shard); by default the set's own file."""
    path = path or os.path.join(ctx.directory, entry.path)
    rel = entry.path
    _check_integrity(ctx, entry, path)
    reader = _open_shard(ctx, rel, path)
    if reader is None:
        return
    _check_metadata(ctx, rel, reader.schema)
    stats = check_batches(ctx, rel, reader)
    if stats is not None:
        ctx.shard_stats[rel] = stats
        _check_counts(ctx, entry, stats)


def _check_integrity(ctx: Context, entry: ShardEntry, path: str) -> None:
    """Size as listed, and sha256 as listed when it was computed (`ctx.digests`)."""
    rel, integrity = entry.path, ctx.checks["integrity"]
    integrity.ran = True
    size = os.path.getsize(path)
    if size != entry.bytes:
        integrity.fail(
            f"{rel}: {size:,} bytes, the manifest says {entry.bytes:,}; the file was "
            "truncated or changed after the build"
        )
    if rel not in ctx.digests:
        return
    try:
        digest = ctx.digests[rel].result()
    except OSError as e:
        digest = f"unreadable ({e})"
    if digest != entry.sha256:
        integrity.fail(
            f"{rel}: sha256 {digest[:12]}... differs from the manifest's "
            f"{entry.sha256[:12]}...; the file changed after it was written"
        )


def _open_shard(ctx: Context, rel: str, path: str) -> pa.ipc.RecordBatchFileReader | None:
    t = ctx.checks["arrow"]
    t.ran = True
    try:
        reader = pa.ipc.open_file(pa.memory_map(path, "r"))
    except (pa.ArrowException, OSError, ValueError) as e:
        t.fail(
            f"{rel}: not a readable Arrow IPC file ({e}); the shard is truncated or corrupt: "
            "rebuild it (the other shards are still checked)"
        )
        return None
    size = ctx.vocab and len(ctx.vocab) or ctx.manifest.vocab_size
    want = arrow_schema("uint16" if size <= 65536 else "uint32")
    got = reader.schema.remove_metadata()
    if not got.equals(want):
        t.fail(
            f"{rel}: columns ({_columns(got)}) are not the contract's ({_columns(want)}); "
            "rebuild it with this version"
        )
        return None
    return reader


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _check_metadata(ctx: Context, rel: str, schema: pa.Schema) -> None:
    md, m = schema_metadata(schema), ctx.manifest
    problem = schema_problem(md["schema_name"], md["schema_version"])
    if problem:
        ctx.checks["schema"].fail(f"{rel}: shard {problem}")
    if md["vocab_sha256"] != m.vocab_sha256 or md["vocab_size"] != m.vocab_size:
        ctx.checks["vocab"].fail(
            f"{rel}: built with vocab sha256 {str(md['vocab_sha256'])[:12]}... "
            f"({md['vocab_size']} pieces), the manifest's is {m.vocab_sha256[:12]}... "
            f"({m.vocab_size} pieces)"
        )
    elif md["special_ids"] != m.special_ids:
        ctx.checks["vocab"].fail(
            f"{rel}: special ids {md['special_ids']} differ from the manifest's {m.special_ids}"
        )
    if md["config"] != m.config:
        diff = sorted(set(_flat(md["config"])) ^ set(_flat(m.config)))
        keys = sorted({k for k, _ in diff})
        ctx.checks["config"].fail(
            f"{rel}: build config differs from the manifest's in {', '.join(keys) or 'its form'}"
        )


def _flat(config) -> list[tuple[str, str]]:
    if not isinstance(config, dict):
        return [("(missing)", "")]
    return [(k, json.dumps(v, sort_keys=True)) for k, v in config.items()]


def _check_counts(ctx: Context, entry: ShardEntry, s: BatchStats) -> None:
    t = ctx.checks["counts"]
    t.ran = True
    rel = entry.path
    for what, found, listed in (
        ("rows", s.rows, entry.rows),
        ("tokens", s.tokens, entry.tokens),
        ("masked tokens", s.masked, entry.masked_tokens),
        ("random-next rows", s.random_next, entry.random_next),
    ):
        if ctx.rules is None and what != "rows":
            continue
        if found != listed:
            t.fail(f"{rel}: holds {found:,} {what}, the manifest says {listed:,}")
    if not 0 <= entry.short_rows <= entry.rows:
        t.fail(f"{rel}: the manifest lists {entry.short_rows:,} short rows of {entry.rows:,}")
