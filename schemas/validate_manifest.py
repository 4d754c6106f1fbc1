"""The checks of what the rows are read against: the manifest's schema, the vocab (and
`tokenizer.json` beside it) and the build config. A usable config and vocab become the
context's `RowRules`."""

from __future__ import annotations

import json
import os

from schemas.manifest import MANIFEST_NAME, Manifest
from schemas.reader import TOKENIZER_NAME, VOCAB_NAME
from schemas.rows import MIN_ROW_LENGTH, RowRules
from schemas.shard import schema_problem
from schemas.validate_state import Context, Tally
from schemas.vocab import SpecialIds, Vocab

REQUIRED_CONFIG = (
    "max_seq_length",
    "max_predictions_per_seq",
    "masked_lm_prob",
    "short_seq_prob",
    "dupe_factor",
    "random_next_prob",
    "whole_word_mask",
)


def check_schema(ctx: Context) -> None:
    m, t = ctx.manifest, ctx.checks["schema"]
    t.ran = True
    t.summary = f"{m.schema_name} version {m.schema_version}"
    problem = schema_problem(m.schema_name, m.schema_version)
    if problem:
        t.fail(
            f"{MANIFEST_NAME}: {problem}; rebuild the shards with this version or validate them "
            "with the matching release"
        )


def check_vocab(ctx: Context) -> None:
    """`vocab.txt` as the manifest describes it; kept in the context only when it is."""
    m, t = ctx.manifest, ctx.checks["vocab"]
    t.ran = True
    vocab = _load_vocab(ctx.directory, t)
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


def _load_vocab(directory: str, t: Tally) -> Vocab | None:
    try:
        return Vocab.load(os.path.join(directory, VOCAB_NAME))
    except FileNotFoundError:
        t.fail(f"{VOCAB_NAME}: missing; the shards' ids mean nothing without it: rebuild the set")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        t.fail(f"{VOCAB_NAME}: unreadable ({e})")
    return None


def _compare_vocab(vocab: Vocab, m: Manifest, t: Tally) -> None:
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


def _check_tokenizer_json(ctx: Context, vocab: Vocab) -> None:
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


def check_config(ctx: Context) -> None:
    """The config's keys and ranges; when sound, the row rules it implies."""
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
            _build_rules(ctx)
    c = m.config
    t.summary = ", ".join(f"{k}={c[k]}" for k in REQUIRED_CONFIG if k in c)


def _build_rules(ctx: Context) -> None:
    m = ctx.manifest
    size = ctx.vocab and len(ctx.vocab) or m.vocab_size
    try:
        specials = SpecialIds.from_dict(m.special_ids)
        ctx.rules = RowRules.build(ctx.vocab, size, specials, m.config)
    except (KeyError, ValueError, TypeError, IndexError) as e:
        ctx.checks["vocab"].fail(f"{MANIFEST_NAME}: special ids unusable ({e})")


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
