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
from schemas.vocab import SPECIAL_TOKENS, SpecialIds, Vocab

TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_NAME = "special_tokens_map.json"
SPECIAL_TOKEN_KEYS = {  # the names transformers gives the special pieces, as the pipeline writes
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


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
        repeat = _repeated_piece(vocab)
        if repeat:
            t.fail(repeat)
        else:
            _check_tokenizer_json(ctx, vocab)
        _check_tokenizer_config(ctx)
    t.summary = (
        f"{m.vocab_size:,} pieces, sha256 {m.vocab_sha256[:12]}, "
        f"specials {json.dumps(m.special_ids, sort_keys=True)}"
    )


def _repeated_piece(vocab: Vocab) -> str:
    """The first line of vocab.txt that repeats an earlier piece, in one line, or "": a piece
    has one id, so the later line could never be produced."""
    seen: dict[str, int] = {}
    for i, piece in enumerate(vocab.pieces):
        if piece in seen:
            return (
                f"{VOCAB_NAME}: line {i + 1} repeats piece {piece!r} of line {seen[piece] + 1}; "
                "a piece has one id: restore the vocab the shards were built with"
            )
        seen[piece] = i
    return ""


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
    """`tokenizer.json` as the pipeline writes it: the vocab's pieces at their ids, the special
    pieces among its added tokens at theirs, and the set's casing in its normalizer. A trainer
    tokenizes its own text with this file, so any disagreement is a silent mismatch there."""
    t = ctx.checks["vocab"]
    path = storage.join(ctx.directory, TOKENIZER_NAME)
    try:
        doc = json.loads(storage.read_text(path))
    except FileNotFoundError:
        t.fail(f"{TOKENIZER_NAME}: missing; it belongs beside {VOCAB_NAME}: rebuild the set")
        return
    except (OSError, ValueError) as e:
        t.fail(f"{TOKENIZER_NAME}: not a WordPiece tokenizer file ({type(e).__name__}: {e})")
        return
    model = doc.get("model") if isinstance(doc, dict) else None
    pieces = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(pieces, dict):
        t.fail(
            f"{TOKENIZER_NAME}: not a WordPiece tokenizer file (model.vocab is "
            f"{type(pieces).__name__}, not an object of piece: id); rebuild the set"
        )
        return
    for line in (
        _pieces_problem(pieces, vocab)
        or _added_tokens_problem(doc.get("added_tokens"), vocab)
        or _casing_problem(doc.get("normalizer"), ctx.manifest.config)
    ):
        t.fail(line)


def _pieces_problem(pieces: dict, vocab: Vocab) -> list[str]:
    if len(pieces) != len(vocab):
        return [f"{TOKENIZER_NAME}: {len(pieces):,} pieces, {VOCAB_NAME} {len(vocab):,}"]
    index = vocab.index
    for piece, i in pieces.items():
        if index.get(piece) != i or isinstance(i, bool):
            return [
                f"{TOKENIZER_NAME}: piece {piece!r} has id {i!r} there, {index.get(piece)} in "
                f"{VOCAB_NAME}; the two files come from different vocabs"
            ]
    return []


def _added_tokens_problem(added: object, vocab: Vocab) -> list[str]:
    """Every special piece among the added tokens, each at its id in the vocab: a tokenizer
    that lacks one splits the literal text of it into ordinary pieces."""
    if not isinstance(added, list) or not all(isinstance(a, dict) for a in added):
        return [f"{TOKENIZER_NAME}: added_tokens is not a list of objects; rebuild the set"]
    found = {a.get("content"): a.get("id") for a in added}
    index = vocab.index
    for token in SPECIAL_TOKENS:
        if found.get(token) != index[token] or isinstance(found.get(token), bool):
            return [
                f"{TOKENIZER_NAME}: added_tokens give {token} the id {found.get(token)!r}, "
                f"{VOCAB_NAME} {index[token]}; rebuild the set"
            ]
    for a in added:
        if index.get(a.get("content")) != a.get("id"):
            return [
                f"{TOKENIZER_NAME}: added token {a.get('content')!r} has id {a.get('id')!r}, "
                f"{VOCAB_NAME} {index.get(a.get('content'))}; rebuild the set"
            ]
    return []


def _casing_problem(normalizer: object, config: object) -> list[str]:
    """The normalizer lowercases exactly when the set's text was lowercased."""
    lowercase = config.get("lowercase") if isinstance(config, dict) else None
    if not isinstance(lowercase, bool):
        return []  # the config check reports it
    got = normalizer.get("lowercase") if isinstance(normalizer, dict) else None
    if got is not lowercase:
        return [
            f"{TOKENIZER_NAME}: normalizer.lowercase is {json.dumps(got)}, the set's config "
            f"lowercase is {json.dumps(lowercase)}; a trainer would tokenize its text with "
            "other casing than the shards: rebuild the set"
        ]
    return []


def _check_tokenizer_config(ctx: Context) -> None:
    """`tokenizer_config.json` and `special_tokens_map.json`, when the set has them (the
    pipeline writes both; older sets lack them): the set's casing and the special pieces' names,
    which `AutoTokenizer.from_pretrained(OUT)` takes from them."""
    t, config = ctx.checks["vocab"], ctx.manifest.config
    for name in (TOKENIZER_CONFIG_NAME, SPECIAL_TOKENS_MAP_NAME):
        try:
            doc = json.loads(storage.read_text(storage.join(ctx.directory, name)))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            t.fail(f"{name}: unreadable ({type(e).__name__}: {e}); rebuild the set")
            continue
        if not isinstance(doc, dict):
            t.fail(f"{name}: not a JSON object; rebuild the set")
            continue
        for key, piece in SPECIAL_TOKEN_KEYS.items():
            if doc.get(key) != piece:
                t.fail(f"{name}: {key} is {doc.get(key)!r}, not {piece!r}; rebuild the set")
        lowercase = config.get("lowercase") if isinstance(config, dict) else None
        if name == TOKENIZER_CONFIG_NAME and isinstance(lowercase, bool):
            if doc.get("do_lower_case") is not lowercase:
                t.fail(
                    f"{name}: do_lower_case is {json.dumps(doc.get('do_lower_case'))}, the set's "
                    f"config lowercase is {json.dumps(lowercase)}; rebuild the set"
                )


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
