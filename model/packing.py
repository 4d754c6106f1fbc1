"""Packing whole rows into sequences of a fixed length, so that a batch computes (almost) no
padding: plain numpy, no torch, no randomness of its own.

Two steps:

1. `plan(lengths, capacity)`: which row lengths share a packed sequence. Best-fit decreasing,
   run on the histogram of the lengths rather than on the rows: every packed sequence that
   would receive the same lengths is handled as one group, so the cost grows with the number of
   distinct lengths (at most `capacity`), not with the rows, and the plan depends on the
   multiset of lengths alone. The plan of a shard is therefore the same in every epoch.
2. `assign(lengths, plan, order)`: which rows fill the plan's slots. Rows of equal length are
   interchangeable; `order` (a permutation the caller draws from its seeded generator) decides
   which of them goes where, so an epoch's packs differ from the last one's while their count,
   and so the number of batches, stays fixed.

`pack(...)` then lays a batch's rows, padded one per line as the loader collates them, into
packed sequences: every row keeps its own positions (from 0), segment ids, `[CLS]` and masks,
and `row_ids` says which row each token belongs to (-1: padding), from which the model builds
its block-diagonal attention.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np

from schemas.shard import segment_gather


@dataclass(frozen=True)
class Plan:
    """Packed sequences as row lengths: sequence i holds `sizes[i]` rows whose lengths are
    `slots[starts[i]:starts[i] + sizes[i]]` (`starts` = the running sum of `sizes`)."""

    slots: np.ndarray  # int64, one per row
    sizes: np.ndarray  # int64, one per packed sequence

    @property
    def packs(self) -> int:
        return len(self.sizes)


def plan(lengths: np.ndarray, capacity: int) -> Plan:
    """Best-fit decreasing over the length histogram: lengths from the longest down, each into
    the open sequence with the least room that still takes it, else into new sequences."""
    lengths = np.asarray(lengths, np.int64)
    if len(lengths) and (lengths.min() < 1 or lengths.max() > capacity):
        raise ValueError(f"packing: row lengths must lie in [1, {capacity}]")
    counts = np.bincount(lengths, minlength=capacity + 1)
    groups: dict[int, list[tuple[int, tuple[int, ...]]]] = {}  # room -> [(sequences, lengths)]
    rooms: list[int] = []  # sorted rooms with open groups

    def put(room: int, n: int, held: tuple[int, ...]) -> None:
        if room not in groups or not groups[room]:
            groups.setdefault(room, [])
            insort(rooms, room)
        groups[room].append((n, held))

    for length in range(capacity, 0, -1):
        left = int(counts[length])
        while left:
            i = bisect_left(rooms, length)
            if i == len(rooms):
                break
            room = rooms[i]
            n, held = groups[room].pop()
            if not groups[room]:
                rooms.pop(i)
            k = min(left, n)
            if n > k:
                put(room, n - k, held)
            put(room - length, k, (*held, length))
            left -= k
        if left:
            per = capacity // length
            full, rest = divmod(left, per)
            if full:
                put(capacity - per * length, full, (length,) * per)
            if rest:
                put(capacity - rest * length, 1, (length,) * rest)
    return _flatten(groups)


def _flatten(groups: dict[int, list[tuple[int, tuple[int, ...]]]]) -> Plan:
    slots, sizes = [], []
    for room in sorted(groups):
        for n, held in groups[room]:
            slots.append(np.tile(np.array(held, np.int64), n))
            sizes.append(np.full(n, len(held), np.int64))
    if not slots:
        return Plan(np.zeros(0, np.int64), np.zeros(0, np.int64))
    return Plan(np.concatenate(slots), np.concatenate(sizes))


def assign(lengths: np.ndarray, p: Plan, order: np.ndarray) -> np.ndarray:
    """The rows (indices into `lengths`) that fill `p`'s slots, sequence after sequence. Among
    rows of equal length, the one earlier in `order` (a permutation of the rows) takes the
    earlier slot."""
    lengths = np.asarray(lengths, np.int64)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    by_length = np.lexsort((rank, lengths))  # rows by length, ties by `order`
    slots_by_length = np.argsort(p.slots, kind="stable")
    if not np.array_equal(lengths[by_length], p.slots[slots_by_length]):
        raise ValueError("packing: the plan was made for other row lengths")
    rows = np.empty(len(lengths), np.int64)
    rows[slots_by_length] = by_length
    return rows


def shuffle_packs(rows: np.ndarray, sizes: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`rows` (laid sequence after sequence, `sizes` each) with the sequences in `order`."""
    starts = np.cumsum(sizes) - sizes
    return rows[segment_gather(starts[order], sizes[order])]


def columns_of(lengths: np.ndarray) -> np.ndarray:
    """For runs of the given lengths laid end to end: each value's index within its run."""
    return np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def pack(
    ids: np.ndarray,
    labels: np.ndarray,
    lengths: np.ndarray,
    seg_b: np.ndarray,
    sizes: np.ndarray,
    width: int,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """Rows padded one per line (`ids`, `labels` -1 where unmasked: (rows, t)) -> `len(sizes)`
    packed sequences of `width` tokens, `sizes[i]` consecutive rows in sequence i.

    Returns (packs, width) arrays input_ids, token_type_ids, position_ids, row_ids (the row of
    each token, -1 on padding), attention_mask (1 on real tokens); flat indices into packs x
    width: mlm_positions (ascending) with mlm_labels, cls_positions (one per row, in row order).
    """
    n, b = len(lengths), len(sizes)
    pack_of_row = np.repeat(np.arange(b), sizes)
    if n == 0 or sizes.min() < 1 or sizes.sum() != n:
        raise ValueError("packing: every packed sequence takes at least one of the rows")
    starts = np.cumsum(lengths) - lengths
    offset = starts - np.repeat(starts[np.cumsum(sizes) - sizes], sizes)  # within its pack
    if int((offset + lengths).max()) > width:
        raise ValueError(f"packing: a packed sequence is longer than {width} tokens")
    row = np.repeat(np.arange(n), lengths)
    col = columns_of(lengths)
    dest = pack_of_row[row] * width + offset[row] + col
    out = {
        "input_ids": np.full(b * width, pad_id, np.int64),
        "token_type_ids": np.zeros(b * width, np.int64),
        "position_ids": np.zeros(b * width, np.int64),
        "row_ids": np.full(b * width, -1, np.int64),
        "attention_mask": np.zeros(b * width, np.int64),
    }
    out["input_ids"][dest] = ids[row, col]
    out["token_type_ids"][dest] = col >= seg_b[row]
    out["position_ids"][dest] = col
    out["row_ids"][dest] = row
    out["attention_mask"][dest] = 1
    packed_labels = np.full(b * width, -1, np.int64)
    packed_labels[dest] = labels[row, col]
    out = {k: v.reshape(b, width) for k, v in out.items()}
    out["mlm_positions"] = np.flatnonzero(packed_labels >= 0)
    out["mlm_labels"] = packed_labels[out["mlm_positions"]]
    out["cls_positions"] = pack_of_row * width + offset
    return out
