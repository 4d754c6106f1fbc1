"""The checks of the whole set against its config, with tolerances from the sample size
(`schemas.stats`): the mask rate, the 80/10/10 split, the spread of the masks over the rows'
candidate positions (set and per shard), the random-next share (set and per shard), the share
of rows built with a short target, and the rows per shard; then the
set-wide figures of the checks whose failures carry their own."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from schemas.manifest import MANIFEST_NAME, Manifest
from schemas.rows import ROW_RULE_NAMES, BatchStats
from schemas.stats import binomial_tolerance, bonferroni_z, category_tolerances
from schemas.validate.state import Context, Tally

MASK_SHARE, KEEP_SHARE, RANDOM_SHARE = 0.8, 0.1, 0.1  # the reference's 80/10/10
SET_CHECKS = ("mask_rate", "split", "spread", "random_next", "short_rows", "balance")


def set_checks(ctx: Context) -> None:
    total = _total(ctx.shard_stats.values())
    _check_instances_count(ctx, total)
    if ctx.shard_stats and total.rows == 0:
        ctx.checks["counts"].fail(
            f"{len(ctx.shard_stats)} shard(s) read, and they hold no rows; an empty set has "
            "nothing to train on: check the input and rebuild it"
        )
    if ctx.rules is None or total.rows == 0:
        reason = "not run: no rows could be checked" if ctx.rules else "not run: no usable config"
        ctx.checks.skip(SET_CHECKS, reason)
        ctx.checks.skip(ROW_RULE_NAMES + ("counts",), reason)
        return
    _check_mask_rate(ctx, total)
    _check_split(ctx, total)
    _check_spread(ctx, total)
    _check_random_next(ctx, total)
    _check_short_rows(ctx, total)
    _check_balance(ctx)


def _total(stats: Iterable[BatchStats]) -> BatchStats:
    total = BatchStats()
    for s in stats:
        total.add(s)
    return total


def _check_instances_count(ctx: Context, total: BatchStats) -> None:
    listed = ctx.manifest.counts.get("total", {}).get("instances")
    complete = len(ctx.shard_stats) == len(ctx.manifest.shards)
    if listed is not None and complete and listed != total.rows:
        ctx.checks["counts"].fail(
            f"{MANIFEST_NAME}: counts say {listed:,} instances were made, the shards hold "
            f"{total.rows:,} rows"
        )


def _check_mask_rate(ctx: Context, s: BatchStats) -> None:
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


def _check_split(ctx: Context, s: BatchStats) -> None:
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


def _check_spread(ctx: Context, s: BatchStats) -> None:
    """Masking chooses uniformly among a row's candidate positions (with whole-word masking,
    among its words): pooled over the set, and over each shard, the masked units in each tenth
    of their rows' candidates are as many as a uniform choice gives, within the tolerance
    (Bonferroni over the tenths, and per shard over the shards too). Masks crowded at the
    start of rows, at their end or in one place fail."""
    t, z, rules = ctx.checks["spread"], ctx.options.z, ctx.rules
    if rules.whole_word_mask and rules.continuation is None:
        t.skip_reason = "not run: whole-word masking, and the vocab is not the one of the shards"
        return
    t.ran = True
    unit = "word" if rules.whole_word_mask else "position"
    worst = _spread_failures(t, "", s, z)  # the tenth furthest from uniform
    shard_z = bonferroni_z(z, len(ctx.shard_stats))
    for rel, stats in ctx.shard_stats.items():
        _spread_failures(t, f"{rel}: ", stats, shard_z)
    units = int(s.spread_seen.sum())
    t.figures = {
        "units": units,
        "seen": s.spread_seen.tolist(),
        "expected": s.spread_expected.tolist(),
        "worst_tenth": worst,
    }
    if units:
        seen, expected = s.spread_seen[worst - 1] / units, s.spread_expected[worst - 1] / units
        t.summary = (
            f"{units:,} masked {unit}s over the tenths of their rows' candidate positions; "
            f"furthest from uniform: tenth {worst} holds {seen:.2%}, uniform {expected:.2%} "
            f"(the tenths within z={z:g}, each shard's within z={shard_z:.1f})"
        )


def _spread_failures(t: Tally, where: str, s: BatchStats, z: float) -> int:
    """One failure when a tenth lies outside its tolerance, quoting the furthest from uniform;
    returns that tenth (1-10)."""
    units = int(s.spread_seen.sum())
    if not units:
        return 0
    expected = s.spread_expected / units
    shares = s.spread_seen / units
    tolerances = category_tolerances(expected.tolist(), units, z)
    outside = [share not in tol for tol, share in zip(tolerances, shares, strict=True)]
    worst = int(np.argmax(np.abs(shares - expected)))
    if any(outside):
        tol = tolerances[worst]
        t.fail(
            f"{where}masks are not spread over the rows: {sum(outside)} of {len(outside)} "
            f"tenths of the candidate positions hold a share of the {units:,} masked units "
            f"outside their tolerance; tenth {worst + 1} holds {shares[worst]:.2%}, a uniform "
            f"choice {tol.p:.2%} (accepted [{tol.lo:.2%}, {tol.hi:.2%}], z={tol.z:.1f})"
        )
    return worst + 1


def _check_random_next(ctx: Context, s: BatchStats) -> None:
    """The random_next_prob coin, on the rows whose label it drew: the manifest counts the rows
    whose label was forced (a one-sentence chunk always takes a random B; a bucket of one
    document never can), so the other rows of the set, and of every shard, are binomial draws
    with probability random_next_prob. Per shard the level is corrected for the shard count."""
    t, z = ctx.checks["random_next"], ctx.options.z
    prob = ctx.config.random_next_prob
    t.ran = True
    entries = {e.path: e for e in ctx.manifest.shards}
    coin = {  # rel path -> (random-next rows, rows) the coin drew
        rel: _coin_draws(t, rel, stats, entries.get(rel))
        for rel, stats in ctx.shard_stats.items()
        if stats.rows
    }
    drawn_random = sum(random_rows for random_rows, _ in coin.values())
    drawn = sum(rows for _, rows in coin.values())
    share = drawn_random / drawn if drawn else float("nan")
    tol = binomial_tolerance(prob, max(drawn, 1), z)
    t.figures = {
        "random_next": s.random_next,
        "rows": s.rows,
        "coin_rows": drawn,
        "coin_random_next": drawn_random,
        "share": share,
        "expected": prob,
        "lo": tol.lo,
        "hi": tol.hi,
    }
    if drawn and share not in tol:
        t.fail(
            f"random-next share {share:.4f} of the {drawn:,} rows whose label the coin drew is "
            f"outside [{tol.lo:.4f}, {tol.hi:.4f}] (random_next_prob {prob}, z={z:g})"
        )
    shard_z = bonferroni_z(z, len(coin))
    for rel, (random_rows, rows) in coin.items():
        shard_tol = binomial_tolerance(prob, max(rows, 1), shard_z)
        if rows and random_rows / rows not in shard_tol:
            t.fail(
                f"{rel}: random-next share {random_rows / rows:.3f} of the {rows:,} rows whose "
                f"label the coin drew is outside [{shard_tol.lo:.3f}, {shard_tol.hi:.3f}] "
                f"(random_next_prob {prob}, z={shard_z:.1f} over {len(coin)} shards)"
            )
    forced = s.rows - drawn
    t.summary = (
        f"{share:.2%} of {drawn:,} coin-drawn rows (random_next_prob {prob}, within z={z:g}; "
        f"each shard within z={shard_z:.1f}); {forced:,} rows forced, "
        f"{s.random_next / s.rows:.2%} of all"
    )


def _coin_draws(t: Tally, rel: str, stats: BatchStats, entry) -> tuple[int, int]:
    """(random-next rows, rows) of a shard whose label the coin drew."""
    forced_random = getattr(entry, "forced_random_next", 0) if entry else 0
    forced_actual = getattr(entry, "forced_actual_next", 0) if entry else 0
    random_rows = stats.random_next - forced_random
    rows = stats.rows - forced_random - forced_actual
    if random_rows < 0 or rows < random_rows:
        t.fail(
            f"{rel}: the manifest's forced labels ({forced_random:,} random, {forced_actual:,} "
            f"actual) do not fit the shard's {stats.rows:,} rows with {stats.random_next:,} "
            "random-next"
        )
        return 0, 0
    return random_rows, rows


def _check_short_rows(ctx: Context, s: BatchStats) -> None:
    """The target length is drawn once per document pass, short with probability p, and a short
    target never yields fewer rows: the share of short rows is at least p, up to the binomial
    noise of the number of document passes (documents_used * dupe_factor)."""
    t, m = ctx.checks["short_rows"], ctx.manifest
    t.ran = True
    p = ctx.config.short_seq_prob
    listed = {e.path: e for e in m.shards}
    short = sum(listed[rel].short_rows for rel in ctx.shard_stats)
    share = short / s.rows
    passes = _document_passes(m, ctx.config.dupe_factor)
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
    _check_short_share(ctx, t, share, p, passes, full)


def _document_passes(m: Manifest, dupe_factor: int) -> int:
    """documents_used * dupe_factor, or 0 when the manifest's counts lack documents_used."""
    docs = m.counts.get("total", {}).get("documents_used")
    return int(docs) * dupe_factor if isinstance(docs, int) else 0


