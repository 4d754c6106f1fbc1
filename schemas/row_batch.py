"""What the row rules (`schemas.rows`) read: `RowRules`, the limits every row is held to, and
`RowBatch`, a batch of rows with the arrays several rules share.

A batch is `ShardColumns`: flat numpy buffers plus row offsets. The rules work on whole
buffers, never with a Python loop per row; what more than one rule needs (the pieces at the
masked positions, which positions are in place, which masked pieces continue a word) is
computed once per batch, on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from schemas.config import ShardConfig
from schemas.masking import num_to_predict
from schemas.shard import ShardColumns
from schemas.vocab import SpecialIds, Vocab


@dataclass(frozen=True)
class RowRules:
    """What every row must satisfy, from the vocab and the build config."""

    vocab_size: int
    specials: SpecialIds
    forbidden_label: np.ndarray  # bool per id (+1 for out of vocab): never a label
    special: np.ndarray  # bool per id (+1): never a random replacement
    special_not_mask: np.ndarray  # as `special`, False for [MASK]
    continuation: np.ndarray | None  # bool per id (+1): "##" pieces; None if the vocab is unknown
    max_seq_length: int
    max_predictions: int
    masked_lm_prob: float
    whole_word_mask: bool
    replacements: int  # how many pieces a random replacement may take

    @classmethod
    def build(
        cls, vocab: Vocab | None, size: int, specials: SpecialIds, config: ShardConfig
    ) -> RowRules:
        """From the vocab; without a trustworthy vocab, from the manifest's size and specials."""
        if vocab is not None:
            special = np.r_[vocab.special_mask(), False]
            continuation = np.r_[vocab.continuation_mask(), False]
        else:
            special = np.zeros(size + 1, bool)
            special[[specials.pad, specials.unk, specials.cls, specials.sep, specials.mask]] = True
            continuation = None
        forbidden = special.copy()
        forbidden[specials.unk] = False  # [UNK] stands for text, and text may be selected
        not_mask = special.copy()
        not_mask[specials.mask] = False
        return cls(
            vocab_size=size,
            specials=specials,
            forbidden_label=forbidden,
            special=special,
            special_not_mask=not_mask,
            continuation=continuation,
            max_seq_length=config.max_seq_length,
            max_predictions=config.max_predictions_per_seq,
            masked_lm_prob=config.masked_lm_prob,
            whole_word_mask=config.whole_word_mask,
            replacements=int(size - special[:size].sum()),
        )

    def name(self, i: int) -> str:
        specials = self.specials
        names = {
            specials.pad: "[PAD]",
            specials.unk: "[UNK]",
            specials.cls: "[CLS]",
            specials.sep: "[SEP]",
            specials.mask: "[MASK]",
        }
        return names.get(int(i), f"id {int(i)}")


def take(values: np.ndarray, index: np.ndarray, safe: bool = False) -> np.ndarray:
    """values[index]; unless `safe`, indices are clipped into range (damaged rows)."""
    if len(values) == 0:
        return np.full(len(index), -1, np.int64)
    return values[index] if safe else np.take(values, index, mode="clip")


