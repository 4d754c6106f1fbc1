"""The row rules of the shard contract, checked over whole batches of rows at once.

`row_findings(columns, rules)` applies every rule to a batch of rows (`ShardColumns`: flat
Arrow buffers plus offsets) with numpy, without a Python loop per row, and returns which rows
break which rule together with the batch's figures (pieces, masks, the 80/10/10 draws).
`describe_row` says in one line why a given row breaks a rule; it is called for the few rows
a report quotes.

Each rule is one `Rule` of `ROW_RULES`, in report order: its name (the check's key in the
report), its title in the report's table, its check over a batch and its explanation of one
failing row. Each check's docstring states the rule (docs/validation.md describes them all).
What several checks share (the pieces at the masked positions, which positions are in place)
is computed once per batch by `schemas.row_batch.RowBatch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from schemas.config import MIN_SEQ_LENGTH
from schemas.masking import num_to_predict
from schemas.row_batch import (
    SPREAD_BINS,
    RowBatch,
    RowRules,
    any_per_row,
    count_per_row,
    mask_spread,
    take,
)
from schemas.shard import ShardColumns


@dataclass(frozen=True)
class Row:
    """One row's arrays (int64), for explaining the few failing rows a report quotes."""

    pieces: np.ndarray  # input ids
    segment_b_start: int
    positions: np.ndarray  # masked positions
    labels: np.ndarray  # the labels of the masked positions

    @classmethod
    def of(cls, c: ShardColumns, r: int) -> Row:
        masked = slice(c.masked_offsets[r], c.masked_offsets[r + 1])
        return cls(
            pieces=c.input_ids[c.input_offsets[r] : c.input_offsets[r + 1]].astype(np.int64),
            segment_b_start=int(c.segment_b_start[r]),
            positions=c.masked_positions[masked].astype(np.int64),
            labels=c.masked_labels[masked].astype(np.int64),
        )


@dataclass(frozen=True)
class Rule:
    """One row rule of the contract."""

    name: str  # the check's key in the report
    title: str  # its title in the report's table
    check: Callable[[RowBatch], np.ndarray | None]  # per row, True where broken; None: not run
    explain: Callable[[Row, RowRules], str]  # why one failing row breaks it, in one line


