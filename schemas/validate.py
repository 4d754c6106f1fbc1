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
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa

from schemas.manifest import MANIFEST_NAME, Manifest, read_manifest
from schemas.reader import TOKENIZER_NAME, VOCAB_NAME
from schemas.rows import (
    MIN_ROW_LENGTH,
    ROW_RULES,
    BatchStats,
    RowRules,
    describe_row,
    row_findings,
)
from schemas.shard import SCHEMA_NAME, SCHEMA_VERSION, ShardColumns, arrow_schema, schema_metadata
from schemas.stats import binomial_tolerance, bonferroni_z, g_test_z
from schemas.vocab import SpecialIds, Vocab

MASK_SHARE, KEEP_SHARE, RANDOM_SHARE = 0.8, 0.1, 0.1  # the reference's 80/10/10
REQUIRED_CONFIG = (
    "max_seq_length",
    "max_predictions_per_seq",
    "masked_lm_prob",
    "short_seq_prob",
    "dupe_factor",
    "random_next_prob",
    "whole_word_mask",
)
SHARDS_DIR = "shards"

CHECKS = {  # key -> title, in report order (the README describes each)
    "manifest": "manifest",
    "schema": "schema name/version",
    "vocab": "vocab, tokenizer.json",
    "config": "build config",
    "files": "shard files",
    "integrity": "sizes and sha256",
    "arrow": "Arrow structure",
    "counts": "counts vs manifest",
    "cls_first": "[CLS] first, only there",
    "two_sep": "two [SEP], B after the first",
    "length": "row lengths",
    "no_pad": "no [PAD]",
    "ids_in_vocab": "ids inside the vocab",
    "positions": "masked positions",
    "mask_count": "masks per row (formula)",
    "mask_tokens": "[MASK] and replacements",
    "labels": "labels not special",
    "whole_words": "whole words",
    "mask_rate": "mask rate",
    "split": "80/10/10 split",
    "random_next": "random-next share",
    "short_rows": "short-target rows",
    "balance": "rows per shard",
}


@dataclass(frozen=True)
class ValidateOptions:
    z: float = 5.0  # level of the statistical checks, as a normal quantile (5: 5.7e-7)
    examples: int = 3  # failing rows quoted per check and shard
    hashes: bool = True  # verify sha256 (reads every byte once more)


@dataclass(frozen=True)
class Check:
    key: str
    title: str
    status: str  # "pass", "FAIL" or "skip"
    summary: str  # the figures behind the result, in words
    figures: dict
    failures: tuple[str, ...]  # one line each, naming the shard and row
    failing: int  # failing items (rows, shards, files); may exceed len(failures)

    @property
    def passed(self) -> bool:
        return self.status != "FAIL"


