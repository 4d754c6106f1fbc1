"""Sentence-pair instances and masking: the reference algorithm as plain functions over numpy.

This follows `create_pretraining_data.py` of google-research/bert (docs/design.md, "Instances")
with four documented differences: random-next documents come from the same bucket; the random-next
document is never the current one; random replacement pieces are never special pieces; with
whole-word masking the 80/10/10 choice is made per word.

The work is split so that little Python runs per instance: `plan_into` walks a document's
sentences and decides each pair as a handful of integers (the draws that depend on each other),
`assemble_rows` gathers all pairs of a bucket into `[CLS] A [SEP] B [SEP]` rows in one numpy
pass, and `mask_rows` masks all rows at once with the contract's rule (`schemas.masking`, which
the model's loader also uses to re-mask).
Every function that draws takes its `numpy.random.Generator`.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

import numpy as np

from pipeline.core.config import InstanceConfig
from schemas import masking
from schemas.masking import TokenSpec
from schemas.shard import segment_gather


@dataclass(frozen=True)
class TokenizedDoc:
    """A document's sentences as WordPiece ids: sentence k is ids[offsets[k]:offsets[k+1]]."""

    id: str
    ids: np.ndarray
    offsets: np.ndarray  # int64, length = number of sentences + 1
    source: str = ""

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1


class Pair(NamedTuple):
    """One instance before assembly: A and B as [lo, hi) ranges of units' ids."""

    a_unit: int
    a_lo: int
    a_hi: int
    b_unit: int
    b_lo: int
    b_hi: int
    is_random_next: bool
    short: bool
    forced: int = 0  # COIN: the random_next_prob coin chose the label; else FORCED_*


COIN, FORCED_RANDOM, FORCED_ACTUAL = 0, 1, 2  # how a pair's is_random_next was decided
A_UNIT, RANDOM_NEXT, SHORT, FORCED = 0, 6, 7, 8  # columns of `pair_array`


def pair_array(pairs: Sequence[Pair]) -> np.ndarray:
    """Pairs as one int64 array, a row per pair and a column per `Pair` field."""
    return flat_pair_array(list(chain.from_iterable(pairs)))


def flat_pair_array(flat: list) -> np.ndarray:
    """`plan_into`'s list as `pair_array`'s array."""
    return np.fromiter(flat, np.int64, len(flat)).reshape(-1, len(Pair._fields))


@dataclass(frozen=True)
class Rows:
    """Assembled (and, after `mask_rows`, masked) rows of a bucket, flat with offsets."""

    ids: np.ndarray
    offsets: np.ndarray  # int64, rows + 1
    segment_b_start: np.ndarray  # per row, index of B's first token
    masked_positions: np.ndarray | None = None  # within-row positions, ascending per row
    masked_labels: np.ndarray | None = None
    masked_offsets: np.ndarray | None = None


def num_to_predict(length: int, cfg: InstanceConfig) -> int:
    """Masked positions for one row of `length` pieces (`schemas.masking.num_to_predict`)."""
    n = masking.num_to_predict(np.array([length]), cfg.masked_lm_prob, cfg.max_predictions_per_seq)
    return int(n[0])


_ALTERNATE = int("01" * 2048, 2)  # bits 0, 2, 4, ... set: every other drop (4,096 drops)


