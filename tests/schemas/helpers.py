"""Hand-checked rows that several schemas tests share: an 11-piece vocab, the config they obey,
two sound rows, their columns and the row rules. Test files import from here, never from each
other."""

from __future__ import annotations

import numpy as np

from schemas.config import ShardConfig
from schemas.row_batch import RowRules
from schemas.shard import ShardColumns
from schemas.vocab import Vocab

# [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 the=5 fox=6 jump=7 ##s=8 over=9 dog=10
VOCAB = Vocab(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "fox", "jump", "##s", "over", "dog")
)
CONFIG = {
    "max_seq_length": 16,
    "max_predictions_per_seq": 3,
    "masked_lm_prob": 0.15,
    "whole_word_mask": False,
    "short_seq_prob": 0.1,
    "dupe_factor": 1,
    "random_next_prob": 0.5,
    "lowercase": True,
}


def sound_rows() -> list[dict]:
    return [
        # [CLS] the [MASK→fox] jump ##s [SEP] over [dog→the] dog [SEP]: 2 = round(10 * 0.15)
        {"ids": [2, 5, 4, 7, 8, 3, 9, 10, 10, 3], "b": 6, "pos": [2, 7], "lab": [6, 5]},
        # [CLS] [=dog] [SEP] over [SEP]: 1 = max(1, round(5 * 0.15))
        {"ids": [2, 10, 3, 9, 3], "b": 3, "pos": [1], "lab": [10]},
    ]


def make_columns(rows: list[dict]) -> ShardColumns:
    def offsets(lists):
        return np.r_[0, np.cumsum([len(x) for x in lists])].astype(np.int64)

    return ShardColumns(
        input_ids=np.array([i for r in rows for i in r["ids"]], np.uint16),
        input_offsets=offsets([r["ids"] for r in rows]),
        segment_b_start=np.array([r["b"] for r in rows], np.uint16),
        masked_positions=np.array([p for r in rows for p in r["pos"]], np.uint16),
        masked_labels=np.array([x for r in rows for x in r["lab"]], np.uint16),
        masked_offsets=offsets([r["pos"] for r in rows]),
        is_random_next=np.zeros(len(rows), bool),
    )


def rules(**config) -> RowRules:
    config = ShardConfig.parse({**CONFIG, **config})
    return RowRules.build(VOCAB, len(VOCAB), VOCAB.special_ids, config)
