"""The checks of what the rows are read against: the manifest's schema, the vocab (and
`tokenizer.json` beside it) and the build config. A usable config and vocab become the
context's `RowRules`."""

from __future__ import annotations

import json

from schemas import storage
from schemas.config import REQUIRED_KEYS, ShardConfig, config_version_problem, missing_keys
from schemas.manifest import MANIFEST_NAME, Manifest
from schemas.reader import TOKENIZER_NAME, VOCAB_NAME, load_vocab
from schemas.row_batch import RowRules
from schemas.shard import schema_problem
from schemas.validate.state import Context, Tally
from schemas.vocab import SpecialIds, Vocab


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
        return load_vocab(storage.join(directory, VOCAB_NAME))
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
    path = storage.join(ctx.directory, TOKENIZER_NAME)
    try:
        pieces = json.loads(storage.read_text(path))["model"]["vocab"]
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
    """The config's version, keys and ranges (`schemas.config`); when sound, the row rules it
    implies."""
    m, t = ctx.manifest, ctx.checks["config"]
    t.ran = True
    config = m.config if isinstance(m.config, dict) else {}
    missing = missing_keys(config)
    problem = config_version_problem(m.config_version)
    if problem:
        t.fail(
            f"{MANIFEST_NAME}: {problem}; rebuild the set with this version or validate it with "
            "the matching release"
        )
    elif missing:
        t.fail(f"{MANIFEST_NAME}: config lacks {', '.join(missing)}; the row checks need them")
    else:
        try:
            ctx.config = ShardConfig.parse(config)
        except ValueError as e:
            t.fail(f"{MANIFEST_NAME}: config {e}")
        else:
            _build_rules(ctx)
    t.summary = ", ".join(f"{k}={config[k]}" for k in REQUIRED_KEYS if k in config)


def _build_rules(ctx: Context) -> None:
    m = ctx.manifest
    size = ctx.vocab and len(ctx.vocab) or m.vocab_size
    try:
        specials = SpecialIds.from_dict(m.special_ids)
        ctx.rules = RowRules.build(ctx.vocab, size, specials, ctx.config)
    except (KeyError, ValueError, TypeError, IndexError) as e:
        ctx.checks["vocab"].fail(f"{MANIFEST_NAME}: special ids unusable ({e})")
