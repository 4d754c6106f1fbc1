"""The reference's rows beside our shards, figure by figure (README, "Speed and fidelity").

The reference's TFRecords (`bench/tfrecord.py`) become the same flat columns as a shard
(`schemas.shard.ShardColumns`), and every figure below is computed the same way on both:

- mask / keep / random shares among selected pieces (the input id is `[MASK]`, the label itself,
  or another piece);
- random-next share (rows whose B comes from another document);
- mean row length and the share of rows under 64 pieces;
- selected pieces per candidate (candidates: the row's pieces less `[CLS]` and two `[SEP]`);
- the distribution of row lengths, two-sample Kolmogorov-Smirnov.

Beside the table, actual-next rows, masks undone, must hold the ids the reference's own
tokenizer gives for the input text: A and B each a contiguous run of them (`IdIndex`).

"Within sampling error" is |z| < 3 for a difference of two independent estimates (binomial or
Welch standard errors), and p > 0.001 for the KS test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.shard import ShardColumns

Z_LIMIT = 3.0  # |z| at or above this is outside sampling error
KS_ALPHA = 0.001
SHORT_ROW = 64  # "rows under 64 pieces"
# the shares of selected pieces, in the order of `RowFigures.kinds`
PIECE_FIGURES = (
    "[MASK] share of selected",
    "unchanged share of selected",
    "random share of selected",
)


# --- both sides as a shard's columns ------------------------------------------------------------


def reference_columns(features: dict[str, np.ndarray]) -> ShardColumns:
    """The reference's padded rows as a shard's flat columns (padding and zero weights dropped)."""
    mask = features["input_mask"].astype(bool)
    lengths = mask.sum(axis=1)
    weights = features["masked_lm_weights"] > 0
    counts = weights.sum(axis=1)
    seg = features["segment_ids"]
    return ShardColumns(
        input_ids=features["input_ids"][mask],
        input_offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        segment_b_start=np.argmax(seg == 1, axis=1),
        masked_positions=features["masked_lm_positions"][weights],
        masked_labels=features["masked_lm_ids"][weights],
        masked_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        is_random_next=features["next_sentence_labels"][:, 0].astype(bool),
    )


def concat_columns(parts: Sequence[ShardColumns]) -> ShardColumns:
    """Several shards' columns as one (offsets shifted)."""

    def offsets(name: str) -> np.ndarray:
        shifted, base = [np.zeros(1, np.int64)], 0
        for p in parts:
            off = getattr(p, name)
            shifted.append(off[1:] + base)
            base += int(off[-1])
        return np.concatenate(shifted)

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    return ShardColumns(
        input_ids=cat("input_ids").astype(np.int64),
        input_offsets=offsets("input_offsets"),
        segment_b_start=cat("segment_b_start").astype(np.int64),
        masked_positions=cat("masked_positions").astype(np.int64),
        masked_labels=cat("masked_labels").astype(np.int64),
        masked_offsets=offsets("masked_offsets"),
        is_random_next=cat("is_random_next").astype(bool),
    )


def shard_set_columns(directory: str) -> tuple[ShardColumns, int]:
    """All rows of a shard set, and its `[MASK]` id."""
    from schemas.reader import ShardSet

    shards = ShardSet.open(directory)
    parts = [ShardColumns.from_table(shards.table(i)) for i in range(len(shards))]
    return concat_columns(parts), shards.vocab.special_ids.mask


# --- figures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowFigures:
    """What the fidelity table compares, from one side's rows."""

    rows: int
    lengths: np.ndarray  # pieces per row
    random_next: np.ndarray  # bool per row
    per_candidate: np.ndarray  # selected pieces / candidates, per row
    selected: int  # selected pieces in all
    kinds: tuple[int, int, int]  # of them: [MASK], unchanged, another piece


