"""The masking rule of the shard contract (docs/design.md, "Instances"), the one implementation
that the pipeline (whole buckets), the synthetic writer (whole shards) and the model's loader
(dynamic re-masking of padded batches) all call.

The rule, per row of `length` pieces:

- candidates are every position but padding and the three frame positions `[CLS]` (0), the
  first `[SEP]` (`segment_b_start - 1`) and the last `[SEP]` (`length - 1`). They are decided
  by *position*, never by id: the validator checks positions, and the pipeline turns special
  ids written in the text into `[UNK]`, so on a valid row the two views agree;
- the budget is `min(max_predictions_per_seq, max(1, round(length * masked_lm_prob)))`
  (Python's round, half to even, as the reference's `int(round(x))`), never more than the
  candidates;
- units are candidate positions, or with whole-word masking words: a candidate piece and the
  `##` candidate pieces right after it (a word never spans a `[SEP]`). Units are visited in
  random order and each is taken when it fits what is left of the budget (the reference's
  greedy: without whole-word masking every row gets exactly its budget);
- a taken unit becomes `[MASK]` (80%), a random non-special piece (10%) or stays (10%),
  decided once per unit (per word with whole-word masking).

`mask_padded` masks a padded 2-D batch; `mask_flat` masks rows laid end to end (the shards'
layout) by padding them into grids of `FLAT_BLOCK_ROWS` rows and calling the same code. Every
function that draws takes a `numpy.random.Generator`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from schemas.config import ShardConfig
from schemas.vocab import Vocab

FLAT_BLOCK_ROWS = 1024  # rows per grid in mask_flat: bounds its memory, keeps grids in cache
_POSITION_BITS = 20  # sort keys: unit score << 20 | position (rows up to a million pieces)
_SCORES = 1 << 32  # unit scores are uniform in [0, 2**32)
_NOT_A_CANDIDATE = _SCORES  # the score of padding and frame positions: after every unit


def num_to_predict(lengths: np.ndarray, masked_lm_prob: float, max_predictions: int) -> np.ndarray:
    """The reference's count per row: min(max_predictions, max(1, round(len * prob))), with
    `len` the full row length; numpy's rint rounds half to even, as Python's round() does.
    Never more than the candidates (all positions but [CLS] and the two [SEP])."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = np.rint(lengths.astype(np.float64) * masked_lm_prob).astype(np.int64)
    n = np.minimum(max_predictions, np.maximum(1, n))
    return np.minimum(n, np.maximum(lengths - 3, 0))


@dataclass(frozen=True, eq=False)
class TokenSpec:
    """What building and masking rows need from the vocab; ids are looked up, never assumed."""

    cls: int
    sep: int
    mask: int
    replacements: np.ndarray  # ids a random replacement may take: the non-special pieces
    continuation: np.ndarray  # bool per id: a `##` piece, which continues the previous word

    @classmethod
    def from_vocab(cls, vocab: Vocab) -> TokenSpec:
        sp = vocab.special_ids
        return cls(
            cls=sp.cls,
            sep=sp.sep,
            mask=sp.mask,
            replacements=np.flatnonzero(~vocab.special_mask()),
            continuation=vocab.continuation_mask(),
        )


@dataclass(frozen=True, eq=False)
class MaskingRule:
    """Everything masking needs: the build config's three masking keys and the vocab's ids."""

    max_predictions: int  # max_predictions_per_seq
    masked_lm_prob: float  # share of a row's pieces selected for prediction
    whole_word: bool  # whole_word_mask: a word's pieces are taken together, one 80/10/10 choice
    tokens: TokenSpec

    def __post_init__(self):
        if self.max_predictions < 1:
            raise ValueError(f"masking: max_predictions must be >= 1 (got {self.max_predictions})")
        if not 0 < self.masked_lm_prob <= 1:
            raise ValueError(
                f"masking: masked_lm_prob must be in (0, 1] (got {self.masked_lm_prob})"
            )
        if len(self.tokens.replacements) == 0:
            raise ValueError(
                "masking: no piece may replace a masked one; the vocab is all specials"
            )
        continuation = self.tokens.continuation
        if continuation.dtype != bool or continuation.ndim != 1:
            raise ValueError("masking: continuation must be one bool per vocab id")

    @classmethod
    def from_vocab(cls, vocab: Vocab, config: ShardConfig) -> MaskingRule:
        """From a vocab and the build config's masking settings."""
        return cls(
            max_predictions=config.max_predictions_per_seq,
            masked_lm_prob=config.masked_lm_prob,
            whole_word=config.whole_word_mask,
            tokens=TokenSpec.from_vocab(vocab),
        )


class MaskedRows(NamedTuple):
    """Masked flat rows: ids, then per row its masked positions (ascending, within the row)
    and their original ids, row r's entries at [offsets[r], offsets[r + 1])."""

    ids: np.ndarray
    positions: np.ndarray  # int64
    labels: np.ndarray  # the ids' dtype
    offsets: np.ndarray  # int64, rows + 1


