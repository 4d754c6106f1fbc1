"""The row rules of the shard contract, checked over whole batches of rows at once.

`row_findings(columns, rules)` applies every rule to a batch of rows (`ShardColumns`: flat
Arrow buffers plus offsets) with numpy, without a Python loop per row, and returns which rows
break which rule together with the batch's figures (pieces, masks, the 80/10/10 draws).
`describe_row` says in one line why a given row breaks a rule; it is called for the few rows
a report quotes.

The rules (the contract, described in docs/validation.md):

- `cls_first`: `[CLS]` at position 0 and nowhere else;
- `two_sep`: exactly two `[SEP]`, at `segment_b_start - 1` and at the end, A and B non-empty;
- `length`: 5 <= length <= max_seq_length; `no_pad`: no `[PAD]` is stored;
- `ids_in_vocab`: ids and labels below the vocab size;
- `positions`: masked positions strictly ascending, inside the row, never `[CLS]`/`[SEP]`;
- `mask_count`: min(max_predictions_per_seq, max(1, round(length * masked_lm_prob))) positions
  (with whole-word masking at most that, and at least one unless no whole word fits);
- `mask_tokens`: `[MASK]` only at masked positions; a replaced position never holds a special
  piece (replacements come from the non-special pieces);
- `labels`: labels are never special pieces (`[UNK]` excepted: it stands for text);
- `whole_words` (whole_word_mask only): a masked word's pieces are all masked, with one choice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from schemas.config import MIN_SEQ_LENGTH, ShardConfig
from schemas.masking import num_to_predict
from schemas.shard import ShardColumns
from schemas.vocab import SpecialIds, Vocab

ROW_RULES = (
    "cls_first",
    "two_sep",
    "length",
    "no_pad",
    "ids_in_vocab",
    "positions",
    "mask_count",
    "mask_tokens",
    "labels",
    "whole_words",
)


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
        sp = self.specials
        names = {
            sp.pad: "[PAD]",
            sp.unk: "[UNK]",
            sp.cls: "[CLS]",
            sp.sep: "[SEP]",
            sp.mask: "[MASK]",
        }
        return names.get(int(i), f"id {int(i)}")


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

    def add(self, other: BatchStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


def _take(values: np.ndarray, index: np.ndarray, safe: bool = False) -> np.ndarray:
    """values[index]; unless `safe`, indices are clipped into range (damaged rows)."""
    if len(values) == 0:
        return np.full(len(index), -1, np.int64)
    return values[index] if safe else np.take(values, index, mode="clip")


def _per_row(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many flags are set in each row (rows given by offsets into `flags`)."""
    c = np.zeros(len(flags) + 1, np.int64)
    np.cumsum(flags, out=c[1:])
    return c[offsets[1:]] - c[offsets[:-1]]


