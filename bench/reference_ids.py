"""Whether our rows hold the ids the reference's own tokenizer gives for the input text: with
its masks undone, an actual-next row's A and B must each be a contiguous run of those ids."""

from __future__ import annotations

import numpy as np

from schemas.shard import ShardColumns


class IdIndex:
    """Finds whether a run of ids occurs contiguously in a stream (one document after another,
    -1 between documents): a sorted index of the stream's k-grams, candidates then compared."""

    K = 6

    def __init__(self, stream: np.ndarray):
        self.stream = np.asarray(stream, np.int64)
        self.keys = self._grams(self.stream)
        self.order = np.argsort(self.keys, kind="stable")
        self.sorted = self.keys[self.order]
        self.raw = self.stream.astype("<i8").tobytes()

    @classmethod
    def _grams(cls, s: np.ndarray) -> np.ndarray:
        n = len(s) - cls.K + 1
        if n <= 0:
            return np.zeros(0, np.uint64)
        u = s.astype(np.uint64)
        key = np.zeros(n, np.uint64)
        with np.errstate(over="ignore"):
            for j in range(cls.K):
                key = key * np.uint64(1_000_003) + u[j : j + n]
        return key

    def contains(self, run: np.ndarray) -> bool:
        run = np.asarray(run, np.int64)
        if len(run) == 0:
            return True
        if len(run) < self.K:
            return self._find_short(run)
        key = self._grams(run[: self.K])[0]
        i = int(np.searchsorted(self.sorted, key))
        while i < len(self.sorted) and self.sorted[i] == key:
            pos = int(self.order[i])
            if np.array_equal(self.stream[pos : pos + len(run)], run):
                return True
            i += 1
        return False

    def _find_short(self, run: np.ndarray) -> bool:
        needle = run.astype("<i8").tobytes()
        start = self.raw.find(needle)
        while start >= 0:
            if start % 8 == 0:
                return True
            start = self.raw.find(needle, start + 1)
        return False


def original_ids(cols: ShardColumns, row: int) -> np.ndarray:
    """A row's ids with its masking undone."""
    ids = np.array(cols.input_ids[cols.input_offsets[row] : cols.input_offsets[row + 1]], np.int64)
    m0, m1 = cols.masked_offsets[row], cols.masked_offsets[row + 1]
    ids[np.asarray(cols.masked_positions[m0:m1], np.int64)] = cols.masked_labels[m0:m1]
    return ids


def actual_next_match(
    cols: ShardColumns, index: IdIndex, sample: int, rng: np.random.Generator
) -> tuple[int, int]:
    """(rows checked, rows whose A and B each occur in the reference tokenizer's ids), over a
    random sample of actual-next rows."""
    rows = np.flatnonzero(~np.asarray(cols.is_random_next, bool))
    if len(rows) > sample:
        rows = np.sort(rng.choice(rows, sample, replace=False))
    matched = 0
    for r in rows:
        ids = original_ids(cols, int(r))
        b = int(cols.segment_b_start[r])
        if index.contains(ids[1 : b - 1]) and index.contains(ids[b:-1]):
            matched += 1
    return len(rows), matched