@dataclass(frozen=True)
class Report:
    directory: str
    checks: tuple[Check, ...]
    rows: int  # rows whose checks ran
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)

    def check(self, key: str) -> Check:
        return next(c for c in self.checks if c.key == key)

    @property
    def failures(self) -> list[str]:
        return [f for c in self.checks for f in c.failures]

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "checks": [asdict(c) | {"failures": list(c.failures)} for c in self.checks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        return format_report(self)


# ----------------------------------------------------------------------------- accumulating


@dataclass
class _Tally:
    """Failures and figures of one check while the validation runs."""

    failures: list[str] = field(default_factory=list)
    failing: int = 0
    figures: dict = field(default_factory=dict)
    summary: str = ""
    ran: bool = False
    skip_reason: str = ""

    def fail(self, line: str, count: int = 1) -> None:
        self.ran = True
        self.failing += count
        self.failures.append(line)


class _Checks:
    def __init__(self):
        self.tallies = {key: _Tally() for key in CHECKS}

    def __getitem__(self, key: str) -> _Tally:
        return self.tallies[key]

    def ran(self, *keys: str) -> None:
        for key in keys:
            self.tallies[key].ran = True

    def skip(self, keys, reason: str) -> None:
        for key in keys:
            t = self.tallies[key]
            if not t.ran and not t.skip_reason:
                t.skip_reason = reason

    def result(self, omit: set[str]) -> tuple[Check, ...]:
        out = []
        for key, title in CHECKS.items():
            if key in omit:
                continue
            t = self.tallies[key]
            status = "FAIL" if t.failing else ("pass" if t.ran else "skip")
            summary = t.summary or (t.skip_reason if status == "skip" else "")
            out.append(Check(key, title, status, summary, t.figures, tuple(t.failures), t.failing))
        return tuple(out)


# ----------------------------------------------------------------------------- the set


@dataclass
class _Context:
    directory: str
    options: ValidateOptions
    checks: _Checks
    manifest: Manifest
    vocab: Vocab | None = None  # only when it is the one the manifest names
    rules: RowRules | None = None
    shard_stats: dict[str, BatchStats] = field(default_factory=dict)  # rel path -> figures
    digests: dict[str, Future] = field(default_factory=dict)  # rel path -> sha256, computing


def validate(directory: str, options: ValidateOptions | None = None) -> Report:
    """Run every check on the shard set in `directory`; never raises on a broken set."""
    options = options or ValidateOptions()
    start = time.perf_counter()
    checks = _Checks()
    try:
        manifest = read_manifest(directory)
    except (OSError, ValueError) as e:
        checks["manifest"].fail(str(e))
        checks.skip(CHECKS, "not run: the manifest is unreadable")
        return Report(directory, checks.result({"whole_words"}), 0, time.perf_counter() - start)
    checks["manifest"].ran = True
    ctx = _Context(directory, options, checks, manifest)
    try:
        _check_set(ctx)
    except (TypeError, AttributeError, KeyError, ValueError) as e:  # a field of the wrong form
        checks["manifest"].fail(
            f"{MANIFEST_NAME}: a field has the wrong form ({type(e).__name__}: {e}); rebuild "
            "the set with `make shards`"
        )
        checks.skip(CHECKS, "not run: the manifest is malformed")
    wwm = isinstance(manifest.config, dict) and manifest.config.get("whole_word_mask")
    omit = set() if wwm else {"whole_words"}
    rows = sum(s.rows for s in ctx.shard_stats.values())
    return Report(directory, checks.result(omit), rows, time.perf_counter() - start)


def _check_set(ctx: _Context) -> None:
    directory, manifest, options = ctx.directory, ctx.manifest, ctx.options
    ctx.checks["manifest"].summary = (
        f"format {manifest.manifest_format}, {len(manifest.shards)} shards, "
        f"{manifest.rows:,} rows listed"
    )
    _check_schema(ctx)
    _check_vocab(ctx)
    _check_config(ctx)
    present = _check_files(ctx)
    with ThreadPoolExecutor(max_workers=1) as hasher:  # hashlib releases the GIL
        if options.hashes:
            ctx.digests = {
                e.path: hasher.submit(sha256_file, os.path.join(directory, e.path))
                for e in manifest.shards
                if e.path in present
            }
        for entry in manifest.shards:
            if entry.path in present:
                _check_shard(ctx, entry)
    _set_checks(ctx)
    _summaries(ctx)


def _check_schema(ctx: _Context) -> None:
    m, t = ctx.manifest, ctx.checks["schema"]
    t.ran = True
    t.summary = f"{m.schema_name} version {m.schema_version}"
    if m.schema_name != SCHEMA_NAME or m.schema_version != SCHEMA_VERSION:
        t.fail(
            f"{MANIFEST_NAME}: schema {m.schema_name!r} version {m.schema_version} is not one this "
            f"code reads ({SCHEMA_NAME!r} version {SCHEMA_VERSION}); rebuild the shards with "
            "this version or validate them with the matching release"
        )


def _check_vocab(ctx: _Context) -> None:
    m, t = ctx.manifest, ctx.checks["vocab"]
    t.ran = True
    path = os.path.join(ctx.directory, VOCAB_NAME)
    try:
        vocab = Vocab.load(path)
    except FileNotFoundError:
        t.fail(f"{VOCAB_NAME}: missing; the shards' ids mean nothing without it: rebuild the set")
        vocab = None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        t.fail(f"{VOCAB_NAME}: unreadable ({e})")
        vocab = None
    if vocab is not None:
        before = t.failing
        _compare_vocab(vocab, m, t)
        if t.failing == before:
            ctx.vocab = vocab
        _check_tokenizer_json(ctx, vocab)
    t.summary = (
        f"{m.vocab_size:,} pieces, sha256 {m.vocab_sha256[:12]}, "
        f"specials {json.dumps(m.special_ids, sort_keys=True)}"
    )


def _compare_vocab(vocab: Vocab, m: Manifest, t: _Tally) -> None:
    if vocab.sha256 != m.vocab_sha256:
        t.fail(
            f"{VOCAB_NAME}: sha256 {vocab.sha256[:12]}... differs from the manifest's "
            f"{m.vocab_sha256[:12]}...; the vocab was replaced after the build: restore the "
            "vocab the shards were built with"
        )
    if len(vocab) != m.vocab_size:
        t.fail(f"{VOCAB_NAME}: {len(vocab):,} pieces, the manifest says {m.vocab_size:,}")
    if vocab.special_ids.to_dict() != {k: int(v) for k, v in m.special_ids.items()}:
        t.fail(
            f"{VOCAB_NAME}: special ids {json.dumps(vocab.special_ids.to_dict(), sort_keys=True)} "
            f"differ from the manifest's {json.dumps(m.special_ids, sort_keys=True)}"
        )


def _check_tokenizer_json(ctx: _Context, vocab: Vocab) -> None:
    t = ctx.checks["vocab"]
    path = os.path.join(ctx.directory, TOKENIZER_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            pieces = json.load(f)["model"]["vocab"]
    except FileNotFoundError:
        t.fail(f"{TOKENIZER_NAME}: missing; it belongs beside {VOCAB_NAME}: rebuild the set")
        return
    except (OSError, ValueError, KeyError, TypeError) as e:
        t.fail(f"{TOKENIZER_NAME}: not a WordPiece tokenizer file ({type(e).__name__}: {e})")
        return
    if len(pieces) != len(vocab):
        t.fail(f"{TOKENIZER_NAME}: {len(pieces):,} pieces, {VOCAB_NAME} {len(vocab):,}")
        return
    index = vocab.index
    for piece, i in pieces.items():
        if index.get(piece) != i:
            t.fail(
                f"{TOKENIZER_NAME}: piece {piece!r} has id {i} there, {index.get(piece)} in "
                f"{VOCAB_NAME}; the two files come from different vocabs"
            )
            return


def _check_config(ctx: _Context) -> None:
    m, t = ctx.manifest, ctx.checks["config"]
    t.ran = True
    missing = [k for k in REQUIRED_CONFIG if k not in m.config]
    if missing:
        t.fail(f"{MANIFEST_NAME}: config lacks {', '.join(missing)}; the row checks need them")
    else:
        problem = _config_problem(m.config)
        if problem:
            t.fail(f"{MANIFEST_NAME}: config {problem}")
        else:
            size = ctx.vocab and len(ctx.vocab) or m.vocab_size
            try:
                specials = SpecialIds.from_dict(m.special_ids)
                ctx.rules = RowRules.build(ctx.vocab, size, specials, m.config)
            except (KeyError, ValueError, TypeError, IndexError) as e:
                ctx.checks["vocab"].fail(f"{MANIFEST_NAME}: special ids unusable ({e})")
    c = m.config
    t.summary = ", ".join(f"{k}={c[k]}" for k in REQUIRED_CONFIG if k in c)


def _config_problem(c: dict) -> str:
    def number(key, lo, hi):
        v = c[key]
        return isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi

    if not (isinstance(c["max_seq_length"], int) and MIN_ROW_LENGTH <= c["max_seq_length"] < 65536):
        return f"max_seq_length={c['max_seq_length']!r} is not an integer in [5, 65535]"
    if not (isinstance(c["max_predictions_per_seq"], int) and c["max_predictions_per_seq"] >= 1):
        return f"max_predictions_per_seq={c['max_predictions_per_seq']!r} is not an integer >= 1"
    for key in ("masked_lm_prob", "short_seq_prob", "random_next_prob"):
        if not number(key, 0.0, 1.0):
            return f"{key}={c[key]!r} is not a probability"
    if not (isinstance(c["dupe_factor"], int) and c["dupe_factor"] >= 1):
        return f"dupe_factor={c['dupe_factor']!r} is not an integer >= 1"
    return ""


def _check_files(ctx: _Context) -> set[str]:
    """Listed shards present, none extra, none listed twice; returns the present ones."""
    t = ctx.checks["files"]
    t.ran = True
    listed = [e.path for e in ctx.manifest.shards]
    for rel in sorted({p for p in listed if listed.count(p) > 1}):
        t.fail(f"{rel}: listed {listed.count(rel)} times in the manifest")
    present = {p for p in listed if os.path.isfile(os.path.join(ctx.directory, p))}
    for rel in listed:
        if rel not in present:
            t.fail(f"{rel}: listed in the manifest but missing; the set is incomplete: rebuild it")
    folder = os.path.join(ctx.directory, SHARDS_DIR)
    found = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    extra = [f"{SHARDS_DIR}/{n}" for n in found if n.endswith(".arrow")]
    for rel in [r for r in extra if r not in set(listed)]:
        t.fail(
            f"{rel}: not listed in the manifest; a leftover of another build? remove it or "
            "rebuild the set"
        )
    t.summary = f"{len(present)} of {len(listed)} listed shards present, {len(found)} files found"
    return present


def sha256_file(path: str) -> str:
    """A file's sha256, read through a memory map (no copy into Python)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return hashlib.sha256(b"").hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return hashlib.sha256(mm).hexdigest()


def _check_shard(ctx: _Context, entry) -> None:
    """One shard: bytes, hash, structure, metadata, then every row batch by batch."""
    path = os.path.join(ctx.directory, entry.path)
    rel = entry.path
    integrity = ctx.checks["integrity"]
    integrity.ran = True
    size = os.path.getsize(path)
    if size != entry.bytes:
        integrity.fail(
            f"{rel}: {size:,} bytes, the manifest says {entry.bytes:,}; the file was "
            "truncated or changed after the build"
        )
    if rel in ctx.digests:
        try:
            digest = ctx.digests[rel].result()
        except OSError as e:
            digest = f"unreadable ({e})"
        if digest != entry.sha256:
            integrity.fail(
                f"{rel}: sha256 {digest[:12]}... differs from the manifest's "
                f"{entry.sha256[:12]}...; the file changed after it was written"
            )
    reader = _open_shard(ctx, rel, path)
    if reader is None:
        return
    _check_metadata(ctx, rel, reader.schema)
    stats = _check_batches(ctx, rel, reader)
    if stats is not None:
        ctx.shard_stats[rel] = stats
        _check_counts(ctx, entry, stats)


def _open_shard(ctx: _Context, rel: str, path: str):
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


def _check_metadata(ctx: _Context, rel: str, schema: pa.Schema) -> None:
    md, m = schema_metadata(schema), ctx.manifest
    if md["schema_name"] != SCHEMA_NAME or md["schema_version"] != SCHEMA_VERSION:
        ctx.checks["schema"].fail(
            f"{rel}: schema metadata says {md['schema_name']!r} version {md['schema_version']}, "
            f"this code reads {SCHEMA_NAME!r} version {SCHEMA_VERSION}"
        )
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


def _check_batches(ctx: _Context, rel: str, reader) -> BatchStats | None:
    """Row rules batch by batch; None when the shard turns out structurally broken."""
    rules = ctx.rules
    total = BatchStats()
    if rules is None:
        ctx.checks.skip(ROW_RULES, "not run: no usable config or special ids")
    quoted = dict.fromkeys(ROW_RULES, 0)
    failing = dict.fromkeys(ROW_RULES, 0)
    first_row = 0
    for b in range(reader.num_record_batches):
        try:
            batch = reader.get_batch(b)
            batch.validate(full=True)
            if any(col.null_count for col in batch.columns):
                raise ValueError("null values in non-nullable columns")
        except (pa.ArrowException, OSError, ValueError) as e:
            ctx.checks["arrow"].fail(
                f"{rel} record batch {b} (from row {first_row:,}): invalid Arrow data ({e}); "
                "the shard is corrupt: rebuild it (its remaining rows are not checked)"
            )
            return None
        cols = ShardColumns.from_table(pa.Table.from_batches([batch]))
        if rules is not None:
            bad, stats = row_findings(cols, rules)
            total.add(stats)
            _quote(ctx, rel, cols, rules, bad, first_row, quoted, failing)
        else:
            total.rows += cols.num_rows
        first_row += cols.num_rows
    if rules is not None and rules.continuation is None:
        ctx.checks.skip(("whole_words",), "not run: the vocab is not the one of the shards")
    for key in ROW_RULES:
        extra = failing[key] - quoted[key]
        if extra > 0:
            ctx.checks[key].failures.append(f"{rel}: {extra:,} more rows break this rule")
    return total


def _quote(ctx, rel, cols, rules, bad, first_row, quoted, failing) -> None:
    ctx.checks.ran(*bad)
    for key, rows in bad.items():
        where = np.flatnonzero(rows)
        if len(where) == 0:
            continue
        failing[key] += len(where)
        ctx.checks[key].failing += len(where)
        for r in where[: max(0, ctx.options.examples - quoted[key])]:
            detail = describe_row(key, cols, int(r), rules)
            ctx.checks[key].failures.append(f"{rel} row {first_row + int(r):,}: {detail}")
            quoted[key] += 1


def _check_counts(ctx: _Context, entry, s: BatchStats) -> None:
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


# ----------------------------------------------------------------------------- statistics


def _set_checks(ctx: _Context) -> None:
    stats = list(ctx.shard_stats.values())
    total = BatchStats()
    for s in stats:
        total.add(s)
    _check_instances_count(ctx, total)
    if ctx.rules is None or total.rows == 0:
        reason = "not run: no rows could be checked" if ctx.rules else "not run: no usable config"
        ctx.checks.skip(("mask_rate", "split", "random_next", "short_rows", "balance"), reason)
        ctx.checks.skip(ROW_RULES + ("counts",), reason)
        return
    _check_mask_rate(ctx, total)
    _check_split(ctx, total)
    _check_random_next(ctx, total)
    _check_short_rows(ctx, total)
    _check_balance(ctx)


def _check_instances_count(ctx: _Context, total: BatchStats) -> None:
    listed = ctx.manifest.counts.get("total", {}).get("instances")
    complete = len(ctx.shard_stats) == len(ctx.manifest.shards)
    if listed is not None and complete and listed != total.rows:
        ctx.checks["counts"].fail(
            f"{MANIFEST_NAME}: counts say {listed:,} instances were made, the shards hold "
            f"{total.rows:,} rows"
        )


def _check_mask_rate(ctx: _Context, s: BatchStats) -> None:
    t, r = ctx.checks["mask_rate"], ctx.rules
    t.ran = True
    rate = s.masked / max(s.tokens, 1)
    implied = s.expected_masked / max(s.tokens, 1)
    t.figures = {
        "masked": s.masked,
        "tokens": s.tokens,
        "rate": rate,
        "implied": implied,
        "masked_lm_prob": r.masked_lm_prob,
    }
    t.summary = (
        f"{rate:.2%} of {s.tokens:,} pieces masked; masked_lm_prob {r.masked_lm_prob}, "
        f"the count formula implies {implied:.2%} for these lengths"
    )
    if r.whole_word_mask:
        if s.masked > s.expected_masked:
            t.fail(f"{s.masked:,} masked positions, more than the formula's {s.expected_masked:,}")
    elif s.masked != s.expected_masked:
        t.fail(
            f"{s.masked:,} masked positions, the formula gives {s.expected_masked:,} for "
            "these row lengths"
        )


def _check_split(ctx: _Context, s: BatchStats) -> None:
    """[MASK] 80%, the label kept 10% (plus replacements that drew the label), random 10%."""
    t, z = ctx.checks["split"], ctx.options.z
    t.ran = True
    hit = 1.0 / max(ctx.rules.replacements, 1)  # a replacement equal to the label
    unit = "word" if ctx.rules.whole_word_mask else "position"
    shares = []
    for name, k, p in (
        ("[MASK]", s.as_mask, MASK_SHARE),
        ("kept", s.as_keep, KEEP_SHARE + RANDOM_SHARE * hit),
        ("random", s.as_random, RANDOM_SHARE * (1 - hit)),
    ):
        tol = binomial_tolerance(p, s.units, z)
        share = k / s.units if s.units else p
        shares.append(f"{name} {share:.2%}")
        t.figures[name] = {"count": k, "share": share, "expected": p, "lo": tol.lo, "hi": tol.hi}
        if share not in tol:
            t.fail(
                f"{name} share {share:.4f} of {s.units:,} masked {unit}s is outside "
                f"[{tol.lo:.4f}, {tol.hi:.4f}] (expected {p:.4f}, z={z:g})"
            )
    t.summary = f"{', '.join(shares)} of {s.units:,} {unit}s (80/10/10 within z={z:g})"


def _check_random_next(ctx: _Context, s: BatchStats) -> None:
    """The set: at least random_next_prob (a one-sentence chunk always takes a random B, so the
    share only rises). Each shard: its share agrees with the other shards' (a G-test), since
    shards are buckets of document passes drawn by a seeded hash."""
    t, z = ctx.checks["random_next"], ctx.options.z
    q = float(ctx.manifest.config["random_next_prob"])
    t.ran = True
    share = s.random_next / s.rows
    tol = binomial_tolerance(q, s.rows, z)
    t.figures = {
        "random_next": s.random_next,
        "rows": s.rows,
        "share": share,
        "expected_min": q,
        "lo": tol.lo,
    }
    if share < tol.lo:
        t.fail(
            f"random-next share {share:.4f} of {s.rows:,} rows is below {tol.lo:.4f} "
            f"(random_next_prob {q}; one-sentence chunks only add to it)"
        )
    zb = bonferroni_z(z, len(ctx.shard_stats))
    worst = 0.0
    for rel, zz, x, rest in _outlying_shards(ctx.shard_stats, zb):
        worst = max(worst, abs(zz))
        if abs(zz) > zb:
            t.fail(
                f"{rel}: random-next share {x.random_next / x.rows:.3f} of {x.rows:,} rows, "
                f"the other shards {rest:.3f} (|z| = {abs(zz):.1f} > {zb:.1f})"
            )
    t.figures["worst_shard_z"] = worst
    t.summary = (
        f"{share:.2%} of {s.rows:,} rows (>= {tol.lo:.2%}); shards agree within "
        f"|z| <= {zb:.1f} (worst {worst:.1f})"
    )


def _outlying_shards(shards: dict[str, BatchStats], zb: float):
    """Step-down comparison of each shard's random-next share with the others': the shard
    farthest from the rest is reported and left out of the pool while it lies beyond zb, so
    one bad shard does not make the sound ones look off. Yields (path, z, stats, rest share)
    for every shard reported and, last, the farthest sound one."""
    pool = {rel: x for rel, x in shards.items() if x.rows}
    while len(pool) > 1:
        k = sum(x.random_next for x in pool.values())
        n = sum(x.rows for x in pool.values())
        scored = [
            (rel, g_test_z(x.random_next, x.rows, k - x.random_next, n - x.rows), x)
            for rel, x in pool.items()
        ]
        rel, zz, x = max(scored, key=lambda r: abs(r[1]))
        yield rel, zz, x, (k - x.random_next) / (n - x.rows)
        if abs(zz) <= zb:
            return
        del pool[rel]


def _check_short_rows(ctx: _Context, s: BatchStats) -> None:
    """The target length is drawn once per document pass, short with probability p, and a short
    target never yields fewer rows: the share of short rows is at least p, up to the binomial
    noise of the number of document passes (documents_used * dupe_factor)."""
    t, m = ctx.checks["short_rows"], ctx.manifest
    t.ran = True
    p = float(m.config["short_seq_prob"])
    listed = {e.path: e for e in m.shards}
    short = sum(listed[rel].short_rows for rel in ctx.shard_stats)
    share = short / s.rows
    docs = m.counts.get("total", {}).get("documents_used")
    passes = int(docs) * int(m.config["dupe_factor"]) if isinstance(docs, int) else 0
    t.figures = {
        "short_rows": short,
        "rows": s.rows,
        "share": share,
        "short_seq_prob": p,
        "document_passes": passes,
        "full_length_rows": s.full_length,
    }
    full = f"{s.full_length / s.rows:.1%} of rows at max_seq_length"
    if p == 0.0 and short:
        t.fail(f"{short:,} rows listed as short, but short_seq_prob is 0")
    elif p == 1.0 and short != s.rows:
        t.fail(f"{s.rows - short:,} rows not listed as short, but short_seq_prob is 1")
    if not passes:
        t.summary = (
            f"{share:.2%} of rows short; the bound is not tested: the manifest's counts "
            f"lack documents_used; {full}"
        )
        return
    tol = binomial_tolerance(p, passes, ctx.options.z)
    t.figures["lo"] = tol.lo
    t.summary = (
        f"{share:.2%} of rows short (>= {tol.lo:.2%}: short_seq_prob {p} over "
        f"{passes:,} document passes); {full}"
    )
    if share < tol.lo:
        t.fail(
            f"short-row share {share:.4f} is below {tol.lo:.4f} (short_seq_prob {p}, "
            f"{passes:,} document passes); are short_rows recorded?"
        )


def _check_balance(ctx: _Context) -> None:
    """Rows per shard. How many rows a bucket gets depends on how many instances its documents
    yield, which the shards do not record, so the spread is reported, not tested; an empty
    shard (the pipeline never writes one) fails."""
    t = ctx.checks["balance"]
    t.ran = True
    rows = np.array([s.rows for s in ctx.shard_stats.values()], dtype=np.int64)
    for rel, s in ctx.shard_stats.items():
        if s.rows == 0:
            t.fail(f"{rel}: holds no rows; an empty bucket should not become a shard")
    mean = float(rows.mean())
    cv = float(rows.std() / mean) if mean else math.nan
    t.figures = {
        "shards": len(rows),
        "min": int(rows.min()),
        "median": float(np.median(rows)),
        "max": int(rows.max()),
        "cv": cv,
    }
    t.summary = (
        f"{len(rows)} shards: min {rows.min():,}, median {np.median(rows):,.0f}, "
        f"max {rows.max():,} rows (coefficient of variation {cv:.2f})"
    )


def _summaries(ctx: _Context) -> None:
    """Figures for the checks whose failures carry their own."""
    checks, stats = ctx.checks, list(ctx.shard_stats.values())
    rows = sum(s.rows for s in stats)
    hashed = "sizes and sha256" if ctx.options.hashes else "sizes (sha256 not verified)"
    if checks["integrity"].ran:
        checks["integrity"].summary = f"{hashed} of {len(ctx.manifest.shards)} shards compared"
    if checks["arrow"].ran:
        checks["arrow"].summary = f"{len(stats)} of {len(ctx.manifest.shards)} shards readable"
    if checks["counts"].ran:
        total = BatchStats()
        for s in stats:
            total.add(s)
        checks["counts"].summary = (
            f"{total.rows:,} rows, {total.tokens:,} pieces, {total.masked:,} masked, "
            f"{total.random_next:,} random-next"
        )
    for key in ROW_RULES:
        t = checks[key]
        if t.ran:
            t.figures = {"rows": rows, "failing_rows": t.failing}
            t.summary = (
                f"{t.failing:,} of {rows:,} rows break it" if t.failing else f"{rows:,} rows"
            )


# ----------------------------------------------------------------------------- output


def format_report(report: Report) -> str:
    """A table of checks (result and figures), then one line per failure."""
    title_w = max(len(c.title) for c in report.checks)
    lines = [
        f"validate {report.directory}: {report.rows:,} rows checked in {report.seconds:.2f} s",
        "",
        f"  {'check':<{title_w}}  result  figures",
        f"  {'-' * title_w}  ------  -------",
    ]
    for c in report.checks:
        lines.append(f"  {c.title:<{title_w}}  {c.status:<6}  {c.summary}".rstrip())
    failed = [c for c in report.checks if not c.passed]
    if failed:
        lines.append("")
        for c in failed:
            for f in c.failures:
                lines.append(f"FAIL {c.key}: {f}")
    lines.append("")
    if failed:
        lines.append(f"{len(failed)} of {len(report.checks)} checks failed")
    else:
        lines.append(f"all {len(report.checks)} checks passed")
    return "\n".join(lines) + "\n"