def truncation_plan(len_a: int, len_b: int, max_tokens: int, rng: random.Random):
    """Pieces to drop as (a_front, a_back, b_front, b_back).

    Same outcome as the reference's loop, which drops one piece at a time from the longer
    side (B on a tie), from the front or the back with probability 0.5 each: one coin per drop,
    here the n bits of one `getrandbits(n)` (bit k set: drop k is from the front).
    """
    n = len_a + len_b - max_tokens
    if n <= 0:
        return 0, 0, 0, 0
    front = rng.getrandbits(n)
    first = min(n, abs(len_a - len_b))  # drops from the longer side until the lengths meet
    # then B, A, B, A ... (B on a tie): A's drops are the odd offsets after `first`; the
    # pattern is cut to the drops left before it is shifted (a shift of all 4,096 bits is not free)
    after = n - first - 1
    alternate = _ALTERNATE if after <= 4096 else int("01" * (after // 2 + 1), 2)
    from_a = (alternate & ((1 << after) - 1)) << (first + 1) if after > 0 else 0
    n_a = (n - first) // 2
    if len_a > len_b:
        from_a |= (1 << first) - 1
        n_a += first
    a_front = (front & from_a).bit_count()
    b_front = front.bit_count() - a_front
    return a_front, n_a - a_front, b_front, (n - n_a) - b_front


def truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int, rng: random.Random):
    af, ab, bf, bb = truncation_plan(len(a), len(b), max_tokens, rng)
    return a[af : len(a) - ab], b[bf : len(b) - bb]


def plan_document(offsets, ids, index: int, cfg: InstanceConfig, rng, can_pick_other: bool):
    """All pairs (`Pair`s) of one document pass (`plan_into`), for tests and tools."""
    flat: list[int] = []
    plan_into(flat, offsets, ids, index, cfg, rng, can_pick_other)
    n = len(Pair._fields)
    return [Pair(*flat[k : k + n]) for k in range(0, len(flat), n)]


def plan_into(out: list, offsets, ids, index: int, cfg: InstanceConfig, rng, can_pick_other):
    """All pairs of one document pass, appended to `out` as the fields of `Pair` one after
    another: the reference's loop, its draws in its order, from a `random.Random` (a dependent
    scalar draw is several times cheaper there than from numpy: docs/benchmarks.md), in one
    function with local names (it runs once per pair of the corpus).

    `offsets[u]` are unit u's sentence offsets (a list), `ids[u]` its document id; B may come
    from another unit of the bucket, never the same document. A one-sentence chunk needs another
    document (`FORCED_RANDOM`) and is dropped without one; then every B follows A
    (`FORCED_ACTUAL`). The reference adds a sentence at a time until the chunk reaches the
    target; a bisection finds that sentence at once."""
    draw, extend, find = rng.random, out.extend, bisect.bisect_left
    offs, me, n_units = offsets[index], ids[index], len(ids)
    last, max_tokens, p_random = len(offs) - 2, cfg.max_num_tokens, cfg.random_next_prob
    short = draw() < cfg.short_seq_prob
    target = 2 + int(draw() * (max_tokens - 1)) if short else max_tokens  # randint(2, max)
    start = 0
    while start <= last:
        # the first sentence i >= start with offs[i + 1] - offs[start] >= target, else the last
        i = find(offs, offs[start] + target, start + 1, last + 1) - 1
        k = i + 1 - start
        if k < 2:
            a_end, random_next, forced = i + 1, True, FORCED_RANDOM
            if not can_pick_other:
                start = i + 1
                continue
        else:
            a_end = start + 1 + int(draw() * (k - 1))  # randint(1, k - 1) sentences for A
            random_next, forced = draw() < p_random, COIN
            if not can_pick_other:
                random_next, forced = False, FORCED_ACTUAL
        a_lo, a_hi = offs[start], offs[a_end]
        if random_next:
            b_unit = int(draw() * n_units)
            while ids[b_unit] == me:
                b_unit = int(draw() * n_units)
            b_lo, b_hi = random_span(offsets[b_unit], target - (a_hi - a_lo), rng)
            i = a_end - 1  # the sentences after A go back to the document
        else:
            b_unit, b_lo, b_hi = index, a_hi, offs[i + 1]
        if a_hi - a_lo + b_hi - b_lo > max_tokens:
            af, ab, bf, bb = truncation_plan(a_hi - a_lo, b_hi - b_lo, max_tokens, rng)
            a_lo, a_hi, b_lo, b_hi = a_lo + af, a_hi - ab, b_lo + bf, b_hi - bb
        extend((index, a_lo, a_hi, b_unit, b_lo, b_hi, random_next, short, forced))
        start = i + 1


def random_span(offs: Sequence[int], target_b: int, rng: random.Random) -> tuple[int, int]:
    """Sentences from a random one on, until at least `target_b` pieces or the document ends."""
    first = int(rng.random() * (len(offs) - 1))  # randint(0, sentences - 1)
    stop = bisect.bisect_left(offs, offs[first] + target_b, first + 1)  # positional: cheaper
    return offs[first], offs[min(stop, len(offs) - 1)]


# Rows gathered at a time: the gather's index takes 8 bytes per piece, so a whole bucket's at
# once would set each worker's peak memory (its pages faulted in afresh) well above the rest.
ASSEMBLE_BLOCK_ROWS = 8192


def assemble_rows(units: Sequence[TokenizedDoc], p: np.ndarray, spec: TokenSpec) -> Rows:
    """`[CLS] A [SEP] B [SEP]` for every pair (rows of `pair_array`), in one vectorised gather:
    each row is five ranges of the units' ids laid end to end, [CLS] and [SEP] being ranges of
    one piece appended after them."""
    ids = [u.ids for u in units]
    frame = np.array([spec.cls, spec.sep], dtype=ids[0].dtype if ids else np.uint32)
    flat = np.concatenate([*ids, frame])
    cls, sep = len(flat) - 2, len(flat) - 1
    base = np.zeros(len(units), dtype=np.int64)
    np.cumsum([len(u) for u in ids[:-1]], out=base[1:])
    la, lb = p[:, 2] - p[:, 1], p[:, 5] - p[:, 4]
    starts = np.empty((len(p), 5), np.int64)
    starts[:, 0], starts[:, 2], starts[:, 4] = cls, sep, sep
    starts[:, 1], starts[:, 3] = base[p[:, 0]] + p[:, 1], base[p[:, 3]] + p[:, 4]
    lengths = np.ones((len(p), 5), np.int64)
    lengths[:, 1], lengths[:, 3] = la, lb
    offsets = np.zeros(len(p) + 1, dtype=np.int64)
    np.cumsum(la + lb + 3, out=offsets[1:])
    out = np.empty(int(offsets[-1]), flat.dtype)
    for lo in range(0, len(p), ASSEMBLE_BLOCK_ROWS):  # its gather indices are int64 per piece
        hi = min(lo + ASSEMBLE_BLOCK_ROWS, len(p))
        index = segment_gather(starts[lo:hi].reshape(-1), lengths[lo:hi].reshape(-1))
        out[offsets[lo] : offsets[hi]] = flat[index]
    return Rows(out, offsets, (la + 2).astype(np.uint16))


def mask_rows(rows: Rows, cfg: InstanceConfig, spec: TokenSpec, rng: np.random.Generator) -> Rows:
    """Mask every row at once by the contract's rule (`schemas.masking`): `num_to_predict`
    positions per row (words with whole-word masking), never [CLS]/[SEP], 80/10/10."""
    rule = masking.MaskingRule(
        cfg.max_predictions_per_seq, cfg.masked_lm_prob, cfg.whole_word_mask, spec
    )
    masked = masking.mask_flat(rows.ids, rows.offsets, rows.segment_b_start, rule, rng)
    return Rows(
        masked.ids,
        rows.offsets,
        rows.segment_b_start,
        masked.positions,
        masked.labels,
        masked.offsets,
    )


def unit_tables(units: Sequence[TokenizedDoc]) -> tuple[list[list[int]], list[str]]:
    return [u.offsets.tolist() for u in units], [u.id for u in units]


def document_rows(
    units: Sequence[TokenizedDoc],
    index: int,
    cfg: InstanceConfig,
    spec: TokenSpec,
    seed: int,
    can_pick_other: bool,
) -> tuple[Rows, list[Pair]]:
    """One document pass planned and masked from one seed (for tests and tools; the pipeline
    plans every document of a bucket first and masks the bucket at once)."""
    offsets, ids = unit_tables(units)
    pairs = plan_document(offsets, ids, index, cfg, random.Random(seed), can_pick_other)
    rng = np.random.default_rng(seed)
    if not pairs:
        return Rows(
            np.zeros(0, units[index].ids.dtype), np.zeros(1, np.int64), np.zeros(0, np.uint16)
        ), pairs
    return mask_rows(assemble_rows(units, pair_array(pairs), spec), cfg, spec, rng), pairs
