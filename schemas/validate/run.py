"""Prove a shard set is sound before anyone spends GPU days on it.

`validate(directory)` checks, in order:

- the manifest (readable, schema known), the vocab (present, its hash, size and special ids
  those of the manifest and of every shard, `tokenizer.json` in agreement) and the build config;
- the files (every listed shard present, none extra, sizes and sha256 as listed) and their
  Arrow structure (readable IPC file, the contract's columns, valid buffers); a structurally
  broken shard is reported and skipped, the others are still checked;
- every row, vectorised over the Arrow buffers (`row_findings`): `[CLS]` first, two `[SEP]`
  with B right after the first, lengths, ids inside the vocab, masked positions ascending and
  never on `[CLS]`/`[SEP]`, as many as the reference's formula gives, `[MASK]` only where a
  position was selected, replacements and labels that are not special pieces, whole words;
- the whole set against its config, with tolerances from the sample size (`schemas.stats`):
  the mask rate, the 80/10/10 split, the random-next share (set and per shard), the share of
  rows built with a short target, and the rows per shard.

The result is a `Report`: a table of checks with the figures behind them, one line per failure
naming the shard and row, and `ok` only when every check passes.

This module runs the checks in that order; they live beside it, in `schemas.validate`: `manifest`
(manifest, vocab, config), `files` (files, integrity, Arrow structure, counts), `rows` (the row
rules per record batch), `shard_set` (the statistics), `state` (options and tallies of a run)
and `report` (the result and its table and JSON renderings).
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import pyarrow as pa

from schemas import storage
from schemas.manifest import MANIFEST_NAME, Manifest, ShardEntry, form_problems, strict_json
from schemas.reader import load_manifest_text
from schemas.validate.files import check_files, check_remote_shard, check_shard, sha256_file
from schemas.validate.manifest import check_config, check_schema, check_vocab
from schemas.validate.report import CHECKS, Report
from schemas.validate.shard_set import set_checks, summarise
from schemas.validate.state import Context, Tallies, ValidateOptions


def validate(directory: str, options: ValidateOptions | None = None) -> Report:
    """Run every check on the shard set in `directory`; never raises on a broken set."""
    options = options or ValidateOptions()
    start = time.perf_counter()
    checks = Tallies()
    try:
        text, where = load_manifest_text(directory)
        manifest = Manifest.from_json(text, where)
    except (OSError, ValueError) as e:
        checks["manifest"].fail(str(e))
        checks.skip(CHECKS, "not run: the manifest is unreadable")
        return Report(directory, checks.result({"whole_words"}), 0, time.perf_counter() - start)
    checks["manifest"].ran = True
    problems = form_problems(strict_json(text))  # parsed above: it cannot fail here
    if problems:
        for line in problems:
            checks["manifest"].fail(f"{MANIFEST_NAME}: {line}; rebuild the set with `make shards`")
        checks.skip(CHECKS, "not run: the manifest is malformed")
        return Report(directory, checks.result({"whole_words"}), 0, time.perf_counter() - start)
    ctx = Context(directory, options, checks, manifest)
    try:
        _check_set(ctx)
    except (TypeError, AttributeError, KeyError, ValueError) as e:  # a field of the wrong form
        checks["manifest"].fail(
            f"{MANIFEST_NAME}: a field has the wrong form ({type(e).__name__}: {e}); rebuild "
            "the set with `make shards`"
        )
        checks.skip(CHECKS, "not run: the manifest is malformed")
    omit = set() if ctx.config and ctx.config.whole_word_mask else {"whole_words"}
    rows = sum(s.rows for s in ctx.shard_stats.values())
    return Report(directory, checks.result(omit), rows, time.perf_counter() - start)


# What a damaged shard can raise past the checks' own tests (Arrow's errors, a metadata field
# that is not JSON, a value of the wrong type): reported against that shard, never the set.
SHARD_ERRORS = (
    pa.ArrowException,
    ArithmeticError,
    LookupError,
    TypeError,
    ValueError,
    AttributeError,
)


def _check_one_shard(ctx: Context, entry: ShardEntry, scratch: str | None) -> None:
    """One shard's checks; an error they did not foresee is that shard's failure, in one
    line, and the other shards are still checked."""
    try:
        if scratch is not None:
            check_remote_shard(ctx, entry, scratch)
        else:
            check_shard(ctx, entry)
    except SHARD_ERRORS as e:
        ctx.shard_stats.pop(entry.path, None)
        ctx.checks["arrow"].fail(
            f"{entry.path}: could not be checked ({type(e).__name__}: {e}); the shard is "
            "corrupt or not one this package wrote: rebuild it (the other shards are still "
            "checked)"
        )


def _check_set(ctx: Context) -> None:
    manifest = ctx.manifest
    ctx.checks["manifest"].summary = (
        f"format {manifest.manifest_format}, {len(manifest.shards)} shards, "
        f"{manifest.rows:,} rows listed"
    )
    check_schema(ctx)
    check_vocab(ctx)
    check_config(ctx)
    present = check_files(ctx)
    remote = storage.is_remote(ctx.directory)
    scratch = tempfile.TemporaryDirectory(prefix="validate-") if remote else nullcontext()
    with ThreadPoolExecutor(max_workers=1) as hasher, scratch as folder:  # hashlib frees the GIL
        if ctx.options.hashes and not remote:  # a remote shard is hashed as it is copied
            ctx.digests = {
                e.path: hasher.submit(sha256_file, os.path.join(ctx.directory, e.path))
                for e in manifest.shards
                if e.path in present
            }
        for entry in manifest.shards:
            if entry.path in present:
                _check_one_shard(ctx, entry, folder if remote else None)
    set_checks(ctx)
    summarise(ctx)