@dataclass
class BatchStats:
    rows: int = 0
    tokens: int = 0
    masked: int = 0
    random_next: int = 0
    full_length: int = 0  # rows of exactly max_seq_length
    expected_masked: int = 0  # the formula's total
    units: int = 0  # independent 80/10/10 draws: positions, or words with whole-word masking
    as_mask: int = 0
    as_keep: int = 0  # holding their label (kept, or a replacement that drew the label)
    as_random: int = 0
    # masked units per tenth of their rows' candidate positions: seen, and a uniform choice's
    spread_seen: np.ndarray = field(default_factory=lambda: np.zeros(SPREAD_BINS, np.int64))
    spread_expected: np.ndarray = field(default_factory=lambda: np.zeros(SPREAD_BINS))

    def add(self, other: BatchStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


def _show(values, limit: int = 8) -> str:
    values = [int(v) for v in values]
    text = ", ".join(str(v) for v in values[:limit])
    return f"[{text}{', ...' if len(values) > limit else ''}]"


def _check_cls_first(batch: RowBatch) -> np.ndarray:
    """`[CLS]` at position 0 and nowhere else."""
    c, cls = batch.columns, batch.rules.specials.cls
    indexable = batch.frames_indexable
    broken = take(c.input_ids, c.input_offsets[:-1], indexable) != cls
    if not indexable:
        broken |= batch.lengths == 0
    if broken.any() or batch.specials_seen.cls != batch.num_rows:
        broken |= count_per_row(c.input_ids == cls, c.input_offsets) != 1
    return broken


def _explain_cls_first(row: Row, rules: RowRules) -> str:
    if len(row.pieces) == 0:
        return "the row is empty"
    if row.pieces[0] != rules.specials.cls:
        return f"starts with {rules.name(row.pieces[0])}, not [CLS]"
    where = np.flatnonzero(row.pieces == rules.specials.cls)
    return f"holds [CLS] at positions {_show(where)}; only position 0 may"


def _check_two_sep(batch: RowBatch) -> np.ndarray:
    """Exactly two `[SEP]`, at `segment_b_start - 1` and at the end; A and B non-empty."""
    c, sep = batch.columns, batch.rules.specials.sep
    ids, offsets, indexable = c.input_ids, c.input_offsets, batch.frames_indexable
    broken = batch.segment_broken | (take(ids, offsets[1:] - 1, indexable) != sep)
    broken |= take(ids, offsets[:-1] + batch.segment_b_start - 1, indexable) != sep
    if broken.any() or batch.specials_seen.sep != 2 * batch.num_rows:
        broken |= count_per_row(ids == sep, offsets) != 2
    return broken


def _explain_two_sep(row: Row, rules: RowRules) -> str:
    length, b_start = len(row.pieces), row.segment_b_start
    if b_start < 3 or b_start > length - 2:
        return f"segment_b_start {b_start} leaves segment A or B empty (row length {length})"
    where = np.flatnonzero(row.pieces == rules.specials.sep)
    return (
        f"holds {len(where)} [SEP] at positions {_show(where)}; expected exactly two, at "
        f"segment_b_start - 1 = {b_start - 1} and at the end ({length - 1})"
    )


def _check_length(batch: RowBatch) -> np.ndarray:
    """MIN_SEQ_LENGTH <= length <= max_seq_length."""
    return (batch.lengths < MIN_SEQ_LENGTH) | (batch.lengths > batch.rules.max_seq_length)


def _explain_length(row: Row, rules: RowRules) -> str:
    return f"length {len(row.pieces)} is outside [{MIN_SEQ_LENGTH}, {rules.max_seq_length}]"


def _check_no_pad(batch: RowBatch) -> np.ndarray:
    """No `[PAD]` is stored."""
    if not batch.specials_seen.pad:
        return np.zeros(batch.num_rows, bool)
    c = batch.columns
    return count_per_row(c.input_ids == batch.rules.specials.pad, c.input_offsets) > 0


def _explain_no_pad(row: Row, rules: RowRules) -> str:
    where = np.flatnonzero(row.pieces == rules.specials.pad)
    return f"holds [PAD] at positions {_show(where)}; shards store no padding"


def _check_ids_in_vocab(batch: RowBatch) -> np.ndarray:
    """Ids and labels below the vocab size."""
    c, size = batch.columns, batch.rules.vocab_size
    broken = np.zeros(batch.num_rows, bool)
    if batch.specials_seen.top >= size:
        broken = count_per_row(c.input_ids >= size, c.input_offsets) > 0
    if batch.top_label >= size:
        broken |= any_per_row(c.masked_labels >= size, c.masked_offsets)
    return broken


def _explain_ids_in_vocab(row: Row, rules: RowRules) -> str:
    size = rules.vocab_size
    where = np.flatnonzero(row.pieces >= size)
    if len(where):
        return (
            f"id {row.pieces[where[0]]} at position {where[0]} is outside the vocab "
            f"({size:,} pieces)"
        )
    k = int(np.flatnonzero(row.labels >= size)[0])
    return (
        f"label {row.labels[k]} of masked position {row.positions[k]} is outside the vocab "
        f"({size:,} pieces)"
    )


def _check_positions(batch: RowBatch) -> np.ndarray:
    """Masked positions strictly ascending, inside the row, never on `[CLS]`/`[SEP]` (found
    while the batch locates its masked pieces)."""
    return batch.misplaced_rows


def _explain_positions(row: Row, rules: RowRules) -> str:
    length = len(row.pieces)
    for p in row.positions:
        if p >= length:
            return f"masked position {p} lies outside the row (length {length})"
        if p == 0:
            return "masked position 0 is the [CLS]"
        if p == row.segment_b_start - 1:
            return f"masked position {p} is the first [SEP]"
        if p == length - 1:
            return f"masked position {p} is the final [SEP]"
    return f"masked positions {_show(row.positions, 12)} are not strictly ascending"


def _check_mask_count(batch: RowBatch) -> np.ndarray:
    """min(max_predictions_per_seq, max(1, round(length * masked_lm_prob))) masked positions;
    with whole-word masking at most that, and at least one unless no whole word fits."""
    count, expected = batch.masks_per_row, batch.expected_masks
    if not batch.rules.whole_word_mask:
        return count != expected
    broken = (count > expected) | (count < 1)
    if broken.any():
        broken &= ~_no_word_fits(batch.columns, expected, batch.rules)
    return broken


def _no_word_fits(c: ShardColumns, expected: np.ndarray, rules: RowRules) -> np.ndarray:
    """Rows with no masked position where no whole word fits the count: allowed."""
    allowed = np.zeros(c.num_rows, bool)
    if rules.continuation is None:
        return allowed
    masks_per_row = np.diff(c.masked_offsets)
    for r in np.flatnonzero(masks_per_row == 0):  # rare: only rows whose every word is too long
        pieces = c.input_ids[c.input_offsets[r] : c.input_offsets[r + 1]]
        b_start = int(c.segment_b_start[r])
        candidates = np.r_[np.arange(1, b_start - 1), np.arange(b_start, len(pieces) - 1)]
        if len(candidates) == 0:
            continue
        starts = ~rules.continuation[np.minimum(pieces[candidates], rules.vocab_size)]
        starts[0] = True
        starts[1:] |= np.diff(candidates) != 1
        shortest = np.diff(np.r_[np.flatnonzero(starts), len(candidates)]).min()
        allowed[r] = shortest > expected[r]
    return allowed


def _explain_mask_count(row: Row, rules: RowRules) -> str:
    length, count = len(row.pieces), len(row.positions)
    lengths = np.array([length])
    expected = int(num_to_predict(lengths, rules.masked_lm_prob, rules.max_predictions)[0])
    formula = (
        f"min({rules.max_predictions}, max(1, round({length} * {rules.masked_lm_prob}))) "
        f"= {expected}"
    )
    if rules.whole_word_mask:
        if count == 0:
            return f"no masked position, though a whole word fits the formula's {formula}"
        return f"{count} masked positions, more than the formula's {formula}"
    return f"{count} masked positions; the formula gives {formula}"


def _check_mask_tokens(batch: RowBatch) -> np.ndarray:
    """`[MASK]` only at masked positions; a replaced position never holds a special piece
    (replacements come from the non-special pieces)."""
    c, rules, in_place = batch.columns, batch.rules, batch.in_place
    pieces = batch.masked_pieces
    if batch.specials_seen.top >= rules.vocab_size:
        pieces = np.minimum(pieces, rules.vocab_size)
    replaced = rules.special_not_mask[pieces] & (pieces != c.masked_labels)
    masks = pieces == rules.specials.mask
    if in_place is not None:
        replaced &= in_place
        masks &= in_place
    broken = any_per_row(replaced, c.masked_offsets)
    if batch.specials_seen.mask != np.count_nonzero(masks):
        stray = count_per_row(c.input_ids == rules.specials.mask, c.input_offsets)
        broken |= stray != count_per_row(masks, c.masked_offsets)
    return broken


def _explain_mask_tokens(row: Row, rules: RowRules) -> str:
    pieces, mask = row.pieces, rules.specials.mask
    stray = np.setdiff1d(np.flatnonzero(pieces == mask), row.positions)
    if len(stray):
        return f"[MASK] at position {stray[0]}, which is not a masked position"
    for p, label in zip(row.positions, row.labels, strict=True):
        held = pieces[min(p, len(pieces) - 1)]
        if held not in (mask, label) and rules.special[min(held, rules.vocab_size)]:
            return (
                f"masked position {p} holds {rules.name(held)}, a special piece, instead of "
                "[MASK], its label or an ordinary piece"
            )
    return "masked positions holding [MASK] do not match the [MASK] pieces of the row"


def _check_labels(batch: RowBatch) -> np.ndarray:
    """Labels are never special pieces (`[UNK]` excepted: it stands for text)."""
    forbidden = batch.rules.forbidden_label[batch.label_index]
    return any_per_row(forbidden, batch.columns.masked_offsets)


def _explain_labels(row: Row, rules: RowRules) -> str:
    forbidden = rules.forbidden_label[np.minimum(row.labels, rules.vocab_size)]
    k = int(np.flatnonzero(forbidden)[0])
    label, position = rules.name(row.labels[k]), row.positions[k]
    return f"label {label} of masked position {position} is a special piece"


def _check_whole_words(batch: RowBatch) -> np.ndarray | None:
    """With whole_word_mask, a masked word's pieces are all masked, with one choice. A word
    never spans [CLS]/[SEP]; a "##" piece right after one starts a word. Not run without
    whole-word masking, nor without the vocab the shards were built with."""
    rules = batch.rules
    if not rules.whole_word_mask or rules.continuation is None:
        return None
    entries = len(batch.positions)
    in_place = np.ones(entries, bool) if batch.in_place is None else batch.in_place
    glued, is_mask = batch.continues_word, batch.is_mask
    mixed = np.zeros(entries, bool)  # one word, [MASK] on some pieces only
    mixed[1:] = glued[1:] & (is_mask[1:] != is_mask[:-1])
    orphan = in_place & batch.continuation_label & ~batch.follows_previous & ~batch.after_frame
    cut = in_place & _word_goes_on(batch)
    return any_per_row(mixed | orphan | cut, batch.columns.masked_offsets)


def _word_goes_on(batch: RowBatch) -> np.ndarray:
    """Per masked entry: the next position, inside the row and not masked, holds a "##" piece
    (the word was masked only in part)."""
    c, rules, per_row = batch.columns, batch.rules, batch.masks_per_row
    following = batch.wide_positions + 1
    next_masked = np.zeros(len(following), bool)
    next_masked[:-1] = batch.follows_previous[1:]
    row_length = np.repeat(batch.lengths, per_row)
    first_sep = np.repeat(batch.segment_b_start, per_row) - 1
    inside = (following < row_length - 1) & (following != first_sep)
    row_start = np.repeat(c.input_offsets[:-1], per_row)
    at = row_start + np.minimum(following, np.maximum(row_length - 1, 0))
    following_piece = take(c.input_ids, at)
    continues = rules.continuation[np.minimum(following_piece, rules.vocab_size)]
    return inside & ~next_masked & continues


def _explain_whole_words(row: Row, rules: RowRules) -> str:
    pieces, positions, b_start = row.pieces, row.positions, row.segment_b_start
    original = pieces.copy()
    original[positions[positions < len(pieces)]] = row.labels[positions < len(pieces)]
    selected = set(positions.tolist())
    mask = rules.specials.mask
    for p in range(1, len(pieces) - 1):
        if p == b_start - 1 or p - 1 in (0, b_start - 1):
            continue
        if not rules.continuation[min(original[p], rules.vocab_size)]:
            continue
        if (p in selected) != (p - 1 in selected):
            return (
                f"positions {p - 1} and {p} belong to one word but only position "
                f"{p if p in selected else p - 1} is masked"
            )
        if p in selected and (pieces[p] == mask) != (pieces[p - 1] == mask):
            return f"the word at positions {p - 1}-{p} mixes [MASK] and other pieces"
    return "a masked word is not masked as a whole"


ROW_RULES = (
    Rule("cls_first", "[CLS] first, only there", _check_cls_first, _explain_cls_first),
    Rule("two_sep", "two [SEP], B after the first", _check_two_sep, _explain_two_sep),
    Rule("length", "row lengths", _check_length, _explain_length),
    Rule("no_pad", "no [PAD]", _check_no_pad, _explain_no_pad),
    Rule("ids_in_vocab", "ids inside the vocab", _check_ids_in_vocab, _explain_ids_in_vocab),
    Rule("positions", "masked positions", _check_positions, _explain_positions),
    Rule("mask_count", "masks per row (formula)", _check_mask_count, _explain_mask_count),
    Rule("mask_tokens", "[MASK] and replacements", _check_mask_tokens, _explain_mask_tokens),
    Rule("labels", "labels not special", _check_labels, _explain_labels),
    Rule("whole_words", "whole words", _check_whole_words, _explain_whole_words),
)
ROW_RULE_NAMES = tuple(rule.name for rule in ROW_RULES)
_RULE_BY_NAME = {rule.name: rule for rule in ROW_RULES}


def row_findings(c: ShardColumns, rules: RowRules) -> tuple[dict[str, np.ndarray], BatchStats]:
    """Every row rule over a batch of rows, without a Python loop per row.

    Returns, per rule that ran, a bool per row (True: the row breaks the rule), and the batch's
    figures. The common case (a sound batch) takes the fast path: a few comparison passes over
    the pieces and a gather of the masked positions; damaged rows take slower, exact paths.
    """
    batch = RowBatch(c, rules)
    broken = {}
    for rule in ROW_RULES:
        rows = rule.check(batch)
        if rows is not None:
            broken[rule.name] = rows
    return broken, _batch_stats(batch)


def _batch_stats(batch: RowBatch) -> BatchStats:
    """The batch's figures; the 80/10/10 draws counted per position, or per word with
    whole-word masking (a word's first in-place piece)."""
    c, rules = batch.columns, batch.rules
    stats = BatchStats(
        rows=batch.num_rows,
        tokens=int(len(c.input_ids)),
        masked=int(len(batch.positions)),
        random_next=int(np.count_nonzero(c.is_random_next)),
        full_length=int(np.count_nonzero(batch.lengths == rules.max_seq_length)),
        expected_masked=int(batch.expected_masks.sum()),
    )
    is_mask = batch.is_mask
    keep = (batch.masked_pieces == c.masked_labels) & ~is_mask
    units = batch.in_place  # None: every masked position
    if rules.whole_word_mask and rules.continuation is not None:
        in_place = np.ones(len(batch.positions), bool) if units is None else units
        units = in_place & ~batch.continues_word
    if units is None:
        stats.units = len(batch.positions)
        stats.as_mask = int(np.count_nonzero(is_mask))
        stats.as_keep = int(np.count_nonzero(keep))
    else:
        stats.units = int(np.count_nonzero(units))
        stats.as_mask = int(np.count_nonzero(units & is_mask))
        stats.as_keep = int(np.count_nonzero(units & keep))
    stats.as_random = stats.units - stats.as_mask - stats.as_keep
    spread = mask_spread(batch)
    if spread is not None:
        stats.spread_seen, stats.spread_expected = spread
    return stats


def describe_row(key: str, c: ShardColumns, r: int, rules: RowRules) -> str:
    """Why row `r` breaks rule `key`, in one line (called for a few failing rows only)."""
    return _RULE_BY_NAME[key].explain(Row.of(c, r), rules)
