"""Synthetic shard sets that follow the build's statistics, for tests and benchmarks.

The rows are not text, but they obey the contract exactly as the pipeline does: `[CLS] A [SEP]
B [SEP]`, the reference's count of masked positions, 80/10/10 masking with replacements drawn
from the non-special pieces, whole-word masking on request, one target length per document pass
(short with probability `short_seq_prob`), and B from another document with probability
`random_next_prob`. Document passes land in shards at random, as the pipeline's buckets do.
Use it to exercise the validator, the inspector and loaders without running the pipeline.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from schemas.config import ShardConfig
from schemas.manifest import (
    SHARDS_DIR,
    Manifest,
    ShardEntry,
    atomic_write_bytes,
    atomic_write_text,
    shard_name,
)
from schemas.masking import MaskingRule, mask_flat
from schemas.reader import TOKENIZER_NAME, VOCAB_NAME
from schemas.shard import ShardColumns, shard_metadata, shard_to_bytes
from schemas.vocab import SPECIAL_TOKENS, Vocab, bert_normalizer

SENTENCE_PIECES = 24  # a typical English sentence, in WordPieces


@dataclass(frozen=True)
class SyntheticConfig:
    rows: int = 4000  # about this many rows in all (whole document passes)
    shards: int = 4  # buckets; document passes are spread over them at random
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    random_next_prob: float = 0.5
    dupe_factor: int = 5
    whole_word_mask: bool = False
    vocab_size: int = 2000  # pieces, specials included
    google_layout: bool = False  # specials at 0/100/101/102/103, as Google's released vocab
    rows_per_pass: int = 8  # mean rows a full-length document pass yields
    rows_per_batch: int = 4096  # Arrow record batch size
    seed: int = 0

    def __post_init__(self):
        if self.rows < 1 or self.shards < 1 or self.dupe_factor < 1:
            raise ValueError("rows, shards and dupe_factor must be >= 1")
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5 (got {self.max_seq_length})")
        if self.vocab_size < 120:
            raise ValueError(f"vocab_size must be >= 120 (got {self.vocab_size})")

    def build_config(self) -> dict:
        """The build config as the pipeline records it (the keys the validator reads)."""
        return {
            "max_seq_length": self.max_seq_length,
            "max_predictions_per_seq": self.max_predictions_per_seq,
            "masked_lm_prob": self.masked_lm_prob,
            "short_seq_prob": self.short_seq_prob,
            "dupe_factor": self.dupe_factor,
            "random_next_prob": self.random_next_prob,
            "whole_word_mask": self.whole_word_mask,
            "seed": self.seed,
            "lowercase": True,
        }


def synthetic_vocab(size: int, google_layout: bool = False) -> Vocab:
    """Specials, some `[unusedN]`, whole-word pieces `wN` and continuation pieces `##cN`."""
    if google_layout:
        head = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + list(SPECIAL_TOKENS[1:])
    else:
        head = list(SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(10)]
    rest = size - len(head)
    n_cont = rest // 4
    pieces = head + [f"w{i}" for i in range(rest - n_cont)] + [f"##c{i}" for i in range(n_cont)]
    return Vocab(tuple(pieces))


def tokenizer_json_text(vocab: Vocab) -> str:
    """A `tokenizer.json` (HF tokenizers format) for a WordPiece vocab."""
    specials = vocab.special_ids
    added = [
        {
            "id": vocab.index[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    ]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", **bert_normalizer(lowercase=True)},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "BertProcessing",
            "sep": ["[SEP]", specials.sep],
            "cls": ["[CLS]", specials.cls],
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {p: i for i, p in enumerate(vocab.pieces)},
        },
    }
    return json.dumps(doc, ensure_ascii=False)


@dataclass(frozen=True)
class _Rows:
    """Unmasked rows: lengths, B starts, random-next labels, shard and short flag per row."""

    lengths: np.ndarray
    b_start: np.ndarray
    random_next: np.ndarray
    shard: np.ndarray
    short: np.ndarray
    documents: int


def _plan_rows(cfg: SyntheticConfig, rng: np.random.Generator) -> _Rows:
    """Row lengths per document pass: a full pass aims at max_seq_length - 3 pieces, a short
    one at a uniform target in [2, max_seq_length - 3] and, like the reference, yields more
    (shorter) rows; a row holds at least one sentence, and each pass's last row is cut short
    where the document ends."""
    max_tokens = cfg.max_seq_length - 3
    sentence = min(SENTENCE_PIECES, max_tokens)
    documents = max(1, -(-cfg.rows // (cfg.rows_per_pass * cfg.dupe_factor)))
    passes = documents * cfg.dupe_factor
    short = rng.random(passes) < cfg.short_seq_prob
    target = np.where(short, rng.integers(2, max_tokens + 1, passes), max_tokens)
    target = np.maximum(target, sentence)
    doc_tokens = rng.integers(1, 2 * cfg.rows_per_pass, documents) * max_tokens
    per_pass = np.maximum(1, np.repeat(doc_tokens, cfg.dupe_factor) // target)
    pass_of = np.repeat(np.arange(passes), per_pass)
    last = np.cumsum(per_pass) - 1
    body = target[pass_of]
    body[last] = np.minimum(body[last], rng.integers(2, max_tokens + 1, passes))
    # A sentence boundary rarely falls exactly on the target: overshoot, then truncate.
    body = np.minimum(body + rng.integers(0, sentence, len(pass_of)), max_tokens)
    len_a = rng.integers(1, body)
    shard_of_pass = rng.integers(cfg.shards, size=passes)
    return _Rows(
        lengths=body + 3,
        b_start=len_a + 2,
        random_next=rng.random(len(pass_of)) < cfg.random_next_prob,
        shard=shard_of_pass[pass_of],
        short=short[pass_of],
        documents=documents,
    )


def _pieces(lengths: np.ndarray, vocab: Vocab, rng: np.random.Generator) -> np.ndarray:
    """Flat ids: a word piece starts every word, a quarter of the rest continue a word."""
    dtype = np.dtype(vocab.id_type)
    ordinary = np.flatnonzero(~vocab.special_mask() & ~vocab.continuation_mask()).astype(dtype)
    continuation = np.flatnonzero(vocab.continuation_mask()).astype(dtype)
    total = int(lengths.sum())
    ids = ordinary[rng.integers(len(ordinary), size=total, dtype=np.int32)]
    cont = rng.random(total, dtype=np.float32) < 0.25
    ids[cont] = continuation[rng.integers(len(continuation), size=int(cont.sum()), dtype=np.int32)]
    return ids


def _frame(
    ids: np.ndarray, off: np.ndarray, b_start: np.ndarray, vocab: Vocab, rng: np.random.Generator
) -> None:
    """Write [CLS] and the two [SEP] in place; the piece after each starts a word."""
    sp = vocab.special_ids
    ordinary = np.flatnonzero(~vocab.special_mask() & ~vocab.continuation_mask())
    sep1 = off[:-1] + b_start - 1
    ids[off[:-1]] = sp.cls
    ids[sep1] = sp.sep
    ids[off[1:] - 1] = sp.sep
    ids[off[:-1] + 1] = ordinary[rng.integers(len(ordinary), size=len(sep1))]
    ids[sep1 + 1] = ordinary[rng.integers(len(ordinary), size=len(sep1))]


def shard_columns(
    rows: _Rows, cfg: SyntheticConfig, vocab: Vocab, rng: np.random.Generator
) -> ShardColumns:
    """Pieces and masks for planned rows (in their order); masked by `schemas.masking`, the
    rule the pipeline and the loader apply."""
    off = np.r_[0, np.cumsum(rows.lengths)].astype(np.int64)
    ids = _pieces(rows.lengths, vocab, rng)
    _frame(ids, off, rows.b_start, vocab, rng)
    masked = mask_flat(
        ids,
        off,
        rows.b_start,
        MaskingRule.from_vocab(vocab, ShardConfig.parse(cfg.build_config())),
        rng,
    )
    return ShardColumns(
        masked.ids,
        off,
        rows.b_start.astype(np.uint16),
        masked.positions.astype(np.uint16),
        masked.labels,
        masked.offsets,
        rows.random_next,
    )


def _subset(rows: _Rows, index: np.ndarray) -> _Rows:
    pick = {
        f: getattr(rows, f)[index] for f in ("lengths", "b_start", "random_next", "shard", "short")
    }
    return _Rows(**pick, documents=rows.documents)


def write_shard_file(
    directory: str,
    rel: str,
    cols: ShardColumns,
    vocab: Vocab,
    config: dict,
    short_rows: int,
    rows_per_batch: int = 4096,
) -> ShardEntry:
    """Write one shard (temporary name, then rename) and return its manifest entry."""
    metadata = shard_metadata(vocab.sha256, len(vocab), vocab.special_ids.to_dict(), config)
    data = shard_to_bytes(cols.to_table(vocab.id_type, metadata), rows_per_batch)
    path = os.path.join(directory, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write_bytes(path, data)
    return ShardEntry.describe(rel, data, cols, short_rows=short_rows)


def write_synthetic_set(directory: str, cfg: SyntheticConfig) -> Manifest:
    """Write a complete shard set (vocab, tokenizer.json, shards, manifest last); pieces and
    masks are made one shard at a time, so memory follows the shard size."""
    rng = np.random.default_rng(cfg.seed)
    vocab = synthetic_vocab(cfg.vocab_size, cfg.google_layout)
    plan = _plan_rows(cfg, rng)
    os.makedirs(os.path.join(directory, SHARDS_DIR), exist_ok=True)
    atomic_write_text(os.path.join(directory, VOCAB_NAME), vocab.to_text())
    atomic_write_text(os.path.join(directory, TOKENIZER_NAME), tokenizer_json_text(vocab))
    used = [s for s in range(cfg.shards) if np.any(plan.shard == s)]
    entries = []
    for k, s in enumerate(used):
        rows = _subset(plan, rng.permutation(np.flatnonzero(plan.shard == s)))
        rel = f"{SHARDS_DIR}/{shard_name(k, len(used))}"
        cols = shard_columns(rows, cfg, vocab, rng)
        entries.append(
            write_shard_file(
                directory,
                rel,
                cols,
                vocab,
                cfg.build_config(),
                int(rows.short.sum()),
                cfg.rows_per_batch,
            )
        )
    manifest = Manifest(
        shards=tuple(entries),
        config=cfg.build_config(),
        vocab_sha256=vocab.sha256,
        vocab_size=len(vocab),
        special_ids=vocab.special_ids.to_dict(),
        counts={"total": {"documents_used": plan.documents, "instances": len(plan.lengths)}},
    )
    manifest.write(directory)
    return manifest