def candidates(lengths: np.ndarray, b_start: np.ndarray, width: int) -> np.ndarray:
    """(rows, width) bool: the positions masking may select (not padding, not a frame position)."""
    col = np.arange(width)
    lengths = np.asarray(lengths, dtype=np.int64)[:, None]
    b_start = np.asarray(b_start, dtype=np.int64)[:, None]
    return (col > 0) & (col < lengths - 1) & (col != b_start - 1)


def mask_padded(
    ids: np.ndarray,
    lengths: np.ndarray,
    b_start: np.ndarray,
    rule: MaskingRule,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Mask a padded batch of original ids (rows, width), row r holding `lengths[r]` pieces with
    B from `b_start[r]`: (masked ids, labels: int64, the original id where chosen, else -1)."""
    chosen, where, u = _select(ids, lengths, b_start, rule, rng)
    out = ids.copy(order="C")
    _replace(out.reshape(-1), where, u, rule, rng)
    return out, np.where(chosen, ids.astype(np.int64, copy=False), -1)


def mask_flat(
    ids: np.ndarray,
    offsets: np.ndarray,
    b_start: np.ndarray,
    rule: MaskingRule,
    rng: np.random.Generator,
    block_rows: int = FLAT_BLOCK_ROWS,
) -> MaskedRows:
    """Mask rows laid end to end (row r is ids[offsets[r]:offsets[r + 1]], B from b_start[r])."""
    rows = len(offsets) - 1
    if len(b_start) != rows or (rows and offsets[-1] != len(ids)):
        raise ValueError(
            f"masking: {rows} rows by their offsets (ending at {offsets[-1]}), "
            f"{len(b_start)} B starts and {len(ids)} ids do not describe the same rows"
        )
    lengths = np.diff(offsets)
    out = ids.copy()
    parts, cols, counts = [], [], np.zeros(rows, np.int64)
    for lo in range(0, rows, block_rows):
        hi = min(lo + block_rows, rows)
        n = lengths[lo:hi]
        width = int(n.max()) if len(n) else 0
        if rule.whole_word:  # words are read from the ids, laid out in the grid
            valid = np.arange(width) < n[:, None]
            grid = np.full(valid.shape, rule.tokens.cls, ids.dtype)  # padding is no candidate
            grid[valid] = ids[offsets[lo] : offsets[hi]]
        else:  # only the grid's shape is read
            grid = np.broadcast_to(np.zeros(1, ids.dtype), (hi - lo, width))
        _, cells, u = _select(grid, n, b_start[lo:hi], rule, rng)
        # a chosen cell (row r, column c) is the id at offsets[lo + r] + c: ascending, as the
        # cells are row by row
        row, col = np.divmod(cells, width) if width else (cells, cells)
        where = offsets[lo:hi][row] + col
        _replace(out, where, u, rule, rng)
        parts.append(where)
        cols.append(col)  # the positions within the rows
        counts[lo:hi] = np.bincount(row, minlength=hi - lo)
    where = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    positions = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    masked_offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(counts, out=masked_offsets[1:])
    return MaskedRows(out, positions, ids[where], masked_offsets)


def _select(
    ids: np.ndarray,
    lengths: np.ndarray,
    b_start: np.ndarray,
    rule: MaskingRule,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chosen positions of a padded batch: (chosen grid, their flat indices ascending, the
    80/10/10 draw of each, shared by the pieces of a word)."""
    t = ids.shape[1]
    if t >= 1 << _POSITION_BITS:
        raise ValueError(f"masking: rows of {t} pieces exceed {1 << _POSITION_BITS}")
    budget = num_to_predict(lengths, rule.masked_lm_prob, rule.max_predictions)
    if t == 0:
        return np.zeros(ids.shape, bool), np.zeros(0, np.int64), np.zeros(0)
    if rule.whole_word:
        cand = candidates(lengths, b_start, t)
        return _select_words(ids, cand, budget, rule.tokens.continuation, rng)
    # A uniform key per position, the position in its low bits; a row takes its `budget`
    # smallest (keys are distinct). In place: this is the hot path of dynamic re-masking.
    col = np.arange(t)
    key = rng.integers(0, _SCORES, size=ids.shape, dtype=np.uint32).astype(np.int64)
    key <<= _POSITION_BITS
    key |= col
    # What `candidates` excludes sorts after every candidate: from the last [SEP] on (padding
    # too), then [CLS] and the first [SEP], one cell per row.
    last = np.asarray(lengths, dtype=np.int64) - 1
    np.copyto(key, _NOT_A_CANDIDATE << _POSITION_BITS | col, where=col >= last[:, None])
    key[:, 0] = _NOT_A_CANDIDATE << _POSITION_BITS
    sep = np.asarray(b_start, dtype=np.int64) - 1
    rows = np.flatnonzero((sep >= 0) & (sep < t))
    key[rows, sep[rows]] = _NOT_A_CANDIDATE << _POSITION_BITS | sep[rows]
    # each row's budget-th smallest key: among its `most` smallest, put in order (budgets are
    # at most `max_predictions`; partitioning is linear where sorting a whole row is not)
    most = min(int(budget.max(initial=0)), t) or 1
    smallest = np.partition(key, most - 1, axis=1)[:, :most] if most < t else key.copy()
    smallest.sort(axis=1)
    kth = np.take_along_axis(smallest, np.maximum(budget - 1, 0)[:, None], axis=1)
    # A budget never exceeds a row's candidates (`num_to_predict`), so every key up to the
    # budget-th is a candidate's; a row with no budget takes none.
    kth[budget == 0] = -1
    chosen = key <= kth
    where = np.flatnonzero(chosen)
    return chosen, where, rng.random(len(where))


def _select_words(
    ids: np.ndarray,
    cand: np.ndarray,
    budget: np.ndarray,
    continuation: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whole-word selection: the words of each row (a candidate piece and the `##` candidates
    right after it) in random order, each taken when it fits what is left of the budget."""
    b, t = cand.shape
    pieces = np.flatnonzero(cand)  # row-major: a word's pieces are adjacent
    # A word starts at every piece but a `##` one right after a candidate (position 0 is never
    # a candidate, so `pieces - 1` stays in the row).
    first = ~(continuation[ids.ravel()[pieces]] & cand.ravel()[pieces - 1])
    word = np.cumsum(first) - 1  # each piece's word, numbered row-major
    size = np.bincount(word, minlength=int(word[-1]) + 1 if len(word) else 0)  # pieces per word
    # Words per row, and each word's cell in a (rows, most words + 1) grid; the extra column
    # stands for "no word" and never fits.
    row_pieces = np.zeros(b + 1, np.int64)
    np.cumsum(cand.sum(axis=1), out=row_pieces[1:])
    row_words = np.r_[0, word + 1][row_pieces]
    per_row = np.diff(row_words)
    width = int(per_row.max(initial=0)) + 1
    slot = np.arange(len(size)) - np.repeat(row_words[:-1], per_row)
    cell = slot + np.repeat(np.arange(b) * width, per_row)
    # Sorting (score, slot) per row visits each row's words in random order.
    score = rng.integers(0, _SCORES, size=len(size), dtype=np.uint32).astype(np.int64)
    key = np.full(b * width, _NOT_A_CANDIDATE << _POSITION_BITS | (width - 1))
    key[cell] = score << _POSITION_BITS | slot
    key = np.sort(key.reshape(b, width), axis=1)
    visit = (key & ((1 << _POSITION_BITS) - 1)) + np.arange(b)[:, None] * width  # cells
    sizes = np.full(b * width, t + 1, np.int64)
    sizes[cell] = size
    taken = np.zeros(b * width, bool)
    taken[visit[_fill_budget(sizes[visit], budget)]] = True
    piece_taken = taken[cell][word]
    where = pieces[piece_taken]
    chosen = np.zeros(b * t, bool)
    chosen[where] = True
    # One 80/10/10 draw per taken word, shared by its pieces.
    taken_word = word[piece_taken]
    new = np.ones(len(taken_word), bool)
    new[1:] = taken_word[1:] != taken_word[:-1]
    u = rng.random(int(new.sum()))[np.cumsum(new) - 1]
    return chosen.reshape(b, t), where, u


def _fill_budget(sizes: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """The reference's greedy, for every row at once: visiting units (word sizes, in visiting
    order) take one when it fits what is left of the budget, else skip it. Each pass takes
    the longest run of open units that fits and closes those that no longer can, so a few
    passes suffice; rows with nothing left to fit drop out. Returns which units are taken."""
    taken = np.zeros(sizes.shape, bool)
    rows, remaining = np.arange(len(budget)), budget.astype(np.int64)
    open_ = sizes <= remaining[:, None]
    while True:
        active = open_.any(axis=1)
        if not active.all():
            rows, sizes, open_, remaining = (x[active] for x in (rows, sizes, open_, remaining))
        if len(rows) == 0:
            return taken
        through = np.cumsum(sizes * open_, axis=1)
        take = open_ & (through <= remaining[:, None])
        taken[rows] |= take
        remaining = remaining - (sizes * take).sum(axis=1)
        open_ &= ~take & (sizes <= remaining[:, None])


def _replace(
    flat: np.ndarray, where: np.ndarray, u: np.ndarray, rule: MaskingRule, rng: np.random.Generator
) -> None:
    """In place: [MASK] where u < 0.8, a random non-special piece where 0.8 <= u < 0.9."""
    tokens = rule.tokens
    flat[where[u < 0.8]] = tokens.mask
    swap = where[(u >= 0.8) & (u < 0.9)]
    flat[swap] = tokens.replacements[rng.integers(len(tokens.replacements), size=len(swap))]
