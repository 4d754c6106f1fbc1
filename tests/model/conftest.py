"""Synthetic shard sets for the model tests, written with `schemas` alone (never the pipeline).

The rows are learnable: segment A is a run of consecutive words from a fixed cycle; an
actual-next B continues the run, a random-next B starts elsewhere in the cycle. A model can learn
the masked words from their neighbours and the NSP label from the seam between A and B.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from schemas.config import ShardConfig
from schemas.manifest import SHARDS_DIR, Manifest, ShardEntry, shard_name
from schemas.masking import MaskingRule, mask_flat
from schemas.shard import META_SCHEMA_VERSION, ShardColumns, shard_metadata, shard_to_bytes
from schemas.vocab import Vocab

WORDS = (
    "the a is was in at of and to who where what does did good great bad awful movie film "
    "plot actor john smith mary jones paris london berlin rome lives works visited google acme "
    "city river north south east west red green blue old new big small day night one two three "
    "four five six seven eight nine ten"
).split()
PIECES = ("##s", "##ed", "##ing", ".", ",", "?")
VOCAB = Vocab(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]") + tuple(WORDS) + PIECES
)
FIRST_WORD = 7  # id of WORDS[0]
CONFIG = {
    "max_seq_length": 64,
    "max_predictions_per_seq": 10,
    "masked_lm_prob": 0.15,
    "short_seq_prob": 0.1,
    "dupe_factor": 1,
    "seed": 0,
    "whole_word_mask": False,
    "lowercase": True,
    "random_next_prob": 0.5,
}


def synthetic_row(rng: np.random.Generator, max_len: int) -> tuple[list[int], int, bool]:
    """(unmasked ids, B's start, is_random_next) for one learnable instance."""
    sp, n = VOCAB.special_ids, len(WORDS)
    length = int(rng.integers(16, max_len + 1))
    a = int(rng.integers(3, length - 3 - 3 + 1))
    b = length - 3 - a
    start = int(rng.integers(n))
    random_next = bool(rng.random() < 0.5)
    b_start = (start + a + int(rng.integers(3, n - 3))) % n if random_next else (start + a) % n
    words_a = [FIRST_WORD + (start + i) % n for i in range(a)]
    words_b = [FIRST_WORD + (b_start + i) % n for i in range(b)]
    return [sp.cls, *words_a, sp.sep, *words_b, sp.sep], a + 2, random_next


def shard_columns(rows: int, seed: int, max_len: int) -> ShardColumns:
    """`rows` learnable rows, masked by the contract's rule (`schemas.masking`)."""
    rng = np.random.default_rng(seed)
    made = [synthetic_row(rng, max_len) for _ in range(rows)]
    offsets = np.r_[0, np.cumsum([len(ids) for ids, _, _ in made])].astype(np.int64)
    ids = np.array([t for row, _, _ in made for t in row], np.uint16)
    b_start = np.array([b for _, b, _ in made], np.uint16)
    masked = mask_flat(
        ids, offsets, b_start, MaskingRule.from_vocab(VOCAB, ShardConfig.parse(CONFIG)), rng
    )
    return ShardColumns(
        input_ids=masked.ids,
        input_offsets=offsets,
        segment_b_start=b_start,
        masked_positions=masked.positions.astype(np.uint16),
        masked_labels=masked.labels,
        masked_offsets=masked.offsets,
        is_random_next=np.array([r for _, _, r in made], bool),
    )


def write_shard_set(
    directory: str,
    num_shards: int = 3,
    rows: int = 96,
    seed: int = 0,
    max_len: int = 64,
    vocab: Vocab = VOCAB,
    schema_version: int | None = None,
) -> str:
    """A finished shard set in `directory`: shards/, manifest.json, vocab.txt."""
    os.makedirs(os.path.join(directory, SHARDS_DIR), exist_ok=True)
    config = dict(CONFIG, max_seq_length=max_len, seed=seed)
    metadata = shard_metadata(vocab.sha256, len(vocab), vocab.special_ids.to_dict(), config)
    if schema_version is not None:
        metadata[META_SCHEMA_VERSION] = str(schema_version).encode()
    entries = []
    for i in range(num_shards):
        cols = shard_columns(rows, seed * 1000 + i, max_len)
        data = shard_to_bytes(cols.to_table(vocab.id_type, metadata), rows_per_batch=40)
        path = f"{SHARDS_DIR}/{shard_name(i, num_shards)}"
        with open(os.path.join(directory, path), "wb") as f:
            f.write(data)
        entries.append(
            ShardEntry(
                path=path,
                rows=cols.num_rows,
                bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                tokens=len(cols.input_ids),
                masked_tokens=len(cols.masked_positions),
                random_next=int(cols.is_random_next.sum()),
            )
        )
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write(vocab.to_text())
    Manifest(
        shards=tuple(entries),
        config=config,
        vocab_sha256=vocab.sha256,
        vocab_size=len(vocab),
        special_ids=vocab.special_ids.to_dict(),
    ).write(directory)
    return directory


@pytest.fixture(scope="session")
def shards_dir(tmp_path_factory) -> str:
    """Three shards of 96 learnable rows each, lengths 16..64 (shared, read-only)."""
    return write_shard_set(str(tmp_path_factory.mktemp("shards")))


@pytest.fixture
def make_shards():
    """A factory: make_shards(directory, **write_shard_set options) -> directory."""
    return write_shard_set


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One intra-op thread: the machine's cores are shared, and spinning OpenMP threads on a
    busy machine make tiny models slower, not faster."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def pretrained_run(shards_dir, tmp_path_factory) -> str:
    """A run directory after 60 tiny-model steps on `shards_dir` (last.pt, metrics, vocab)."""
    from model.config import TrainConfig
    from model.pretrain import pretrain

    run = str(tmp_path_factory.mktemp("runs") / "tiny")
    cfg = TrainConfig(
        shards=shards_dir,
        run=run,
        steps=60,
        batch_size=16,
        lr=2e-3,
        warmup=6,
        log_every=10,
        ckpt_every=60,
        eval_batches=5,
    )
    pretrain(cfg)
    return run