def _any_per_row(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    if not flags.any():
        return np.zeros(len(offsets) - 1, bool)
    return _per_row(flags, offsets) > 0


@dataclass
class _Tokens:
    """Whole-batch counts of the special pieces, from one comparison pass each."""

    cls: int
    sep: int
    pad: int
    mask: int
    top: int  # the largest id

    @classmethod
    def count(cls, ids: np.ndarray, sp: SpecialIds) -> _Tokens:
        return cls(
            cls=int(np.count_nonzero(ids == sp.cls)),
            sep=int(np.count_nonzero(ids == sp.sep)),
            pad=int(np.count_nonzero(ids == sp.pad)),
            mask=int(np.count_nonzero(ids == sp.mask)),
            top=int(ids.max()) if len(ids) else -1,
        )


def row_findings(c: ShardColumns, rules: RowRules) -> tuple[dict[str, np.ndarray], BatchStats]:
    """Every row rule over a batch of rows, without a Python loop per row.

    Returns, per rule, a bool per row (True: the row breaks the rule), and the batch's figures.
    The common case (a sound batch) takes the fast path: a few comparison passes over the
    pieces and a gather of the masked positions; damaged rows take slower, exact paths.
    """
    n, off, ids, moff = c.num_rows, c.input_offsets, c.input_ids, c.masked_offsets
    lens = np.diff(off)
    sbs = c.segment_b_start.astype(np.int64)
    tokens = _Tokens.count(ids, rules.specials)
    bad = _frame_findings(ids, off, lens, sbs, tokens, rules)
    mcount = np.diff(moff)
    index = np.int32 if len(ids) < 2**31 - 1 else np.int64
    pos = c.masked_positions.astype(index)
    starts = off[:-1].astype(index)
    gpos = np.repeat(starts, mcount)
    gpos += pos
    on_sep = gpos == np.repeat(starts + (sbs - 1).astype(index), mcount)
    edge, unordered = _order_findings(pos, moff, mcount, lens)
    valid = None  # None: every masked position is in place
    if edge.any() or on_sep.any() or unordered.any():
        len_m = np.repeat(lens, mcount)
        misplaced = (pos == 0) | (pos >= len_m - 1) | on_sep | unordered
        valid = ~misplaced
        gpos = np.repeat(starts, mcount) + np.minimum(pos, np.maximum(len_m - 1, 0))
        bad["positions"] = edge | _any_per_row(misplaced, moff)
    else:
        bad["positions"] = np.zeros(n, bool)
    got = _take(ids, gpos, safe=valid is None)
    _content_findings(c, rules, got, valid, tokens, bad)
    expected = num_to_predict(lens, rules.masked_lm_prob, rules.max_predictions)
    stats = BatchStats(
        rows=n,
        tokens=int(len(ids)),
        masked=int(len(pos)),
        random_next=int(np.count_nonzero(c.is_random_next)),
        full_length=int(np.count_nonzero(lens == rules.max_seq_length)),
        expected_masked=int(expected.sum()),
    )
    is_mask = got == rules.specials.mask
    keep = (got == c.masked_labels) & ~is_mask
    if rules.whole_word_mask:
        bad["mask_count"] = (mcount > expected) | (mcount < 1)
        if bad["mask_count"].any():
            bad["mask_count"] &= ~_no_word_fits(c, expected, rules)
        unit = _word_findings(c, rules, pos.astype(np.int64), is_mask, valid, bad)
    else:
        bad["mask_count"] = mcount != expected
        unit = valid
    if unit is None:
        stats.units = len(pos)
        stats.as_mask = int(np.count_nonzero(is_mask))
        stats.as_keep = int(np.count_nonzero(keep))
    else:
        stats.units = int(np.count_nonzero(unit))
        stats.as_mask = int(np.count_nonzero(unit & is_mask))
        stats.as_keep = int(np.count_nonzero(unit & keep))
    stats.as_random = stats.units - stats.as_mask - stats.as_keep
    return bad, stats


def _order_findings(pos, moff, mcount, lens) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose first masked position is 0 or last is at/after the final [SEP] (enough when
    the positions ascend), and entries that do not ascend from the previous one of their row."""
    d = np.diff(pos)
    inner = moff[1:-1]
    inner = inner[(inner > 0) & (inner < len(pos))]
    d[inner - 1] = 1  # the first entry of a row has no predecessor
    unordered = np.zeros(len(pos), bool)
    if len(d) and int(d.min()) <= 0:
        unordered[1:] = d <= 0
    has = mcount > 0
    edge = np.zeros(len(mcount), bool)
    edge[has] = (pos[moff[:-1][has]] == 0) | (pos[moff[1:][has] - 1] >= lens[has] - 1)
    return edge, unordered


def _content_findings(c, rules: RowRules, got, valid, tokens: _Tokens, bad) -> None:
    """Labels, replacements and [MASK] pieces."""
    v, moff, lab = rules.vocab_size, c.masked_offsets, c.masked_labels
    if len(lab) and int(lab.max()) >= v:
        bad["ids_in_vocab"] |= _any_per_row(lab >= v, moff)
        lab = np.minimum(lab, v)
    bad["labels"] = _any_per_row(rules.forbidden_label[lab], moff)
    if tokens.top >= v:
        got = np.minimum(got, v)
    replaced = rules.special_not_mask[got] & (got != c.masked_labels)
    if valid is not None:
        replaced &= valid
    bad["mask_tokens"] = _any_per_row(replaced, moff)
    is_mask = got == rules.specials.mask
    if valid is not None:
        is_mask &= valid
    if tokens.mask != np.count_nonzero(is_mask):
        stray = _per_row(c.input_ids == rules.specials.mask, c.input_offsets)
        bad["mask_tokens"] |= stray != _per_row(is_mask, moff)


def _frame_findings(ids, off, lens, sbs, tokens: _Tokens, rules: RowRules) -> dict:
    """[CLS] first, two [SEP] around B, lengths, no [PAD], ids inside the vocab."""
    n, sp = len(lens), rules.specials
    starts = off[:-1]
    segment_bad = (sbs < 3) | (sbs > lens - 2)
    safe = not segment_bad.any()  # then every row is long enough to index
    cls_bad = _take(ids, starts, safe) != sp.cls
    if not safe:
        cls_bad |= lens == 0
    if cls_bad.any() or tokens.cls != n:
        cls_bad |= _per_row(ids == sp.cls, off) != 1
    sep_bad = segment_bad | (_take(ids, off[1:] - 1, safe) != sp.sep)
    sep_bad |= _take(ids, starts + sbs - 1, safe) != sp.sep
    if sep_bad.any() or tokens.sep != 2 * n:
        sep_bad |= _per_row(ids == sp.sep, off) != 2
    no_pad = _per_row(ids == sp.pad, off) > 0 if tokens.pad else np.zeros(n, bool)
    in_vocab = np.zeros(n, bool)
    if tokens.top >= rules.vocab_size:
        in_vocab = _per_row(ids >= rules.vocab_size, off) > 0
    return {
        "cls_first": cls_bad,
        "two_sep": sep_bad,
        "length": (lens < MIN_SEQ_LENGTH) | (lens > rules.max_seq_length),
        "no_pad": no_pad,
        "ids_in_vocab": in_vocab,
    }


def _word_findings(c, rules: RowRules, pos, is_mask, valid, bad) -> np.ndarray | None:
    """Whole-word masking: a masked word's pieces are all selected and share one choice.

    Returns, per masked entry, True where the entry starts a word (a unit of the 80/10/10
    draw). A word never spans [CLS]/[SEP]; a "##" piece right after one starts a word.
    """
    moff = c.masked_offsets
    if rules.continuation is None:  # no trustworthy vocab: not checked
        return valid
    v, mcount = rules.vocab_size, np.diff(moff)
    valid = np.ones(len(pos), bool) if valid is None else valid
    cont = rules.continuation[np.minimum(c.masked_labels, v)]
    adjacent = np.zeros(len(pos), bool)  # the previous entry is the previous position
    adjacent[1:] = pos[1:] == pos[:-1] + 1
    adjacent[moff[:-1][mcount > 0]] = False
    sbs = np.repeat(c.segment_b_start.astype(np.int64), mcount)
    after_special = (pos == 1) | (pos == sbs)
    glued = cont & adjacent & ~after_special
    mixed = np.zeros(len(pos), bool)
    mixed[1:] = glued[1:] & (is_mask[1:] != is_mask[:-1])
    orphan = valid & cont & ~adjacent & ~after_special
    next_masked = np.zeros(len(pos), bool)
    next_masked[:-1] = adjacent[1:]
    len_m = np.repeat(np.diff(c.input_offsets), mcount)
    nxt = pos + 1
    inside = (nxt < len_m - 1) & (nxt != sbs - 1)
    start = np.repeat(c.input_offsets[:-1], mcount)
    nxt_id = _take(c.input_ids, start + np.minimum(nxt, np.maximum(len_m - 1, 0)))
    cut = valid & inside & ~next_masked & rules.continuation[np.minimum(nxt_id, v)]
    bad["whole_words"] = _any_per_row(mixed | orphan | cut, moff)
    return valid & ~glued


def _no_word_fits(c: ShardColumns, expected: np.ndarray, rules: RowRules) -> np.ndarray:
    """Rows with no masked position where no whole word fits the count: allowed."""
    ok = np.zeros(c.num_rows, bool)
    if rules.continuation is None:
        return ok
    mcount = np.diff(c.masked_offsets)
    for r in np.flatnonzero(mcount == 0):  # rare: only rows whose every word is too long
        ids = c.input_ids[c.input_offsets[r] : c.input_offsets[r + 1]]
        sbs = int(c.segment_b_start[r])
        cand = np.r_[np.arange(1, sbs - 1), np.arange(sbs, len(ids) - 1)]
        if len(cand) == 0:
            continue
        starts = ~rules.continuation[np.minimum(ids[cand], rules.vocab_size)]
        starts[0] = True
        starts[1:] |= np.diff(cand) != 1
        shortest = np.diff(np.r_[np.flatnonzero(starts), len(cand)]).min()
        ok[r] = shortest > expected[r]
    return ok


def _show(values, limit: int = 8) -> str:
    values = [int(v) for v in values]
    text = ", ".join(str(v) for v in values[:limit])
    return f"[{text}{', ...' if len(values) > limit else ''}]"


def describe_row(key: str, c: ShardColumns, r: int, rules: RowRules) -> str:
    """Why row `r` breaks rule `key`, in one line (called for a few failing rows only)."""
    ids = c.input_ids[c.input_offsets[r] : c.input_offsets[r + 1]].astype(np.int64)
    pos = c.masked_positions[c.masked_offsets[r] : c.masked_offsets[r + 1]].astype(np.int64)
    lab = c.masked_labels[c.masked_offsets[r] : c.masked_offsets[r + 1]].astype(np.int64)
    sbs = int(c.segment_b_start[r])
    return _DESCRIBE[key](ids, sbs, pos, lab, rules)


def _describe_cls(ids, sbs, pos, lab, rules: RowRules) -> str:
    if len(ids) == 0:
        return "the row is empty"
    if ids[0] != rules.specials.cls:
        return f"starts with {rules.name(ids[0])}, not [CLS]"
    where = np.flatnonzero(ids == rules.specials.cls)
    return f"holds [CLS] at positions {_show(where)}; only position 0 may"


def _describe_sep(ids, sbs, pos, lab, rules: RowRules) -> str:
    n = len(ids)
    if sbs < 3 or sbs > n - 2:
        return f"segment_b_start {sbs} leaves segment A or B empty (row length {n})"
    where = np.flatnonzero(ids == rules.specials.sep)
    return (
        f"holds {len(where)} [SEP] at positions {_show(where)}; expected exactly two, at "
        f"segment_b_start - 1 = {sbs - 1} and at the end ({n - 1})"
    )


def _describe_length(ids, sbs, pos, lab, rules: RowRules) -> str:
    return f"length {len(ids)} is outside [{MIN_SEQ_LENGTH}, {rules.max_seq_length}]"


def _describe_pad(ids, sbs, pos, lab, rules: RowRules) -> str:
    where = np.flatnonzero(ids == rules.specials.pad)
    return f"holds [PAD] at positions {_show(where)}; shards store no padding"


def _describe_vocab(ids, sbs, pos, lab, rules: RowRules) -> str:
    v = rules.vocab_size
    where = np.flatnonzero(ids >= v)
    if len(where):
        return f"id {ids[where[0]]} at position {where[0]} is outside the vocab ({v:,} pieces)"
    k = int(np.flatnonzero(lab >= v)[0])
    return f"label {lab[k]} of masked position {pos[k]} is outside the vocab ({v:,} pieces)"


def _describe_positions(ids, sbs, pos, lab, rules: RowRules) -> str:
    n = len(ids)
    for p in pos:
        if p >= n:
            return f"masked position {p} lies outside the row (length {n})"
        if p == 0:
            return "masked position 0 is the [CLS]"
        if p == sbs - 1:
            return f"masked position {p} is the first [SEP]"
        if p == n - 1:
            return f"masked position {p} is the final [SEP]"
    return f"masked positions {_show(pos, 12)} are not strictly ascending"


def _describe_count(ids, sbs, pos, lab, rules: RowRules) -> str:
    n = len(ids)
    e = int(num_to_predict(np.array([n]), rules.masked_lm_prob, rules.max_predictions)[0])
    formula = f"min({rules.max_predictions}, max(1, round({n} * {rules.masked_lm_prob}))) = {e}"
    if rules.whole_word_mask:
        if len(pos) == 0:
            return f"no masked position, though a whole word fits the formula's {formula}"
        return f"{len(pos)} masked positions, more than the formula's {formula}"
    return f"{len(pos)} masked positions; the formula gives {formula}"


def _describe_mask_tokens(ids, sbs, pos, lab, rules: RowRules) -> str:
    stray = np.setdiff1d(np.flatnonzero(ids == rules.specials.mask), pos)
    if len(stray):
        return f"[MASK] at position {stray[0]}, which is not a masked position"
    for p, label in zip(pos, lab, strict=True):
        got = ids[min(p, len(ids) - 1)]
        if got not in (rules.specials.mask, label) and rules.special[min(got, rules.vocab_size)]:
            return (
                f"masked position {p} holds {rules.name(got)}, a special piece, instead of "
                "[MASK], its label or an ordinary piece"
            )
    return "masked positions holding [MASK] do not match the [MASK] pieces of the row"


def _describe_labels(ids, sbs, pos, lab, rules: RowRules) -> str:
    k = int(np.flatnonzero(rules.forbidden_label[np.minimum(lab, rules.vocab_size)])[0])
    return f"label {rules.name(lab[k])} of masked position {pos[k]} is a special piece"


def _describe_words(ids, sbs, pos, lab, rules: RowRules) -> str:
    cont = rules.continuation
    original = ids.copy()
    original[pos[pos < len(ids)]] = lab[pos < len(ids)]
    selected = set(pos.tolist())
    n = len(ids)
    for p in range(1, n - 1):
        if p == sbs - 1 or p - 1 in (0, sbs - 1) or not cont[min(original[p], rules.vocab_size)]:
            continue
        if (p in selected) != (p - 1 in selected):
            return (
                f"positions {p - 1} and {p} belong to one word but only position "
                f"{p if p in selected else p - 1} is masked"
            )
        if p in selected and (ids[p] == rules.specials.mask) != (ids[p - 1] == rules.specials.mask):
            return f"the word at positions {p - 1}-{p} mixes [MASK] and other pieces"
    return "a masked word is not masked as a whole"


_DESCRIBE = {
    "cls_first": _describe_cls,
    "two_sep": _describe_sep,
    "length": _describe_length,
    "no_pad": _describe_pad,
    "ids_in_vocab": _describe_vocab,
    "positions": _describe_positions,
    "mask_count": _describe_count,
    "mask_tokens": _describe_mask_tokens,
    "labels": _describe_labels,
    "whole_words": _describe_words,
}