def row_figures(cols: ShardColumns, mask_id: int) -> RowFigures:
    lengths = np.diff(cols.input_offsets)
    counts = np.diff(cols.masked_offsets)
    rows = np.repeat(np.arange(len(lengths)), counts)
    inputs = cols.input_ids[cols.input_offsets[:-1][rows] + cols.masked_positions]
    labels = cols.masked_labels
    n_mask = int(np.sum(inputs == mask_id))
    n_keep = int(np.sum((inputs != mask_id) & (inputs == labels)))
    return RowFigures(
        rows=len(lengths),
        lengths=lengths,
        random_next=np.asarray(cols.is_random_next, bool),
        per_candidate=counts / np.maximum(lengths - 3, 1),
        selected=len(labels),
        kinds=(n_mask, n_keep, len(labels) - n_mask - n_keep),
    )


def share_se(k1: int, n1: int, k2: int, n2: int) -> float:
    """Standard error of the difference of two binomial shares."""
    p1, p2 = k1 / max(n1, 1), k2 / max(n2, 1)
    return math.sqrt(p1 * (1 - p1) / max(n1, 1) + p2 * (1 - p2) / max(n2, 1))


def mean_se(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's standard error of the difference of two means."""
    return math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))


def ks_2samp(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic p). Ties make p conservative."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.concatenate((a, b))
    d = float(
        np.max(
            np.abs(
                np.searchsorted(a, grid, "right") / len(a)
                - np.searchsorted(b, grid, "right") / len(b)
            )
        )
    )
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    return d, kolmogorov_sf(lam)