def _check_short_share(
    ctx: Context, t: Tally, share: float, p: float, passes: int, full: str
) -> None:
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


def _check_balance(ctx: Context) -> None:
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


def summarise(ctx: Context) -> None:
    """Figures for the checks whose failures carry their own."""
    checks, stats = ctx.checks, list(ctx.shard_stats.values())
    rows = sum(s.rows for s in stats)
    hashed = "sizes and sha256" if ctx.options.hashes else "sizes (sha256 not verified)"
    if checks["integrity"].ran:
        checks["integrity"].summary = f"{hashed} of {len(ctx.manifest.shards)} shards compared"
    if checks["arrow"].ran:
        checks["arrow"].summary = f"{len(stats)} of {len(ctx.manifest.shards)} shards readable"
    if checks["counts"].ran:
        total = _total(stats)
        checks["counts"].summary = (
            f"{total.rows:,} rows, {total.tokens:,} pieces, {total.masked:,} masked, "
            f"{total.random_next:,} random-next"
        )
    for key in ROW_RULE_NAMES:
        t = checks[key]
        if t.ran:
            t.figures = {"rows": rows, "failing_rows": t.failing}
            t.summary = (
                f"{t.failing:,} of {rows:,} rows break it" if t.failing else f"{rows:,} rows"
            )
