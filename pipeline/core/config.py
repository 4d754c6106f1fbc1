"""Frozen, validated configuration for each stage of the build."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

SEED = 12345  # the default seed of every command: instances, the vocab's and Punkt's samples
MAX_SEQ_LENGTH = 128
MASKED_LM_PROB = 0.15


def default_max_predictions(max_seq_length: int, masked_lm_prob: float) -> int:
    """The reference's advice, max_seq_length * masked_lm_prob, rounded up to a multiple of 5:
    20 at 128, 40 at 256, 80 at 512 (the values Google and NVIDIA use)."""
    return max(1, 5 * math.ceil(max_seq_length * masked_lm_prob / 5 - 1e-9))


@dataclass(frozen=True)
class InstanceConfig:
    max_seq_length: int = MAX_SEQ_LENGTH  # [CLS] A [SEP] B [SEP], in pieces
    # cap on masked positions per row: 20, what the length and probability below advise
    max_predictions_per_seq: int = default_max_predictions(MAX_SEQ_LENGTH, MASKED_LM_PROB)
    masked_lm_prob: float = MASKED_LM_PROB  # share of pieces selected for prediction
    short_seq_prob: float = 0.1  # chance a document pass aims for a shorter target length
    dupe_factor: int = 5  # passes over the corpus, each with fresh randomness
    random_next_prob: float = 0.5  # chance B comes from another document
    whole_word_mask: bool = False  # mask all pieces of a word together
    seed: int = SEED  # every draw derives from this

    def __post_init__(self):
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5 (got {self.max_seq_length})")
        if self.max_seq_length > 65535:
            raise ValueError(
                f"max_seq_length must fit uint16 positions (got {self.max_seq_length})"
            )
        if not 0 < self.masked_lm_prob < 1:
            raise ValueError(f"masked_lm_prob must be in (0, 1) (got {self.masked_lm_prob})")
        if not 0 <= self.short_seq_prob <= 1:
            raise ValueError(f"short_seq_prob must be in [0, 1] (got {self.short_seq_prob})")
        if not 0 <= self.random_next_prob <= 1:
            raise ValueError(f"random_next_prob must be in [0, 1] (got {self.random_next_prob})")
        if self.max_predictions_per_seq < 1:
            raise ValueError("max_predictions_per_seq must be >= 1")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be >= 1 (got {self.dupe_factor})")

    @property
    def max_num_tokens(self) -> int:
        return self.max_seq_length - 3

    def to_dict(self) -> dict:
        return asdict(self)


# The largest --vocab-size. WordPiece's trainer (tokenizers) reserves memory for every piece
# asked for before it reads a word: a size of 10^11 could not be allocated and ended the
# worker that trained it, mid-build. 2^24 is far above any BERT vocab (an embedding table of
# 2^24 rows at BERT-base's width of 768 is 48 GiB of float32) and reserves under a gigabyte.
MAX_VOCAB_SIZE = 1 << 24


@dataclass(frozen=True)
class VocabConfig:
    vocab_size: int = 30000  # pieces, specials and alphabet included
    lowercase: bool = True  # uncased BERT: lowercase and strip accents
    sample_sentences: int = 1_000_000  # bound on the sentences the trainer sees
    min_frequency: int = 2  # pieces seen fewer times are not merged
    # characters a trained vocab holds (the most frequent of its sample): Google's English
    # vocab's bound, and that of `tokenizers`' BertWordPieceTokenizer; Chinese, Japanese and
    # corpora of many languages need thousands (docs/inputs.md)
    limit_alphabet: int = 1000
    seed: int = SEED  # draws the sample

    def __post_init__(self):
        if self.vocab_size < 10:
            raise ValueError(f"vocab_size must be >= 10 (got {self.vocab_size})")
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise ValueError(
                f"vocab_size must be <= {MAX_VOCAB_SIZE:,} (got {self.vocab_size:,}): the "
                "trainer reserves memory for every piece asked for before it starts, and "
                "BERT's own vocabs hold 30,522 (English) and 119,547 (multilingual) pieces"
            )
        if self.sample_sentences < 1:
            raise ValueError("sample_sentences must be >= 1")
        if self.limit_alphabet < 1:
            raise ValueError(f"limit_alphabet must be >= 1 (got {self.limit_alphabet})")