def kolmogorov_sf(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution."""
    if lam < 0.2:
        return 1.0
    total = sum(2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, total))


def figure_values(f: RowFigures) -> dict[str, float]:
    """The compared figures of one side, by name."""
    out = {name: k / max(f.selected, 1) for name, k in zip(PIECE_FIGURES, f.kinds, strict=True)}
    out["random-next share"] = float(f.random_next.mean())
    out["mean row length"] = float(f.lengths.mean())
    out[f"share of rows under {SHORT_ROW} pieces"] = float(np.mean(f.lengths < SHORT_ROW))
    out["selected pieces per candidate"] = float(f.per_candidate.mean())
    return out


def row_se(ref: RowFigures, ours: RowFigures) -> dict[str, float]:
    """Standard error of each difference as if rows were independent draws."""
    out = {name: share_se(k, ref.selected, k2, ours.selected) for name, k, k2 in _kinds(ref, ours)}
    k_ref, k_ours = int(ref.random_next.sum()), int(ours.random_next.sum())
    out["random-next share"] = share_se(k_ref, ref.rows, k_ours, ours.rows)
    out["mean row length"] = mean_se(ref.lengths, ours.lengths)
    short_ref = int(np.sum(ref.lengths < SHORT_ROW))
    short_ours = int(np.sum(ours.lengths < SHORT_ROW))
    out[f"share of rows under {SHORT_ROW} pieces"] = share_se(
        short_ref, ref.rows, short_ours, ours.rows
    )
    out["selected pieces per candidate"] = mean_se(ref.per_candidate, ours.per_candidate)
    return out


def _kinds(ref: RowFigures, ours: RowFigures):
    return zip(PIECE_FIGURES, ref.kinds, ours.kinds, strict=True)


def pooled(figures: Sequence[RowFigures]) -> RowFigures:
    """Several builds' rows as one sample."""
    kinds = tuple(int(sum(f.kinds[i] for f in figures)) for i in range(3))
    return RowFigures(
        rows=sum(f.rows for f in figures),
        lengths=np.concatenate([f.lengths for f in figures]),
        random_next=np.concatenate([f.random_next for f in figures]),
        per_candidate=np.concatenate([f.per_candidate for f in figures]),
        selected=sum(f.selected for f in figures),
        kinds=kinds,
    )


def compare(ref: RowFigures, ours: Sequence[RowFigures]) -> list[dict]:
    """The fidelity table: the reference against our build with one or more seeds.

    The 80/10/10 choice is drawn afresh for every selected piece, so for the three shares of
    selected pieces the binomial z over pieces (`z_rows`, our seeds pooled) is the right error.
    Rows are not independent: the rows of one document pass share its target length (a long
    document given a short target makes hundreds of short rows), so for the row figures the
    row-level z understates the error, and with two or more seeds it is measured instead:
    `z` divides the distance from the reference to our mean by the spread of our seeds
    (sd * sqrt(1 + 1/n), the error of predicting one more run), never by less than the
    row-level error (a spread from a few seeds is itself uncertain). The KS distance of the
    reference to our seeds (their mean) is set against the largest distance between two seeds.
    """
    n = len(ours)
    ref_v, pool = figure_values(ref), pooled(ours)
    pool_v, se_rows = figure_values(pool), row_se(ref, pool)
    seeds = [figure_values(f) for f in ours]
    out = []
    for name, ref_value in ref_v.items():
        values = np.array([s[name] for s in seeds])
        sd = float(np.std(values, ddof=1)) if n > 1 else 0.0
        by_rows = name in PIECE_FIGURES or n < 2
        # a spread from a few seeds is itself uncertain: never below the row-level error
        se = se_rows[name] if by_rows else max(sd * math.sqrt(1 + 1 / n), se_rows[name])
        diff = (pool_v[name] if by_rows else values.mean()) - ref_value
        z = float(diff / se) if se > 0 else 0.0
        z_rows = (pool_v[name] - ref_value) / se_rows[name] if se_rows[name] > 0 else 0.0
        out.append(
            {
                "figure": name,
                "reference": ref_value,
                "ours": float(values.mean()),
                "seeds": n,
                "seed_sd": sd,
                "z_rows": float(z_rows),
                "z": z,
                "test": "z_rows" if by_rows else "z_seeds",
                "within": bool(abs(z) < Z_LIMIT),
            }
        )
    to_ref = [ks_2samp(ref.lengths, f.lengths) for f in ours]
    between = [ks_2samp(a.lengths, b.lengths)[0] for i, a in enumerate(ours) for b in ours[i + 1 :]]
    d = float(np.mean([x[0] for x in to_ref]))
    p = to_ref[0][1]
    out.append(
        {
            "figure": "row lengths: KS distance to the reference",
            "reference": 0.0,
            "ours": d,
            "seeds": n,
            "p_rows": p,
            "seed_ks_max": max(between, default=float("nan")),
            "test": "ks_seeds" if between else "ks_rows",
            "within": bool(d <= max(between)) if between else bool(p > KS_ALPHA),
        }
    )
    return out


def against_reference(
    tfrecord: str, token_ids: str, our_sets: list[str], seed: int, sample: int = 5000
) -> tuple[list[dict], dict[str, tuple[int, int]]]:
    """The reference's TFRecords (and its tokenizer's ids) against our shard sets (one per
    seed): the fidelity table, and (rows checked, rows matched) of the ids check per side."""
    from bench.tfrecord import read_reference
    from schemas.vocab import Vocab

    ours, first = [], None
    for directory in our_sets:
        cols, mask_id = shard_set_columns(directory)
        ours.append(row_figures(cols, mask_id))
        first = cols if first is None else first
    vocab = Vocab.load(f"{our_sets[0]}/vocab.txt")
    ref_cols = reference_columns(read_reference([tfrecord]))
    table = compare(row_figures(ref_cols, vocab.special_ids.mask), ours)
    index = IdIndex(np.load(token_ids))
    rng = np.random.default_rng(seed)
    checks = {
        "ours": actual_next_match(first, index, sample, rng),
        "the reference itself": actual_next_match(ref_cols, index, sample, rng),
    }
    return table, checks


# --- the reference tokenizer's ids in our rows -------------------------------------------------


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