def count_per_row(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many flags are set in each row (rows given by offsets into `flags`)."""
    running = np.zeros(len(flags) + 1, np.int64)
    np.cumsum(flags, out=running[1:])
    return running[offsets[1:]] - running[offsets[:-1]]


def any_per_row(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Whether any flag is set in each row."""
    if not flags.any():
        return np.zeros(len(offsets) - 1, bool)
    return count_per_row(flags, offsets) > 0


@dataclass
class SpecialCounts:
    """Whole-batch counts of the special pieces, from one comparison pass each."""

    cls: int
    sep: int
    pad: int
    mask: int
    top: int  # the largest id

    @classmethod
    def count(cls, ids: np.ndarray, specials: SpecialIds) -> SpecialCounts:
        return cls(
            cls=int(np.count_nonzero(ids == specials.cls)),
            sep=int(np.count_nonzero(ids == specials.sep)),
            pad=int(np.count_nonzero(ids == specials.pad)),
            mask=int(np.count_nonzero(ids == specials.mask)),
            top=int(ids.max()) if len(ids) else -1,
        )


class RowBatch:
    """A batch of rows and the arrays the rules share. Per row: `lengths`, `segment_b_start`,
    `masks_per_row`; per masked entry (the masked positions of all rows, concatenated):
    `positions`, `in_place` and `masked_pieces` (see `_locate_masks`)."""

    def __init__(self, columns: ShardColumns, rules: RowRules):
        self.columns = columns
        self.rules = rules
        self.num_rows = columns.num_rows
        self.lengths = np.diff(columns.input_offsets)
        self.segment_b_start = columns.segment_b_start.astype(np.int64)
        self.masks_per_row = np.diff(columns.masked_offsets)
        self.specials_seen = SpecialCounts.count(columns.input_ids, rules.specials)
        index = np.int32 if len(columns.input_ids) < 2**31 - 1 else np.int64
        self.positions = columns.masked_positions.astype(index)
        self.misplaced_rows, self.in_place, self.masked_pieces = self._locate_masks(index)

    def _locate_masks(self, index: type) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Rows with a masked position at [CLS] or a [SEP], outside the row or out of order;
        which entries are in place (None: all of them, the common case); the piece at each
        entry (a misplaced one clipped into its row)."""
        per_row = self.masks_per_row
        starts = self.columns.input_offsets[:-1].astype(index)
        flat = np.repeat(starts, per_row)
        flat += self.positions
        first_sep = starts + (self.segment_b_start - 1).astype(index)
        on_sep = flat == np.repeat(first_sep, per_row)
        edge, unordered = self._order_findings()
        in_place = None
        misplaced_rows = np.zeros(self.num_rows, bool)
        if edge.any() or on_sep.any() or unordered.any():
            row_length = np.repeat(self.lengths, per_row)
            pos = self.positions
            misplaced = (pos == 0) | (pos >= row_length - 1) | on_sep | unordered
            in_place = ~misplaced
            flat = np.repeat(starts, per_row) + np.minimum(pos, np.maximum(row_length - 1, 0))
            misplaced_rows = edge | any_per_row(misplaced, self.columns.masked_offsets)
        return misplaced_rows, in_place, take(self.columns.input_ids, flat, in_place is None)

    def _order_findings(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows whose first masked position is 0 or last is at/after the final [SEP] (enough
        when the positions ascend), and entries that do not ascend from the previous one of
        their row."""
        pos, offsets, per_row = self.positions, self.columns.masked_offsets, self.masks_per_row
        step = np.diff(pos)
        inner = offsets[1:-1]
        inner = inner[(inner > 0) & (inner < len(pos))]
        step[inner - 1] = 1  # the first entry of a row has no predecessor
        unordered = np.zeros(len(pos), bool)
        if len(step) and int(step.min()) <= 0:
            unordered[1:] = step <= 0
        has = per_row > 0
        edge = np.zeros(len(per_row), bool)
        first, last = pos[offsets[:-1][has]], pos[offsets[1:][has] - 1]
        edge[has] = (first == 0) | (last >= self.lengths[has] - 1)
        return edge, unordered

    @cached_property
    def expected_masks(self) -> np.ndarray:
        """Per row, the masked positions the reference's formula gives for its length."""
        rules = self.rules
        return num_to_predict(self.lengths, rules.masked_lm_prob, rules.max_predictions)

    @cached_property
    def segment_broken(self) -> np.ndarray:
        """Per row: segment_b_start leaves A or B empty, or lies outside the row."""
        return (self.segment_b_start < 3) | (self.segment_b_start > self.lengths - 2)

    @cached_property
    def frames_indexable(self) -> bool:
        """Every row is long enough to read its [CLS] and [SEP] positions without clipping."""
        return not self.segment_broken.any()

    @cached_property
    def is_mask(self) -> np.ndarray:
        """Per masked entry: the row holds [MASK] there."""
        return self.masked_pieces == self.rules.specials.mask

    @cached_property
    def label_index(self) -> np.ndarray:
        """The labels, those outside the vocab as `vocab_size`: an index into per-id tables."""
        labels, size = self.columns.masked_labels, self.rules.vocab_size
        return np.minimum(labels, size) if self.top_label >= size else labels

    @cached_property
    def top_label(self) -> int:
        labels = self.columns.masked_labels
        return int(labels.max()) if len(labels) else -1

    @cached_property
    def wide_positions(self) -> np.ndarray:
        """`positions` as int64, for arithmetic that may leave the row."""
        return self.positions.astype(np.int64)

    @cached_property
    def follows_previous(self) -> np.ndarray:
        """Per masked entry: the previous entry of its row is the previous position."""
        pos, offsets = self.wide_positions, self.columns.masked_offsets
        follows = np.zeros(len(pos), bool)
        follows[1:] = pos[1:] == pos[:-1] + 1
        follows[offsets[:-1][self.masks_per_row > 0]] = False
        return follows

    @cached_property
    def after_frame(self) -> np.ndarray:
        """Per masked entry: the position right after [CLS] or the first [SEP] (a word starts)."""
        pos = self.wide_positions
        return (pos == 1) | (pos == np.repeat(self.segment_b_start, self.masks_per_row))

    @cached_property
    def continues_word(self) -> np.ndarray:
        """Per masked entry: its label is a "##" piece that continues the previous entry's word
        (needs the vocab: `rules.continuation`)."""
        return self.continuation_label & self.follows_previous & ~self.after_frame

    @cached_property
    def continuation_label(self) -> np.ndarray:
        """Per masked entry: its label is a "##" piece."""
        return self.rules.continuation[self.label_index]


SPREAD_BINS = 10  # a row's candidate positions cut into tenths, for the spread of its masks
_LONG_WORD = 64  # words of at least this many pieces count as one length (they are rare)


def mask_spread(batch: RowBatch) -> tuple[np.ndarray, np.ndarray] | None:
    """Where the batch's masked units fall among their rows' candidate positions (every position
    but [CLS] and the two [SEP]), in `SPREAD_BINS` equal parts by rank: (units seen in each
    part, units a uniform choice puts there on average). A unit is a masked position, or with
    whole-word masking a masked word (`_word_spread`). Entries out of place and rows with a
    broken frame are left out; None with whole-word masking when the vocab is unknown (words
    cannot be found)."""
    rules, per_row = batch.rules, batch.masks_per_row
    sound = ~batch.segment_broken
    if rules.whole_word_mask:
        return None if rules.continuation is None else _word_spread(batch, sound)
    candidates = np.where(sound, batch.lengths - 3, 0).astype(np.int32)  # per row
    pos = batch.positions.astype(np.int32, copy=False)
    rank = pos - 1
    rank -= pos >= np.repeat(batch.segment_b_start.astype(np.int32), per_row)
    rank *= SPREAD_BINS
    rank //= np.maximum(np.repeat(candidates, per_row), 1)  # now the part
    units = per_row
    if batch.in_place is not None or not sound.all():
        keep = np.repeat(sound, per_row)
        if batch.in_place is not None:
            keep &= batch.in_place
        rank = rank[keep]
        units = count_per_row(keep, batch.columns.masked_offsets)
    # part j holds the ranks i with j * n / BINS <= i < (j + 1) * n / BINS
    edges = -(-np.arange(SPREAD_BINS + 1) * candidates[:, None].astype(np.int64) // SPREAD_BINS)
    share = np.divide(units, candidates, out=np.zeros(len(units)), where=candidates > 0)
    seen = np.bincount(rank, minlength=SPREAD_BINS)[:SPREAD_BINS]
    return seen, share @ np.diff(edges, axis=1)


def _word_spread(batch: RowBatch, sound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whole-word masking visits a row's words in random order and takes each that fits what is
    left of the budget, so short words are taken more often than long ones, and a word cut by a
    [SEP] is short. Two words of one length are exchangeable, though: given how many words of
    each length a row took, those of a length are a uniform choice among the row's words of
    that length. Words are those of the original row (its masked pieces read back from the
    labels), each placed by its first piece."""
    c, rules = batch.columns, batch.rules
    first_sep = c.input_offsets[:-1] + batch.segment_b_start - 1
    frame = np.r_[c.input_offsets[:-1], first_sep, c.input_offsets[1:] - 1]
    original = c.input_ids.copy()
    in_place = np.ones(len(batch.positions), bool) if batch.in_place is None else batch.in_place
    masked = np.repeat(c.input_offsets[:-1], batch.masks_per_row) + batch.wide_positions
    masked = masked[in_place]
    original[masked] = c.masked_labels[in_place]
    candidate = np.repeat(sound, batch.lengths) if not sound.all() else np.ones(len(original), bool)
    candidate[frame[np.tile(sound, 3)]] = False
    at = np.flatnonzero(candidate)  # a word's pieces are adjacent; one never follows a frame
    pieces = original[at]
    if int(pieces.max(initial=0)) >= rules.vocab_size:
        pieces = np.minimum(pieces, rules.vocab_size)
    first = ~rules.continuation[pieces]
    after_frame = np.zeros(len(original), bool)
    after_frame[np.r_[c.input_offsets[:-1], first_sep][np.tile(sound, 2)] + 1] = True
    first |= after_frame[at]
    word_start = np.flatnonzero(first).astype(np.int32)  # index into `at`
    size = np.diff(np.r_[word_start, len(at)])
    taken = np.zeros(len(original), bool)
    taken[masked] = True
    taken = taken[at[word_start]]
    candidates = np.where(sound, batch.lengths - 3, 0).astype(np.int32)
    row_first = np.r_[0, np.cumsum(candidates)]  # each row's first candidate, in `at`
    words = np.r_[0, np.cumsum(first)][row_first]
    per_row = np.diff(words)
    word_row = np.repeat(np.arange(batch.num_rows, dtype=np.int32), per_row)
    part = word_start - np.repeat(row_first[:-1].astype(np.int32), per_row)
    part *= SPREAD_BINS
    part //= np.repeat(candidates, per_row)
    group = word_row * _LONG_WORD + np.minimum(size, _LONG_WORD) - 1  # (row, length)
    words = np.bincount(group)
    share = np.bincount(group[taken], minlength=len(words)) / np.maximum(words, 1)
    seen = np.bincount(part[taken], minlength=SPREAD_BINS)
    return seen, np.bincount(part, weights=share[group], minlength=SPREAD_BINS)
