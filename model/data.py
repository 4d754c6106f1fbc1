"""The shard loader: memory-mapped Arrow shards -> padded BERT batches, deterministic and resumable.

The order of one epoch is a pure function of (seed, epoch), the same on every rank:

1. the shards are permuted;
2. each run of `shuffle_window` consecutive shards is a window whose rows are permuted together;
3. the epoch's rows, window after window, are cut into global batches of `batch_size x world_size`
   rows, and rank r takes the r-th slice of each, so ranks never overlap and lose nothing but the
   last incomplete global batch.

With `pack`, the unit of an epoch is a packed sequence instead of a row: the rows of each shard
are packed into sequences of the set's max_seq_length (`model.packing`: the plan depends on the
shard's row lengths alone, so every epoch has the same number of packed sequences; which rows of
equal length share a sequence is drawn from (seed, epoch)), a window's packed sequences are
permuted together, and global batches are cut from them as from rows.

A position `p = epoch * batches_per_epoch + k` names one batch of this rank and `batch(p)` builds
it from scratch. Resuming is therefore exact and costs nothing, and DataLoader worker w of W
simply builds positions `start + w, start + w + W, ...`, which the DataLoader yields in order.
Collation is vectorised over the shards' flat numpy buffers: no per-row Python.
"""

from __future__ import annotations

import math
import os
import shlex
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from model import packing
from model.config import flag_hint
from model.shard_cache import open_set
from model.shard_checks import check_offsets, check_shard, check_shard_bytes
from schemas.manifest import MANIFEST_NAME
from schemas.masking import MaskingRule, mask_padded
from schemas.reader import ShardSet
from schemas.shard import ShardColumns, segment_gather

# Distinct random streams drawn from (seed, epoch, purpose, ...).
_SHARD_ORDER, _WINDOW_ROWS, _MASKING, _PACKING = 0, 1, 2, 3
PAD_MULTIPLE = 8


@dataclass(frozen=True)
class LoaderConfig:
    batch_size: int  # sequences per batch on this rank
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    shuffle: bool = True  # False: manifest order, rows in order (evaluation)
    shuffle_window: int = 4  # consecutive shards whose rows are shuffled together
    remask: bool = False  # draw fresh masks (same 80/10/10 rule) instead of the shards' own
    mask_prob: float = 0.0  # with remask: the share of pieces masked (0: the shards' rate)
    drop_last: bool = True  # False: keep the last, partial global batch (evaluation)
    pack: bool = False  # batch_size packed sequences of max_seq_length instead of padded rows

    def __post_init__(self):
        if self.batch_size < 1 or self.shuffle_window < 1:
            raise ValueError("loader: batch_size and shuffle_window must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"loader: rank {self.rank} outside world size {self.world_size}")


def masking_rule(shards: ShardSet, mask_prob: float = 0.0) -> MaskingRule:
    """The shards' own masking rule (`schemas.masking`), for dynamic re-masking; with
    `mask_prob`, at that rate, the per-row cap (max_predictions_per_seq) scaled with it, so that
    a full row gets its share (20 of 128 at 0.15 -> 40 at 0.30)."""
    config = shards.shard_config
    try:
        rule = MaskingRule.from_vocab(shards.vocab, config)
    except ValueError as e:
        raise ValueError(
            f"{shards.directory}/{MANIFEST_NAME}: {e}; rebuild the shards or train "
            "without --remask (make: drop it from ARGS)"
        ) from None
    if not mask_prob:
        return rule
    cap = math.ceil(rule.max_predictions * mask_prob / rule.masked_lm_prob - 1e-9)
    return replace(rule, masked_lm_prob=mask_prob, max_predictions=max(1, cap))


def open_shards(directory: str) -> ShardSet:
    """Open a shard set for training, refusing what cannot be trained on."""
    if os.path.isdir(directory) and not os.listdir(directory):
        raise ValueError(
            f"{directory} is empty: no {MANIFEST_NAME}, no shards; build a shard set there "
            f"with `make shards OUT={shlex.quote(directory)}`"
        )
    shards = open_set(directory)  # a gs:// set reads its shards through a bounded local cache
    if not shards.manifest.shards or shards.num_rows == 0:
        raise ValueError(
            f"{directory}/{MANIFEST_NAME} lists no rows ({len(shards)} shards): the corpus "
            "produced no instances; check the input and rebuild with `make shards`"
        )
    if len(shards.vocab) != shards.manifest.vocab_size:
        raise ValueError(
            f"{directory}/vocab.txt has {len(shards.vocab)} pieces but the manifest says "
            f"{shards.manifest.vocab_size}; the shard set is inconsistent, rebuild it"
        )
    max_seq_length(shards)
    return shards


def max_seq_length(shards: ShardSet) -> int:
    """The manifest's max_seq_length: the longest row the loader lets through."""
    return shards.shard_config.max_seq_length


# (shard index in the manifest, first row, end row): a run of rows of one shard.
Part = tuple[int, int, int]


def whole_shards(shards: ShardSet, indices: Sequence[int]) -> list[Part]:
    return [(i, 0, shards.manifest.shards[i].rows) for i in indices]


class PretrainingData:
    """The batches of one rank over some shards of a set (or runs of their rows), addressed by
    position. `parts` are manifest shard indices (whole shards) or `Part` triples."""

    def __init__(self, shards: ShardSet, parts: Sequence[int | Part], cfg: LoaderConfig):
        parts = [whole_shards(shards, [p])[0] if isinstance(p, int) else p for p in parts]
        self.shards, self.cfg = shards, cfg
        self.indices = [p[0] for p in parts]
        self.first = np.array([p[1] for p in parts], np.int64)
        self.rows = np.array([p[2] - p[1] for p in parts], np.int64)
        self.pad_id = shards.vocab.special_ids.pad
        self.vocab_size = len(shards.vocab)
        self.max_length = max_seq_length(shards)
        self.rule = masking_rule(shards, cfg.mask_prob) if cfg.remask else None
        self.global_batch = cfg.batch_size * cfg.world_size
        self.total_rows = int(self.rows.sum())
        for i in sorted(set(self.indices)):
            check_shard_bytes(shards, i)
            check_shard(shards, i, shards.table(i))
        # What an epoch is cut into: rows, or with `pack` each part's packed sequences.
        self.plans = [self._plan(s) for s in range(len(self.indices))] if cfg.pack else None
        self.units = np.array([p.packs for p in self.plans]) if self.plans else self.rows
        self.total_units = int(self.units.sum())
        whole, part = divmod(self.total_units, self.global_batch)
        self.batches_per_epoch = whole + (0 if cfg.drop_last or not part else 1)
        if self.batches_per_epoch == 0:
            unit = "packed sequences" if cfg.pack else "rows"
            raise ValueError(
                f"{shards.directory}: the {len(self.indices)} shard(s) used here hold "
                f"{self.total_units} {unit}, fewer than one global batch of {self.global_batch} "
                "(batch size x world size); use a smaller "
                f"{flag_hint('--batch-size', 'N')} or more data"
            )
        self._reset_caches()

    @property
    def rows_per_unit(self) -> float:
        """Rows per packed sequence on average (1 without packing): a packed batch of B
        sequences holds B x this many rows, the tokens of that many padded rows."""
        return self.total_rows / max(self.total_units, 1)

    def _lengths(self, local: int, columns: ShardColumns | None = None) -> np.ndarray:
        """The row lengths of part `local`: from its open columns, else from the shard's
        offsets alone (its ids are not read)."""
        if columns is not None:
            lengths = np.diff(columns.input_offsets)
        else:
            chunks = self.shards.table(self.indices[local]).column("input_ids").chunks
            lengths = np.concatenate([np.diff(c.offsets.to_numpy()) for c in chunks] or [[]])
        lo = int(self.first[local])
        return lengths[lo : lo + int(self.rows[local])].astype(np.int64)

    def _plan(self, local: int) -> packing.Plan:
        lengths = self._lengths(local)
        if len(lengths) and lengths.max() > self.max_length:
            path = self.shards.paths[self.indices[local]]
            row = int(self.first[local] + np.argmax(lengths))
            raise ValueError(
                f"{path}: row {row} does not fit the model ({int(lengths.max())} pieces, at "
                f"most {self.max_length}); the set is damaged: run `make validate` and rebuild it"
            )
        return packing.plan(np.maximum(lengths, 1), self.max_length)

    def _reset_caches(self) -> None:
        self._columns: OrderedDict[int, ShardColumns] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._layouts: OrderedDict[int, tuple[list[np.ndarray], np.ndarray]] = OrderedDict()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_columns=None, _windows=None, _layouts=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_caches()

    def batch(self, position: int) -> dict[str, torch.Tensor] | None:
        """The batch at `position`, or None when this rank's slice of a last partial batch is
        empty. Tensors: input_ids, token_type_ids, attention_mask (batch, length), mlm_positions
        and mlm_labels (flat over batch x length), nsp_labels (batch,). Packed: the same over
        (packed sequences, max_seq_length rounded up to 8), with position_ids, row_ids and
        cls_positions (`model.packing.pack`), nsp_labels one per row."""
        epoch = position // self.batches_per_epoch
        local, rows, sizes = self._units_at(position)
        if len(rows) == 0:
            return None
        ids, labels, lengths, seg_b, nsp = self._collate(local, rows)
        if self.rule is not None:
            rng = np.random.default_rng((self.cfg.seed, epoch, _MASKING, position, self.cfg.rank))
            originals = np.where(labels >= 0, labels, ids)
            ids, labels = mask_padded(originals, lengths, seg_b, self.rule, rng)
        if self.cfg.pack:
            width = -(-self.max_length // PAD_MULTIPLE) * PAD_MULTIPLE
            arrays = packing.pack(ids, labels, lengths, seg_b, sizes, width, self.pad_id)
            arrays["nsp_labels"] = nsp
            return {k: torch.from_numpy(v) for k, v in arrays.items()}
        return _tensors(ids, labels, lengths, seg_b, nsp)

    def rows_at(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(manifest shard index, row) of every sequence in the batch at `position`."""
        local, rows, _ = self._units_at(position)
        return np.asarray(self.indices, np.int64)[local], rows

    def _units_at(self, position: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(local shard, row) of every row of the batch's units, laid unit after unit, and the
        rows per unit (all 1 without packing)."""
        epoch, k = divmod(position, self.batches_per_epoch)
        start = k * self.global_batch + self.cfg.rank * self.cfg.batch_size
        stop = min(start + self.cfg.batch_size, self.total_units)
        windows, bounds = self._layout(epoch)
        j = int(np.searchsorted(bounds, start, side="right")) - 1
        parts = []
        while start < stop:
            shard, row, unit_start = self._window(epoch, j, windows[j])
            lo, hi = start - bounds[j], min(stop, bounds[j + 1]) - bounds[j]
            a, b = unit_start[lo], unit_start[hi]
            parts.append((shard[a:b], row[a:b], np.diff(unit_start[lo : hi + 1])))
            start, j = bounds[j] + hi, j + 1
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))

    def _layout(self, epoch: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The epoch's windows (local shard indices) and their row boundaries."""
        if epoch not in self._layouts:
            n, w = len(self.indices), self.cfg.shuffle_window
            order = np.arange(n)
            if self.cfg.shuffle:
                order = np.random.default_rng((self.cfg.seed, epoch, _SHARD_ORDER)).permutation(n)
            windows = [order[i : i + w] for i in range(0, n, w)]
            sizes = [int(self.units[win].sum()) for win in windows]
            self._layouts[epoch] = (windows, np.concatenate([[0], np.cumsum(sizes)]))
            _trim(self._layouts, 2)
        return self._layouts[epoch]

    def _window(self, epoch: int, j: int, window: np.ndarray) -> tuple[np.ndarray, ...]:
        """(local shard, row) of every row of window j, laid unit after unit in the epoch's
        order, and where each unit starts in them (len: units + 1)."""
        key = (epoch, j)
        if key not in self._windows:
            if self.cfg.pack:
                self._windows[key] = self._packed_window(epoch, j, window)
            else:
                shard = np.repeat(window, self.rows[window])
                row = np.concatenate([self.first[s] + np.arange(self.rows[s]) for s in window])
                if self.cfg.shuffle:
                    rng = np.random.default_rng((self.cfg.seed, epoch, _WINDOW_ROWS, j))
                    p = rng.permutation(len(row))
                    shard, row = shard[p], row[p]
                self._windows[key] = (shard, row, np.arange(len(row) + 1))
            _trim(self._windows, 2)
        return self._windows[key]

    def _packed_window(self, epoch: int, j: int, window: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each shard's plan filled with its rows (ties among equal lengths drawn from (seed,
        epoch, shard)), then the window's packed sequences permuted together."""
        shards, rows, sizes = [], [], []
        for s in window:
            plan = self.plans[s]
            order = np.arange(len(plan.slots))
            if self.cfg.shuffle:
                rng = np.random.default_rng((self.cfg.seed, epoch, _PACKING, int(s)))
                order = rng.permutation(len(order))
            lengths = self._lengths(s, self._shard(int(s)))
            filled = packing.assign(np.maximum(lengths, 1), plan, order)
            shards.append(np.full(len(filled), s, np.int64))
            rows.append(self.first[s] + filled)
            sizes.append(plan.sizes)
        shard, row, size = (np.concatenate(x) for x in (shards, rows, sizes))
        if self.cfg.shuffle:
            rng = np.random.default_rng((self.cfg.seed, epoch, _WINDOW_ROWS, j))
            p = rng.permutation(len(size))
            take = packing.shuffle_packs(np.arange(len(row)), size, p)
            shard, row, size = shard[take], row[take], size[p]
        return shard, row, np.concatenate([[0], np.cumsum(size)])

    def _shard(self, local: int) -> ShardColumns:
        """Flat numpy views of a memory-mapped shard, the last few kept open."""
        if local in self._columns:
            self._columns.move_to_end(local)
        else:
            cols = ShardColumns.from_table(self.shards.table(self.indices[local]))
            check_offsets(self.shards.paths[self.indices[local]], cols)
            self._columns[local] = cols
            _trim(self._columns, 2 * self.cfg.shuffle_window)
        return self._columns[local]

    def _collate(self, local: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """Padded ids (batch, length), labels (-1: not masked), lengths, B starts, NSP labels."""
        b = len(rows)
        parts = []
        for s in np.unique(local):
            sel = np.flatnonzero(local == s)
            cols, r = self._shard(int(s)), rows[sel]
            ids, lens = _take(cols.input_ids, cols.input_offsets, r)
            pos, mlens = _take(cols.masked_positions, cols.masked_offsets, r)
            lab, _ = _take(cols.masked_labels, cols.masked_offsets, r)
            self._check_rows(int(s), r, ids, lens, pos, lab, mlens)
            parts.append((sel, ids, lens, pos, lab, mlens, cols, r))
        lengths = np.zeros(b, np.int64)
        for sel, _, lens, *_ in parts:
            lengths[sel] = lens
        t = -(-int(lengths.max()) // PAD_MULTIPLE) * PAD_MULTIPLE
        ids = np.full((b, t), self.pad_id, np.int64)
        labels = np.full((b, t), -1, np.int64)
        seg_b, nsp = np.zeros(b, np.int64), np.zeros(b, np.int64)
        for sel, flat, lens, pos, lab, mlens, cols, r in parts:
            ids[np.repeat(sel, lens), _columns_of(lens)] = flat
            labels[np.repeat(sel, mlens), pos] = lab
            seg_b[sel] = cols.segment_b_start[r]
            nsp[sel] = cols.is_random_next[r]
        return ids, labels, lengths, seg_b, nsp

    def _check_rows(self, local, r, ids, lens, pos, lab, mlens) -> None:
        """Refuse rows the model cannot take (a few vectorised comparisons per batch): longer
        than max_seq_length, ids or labels outside the vocab, masked positions outside the row."""
        v, n = self.vocab_size, self.max_length
        bad = lens > n
        if len(ids):
            bad |= np.maximum.reduceat(ids, _starts(lens), dtype=np.int64) * (lens > 0) >= v
        if len(pos):
            over = (pos.astype(np.int64) >= np.repeat(lens, mlens)) | (lab.astype(np.int64) >= v)
            bad |= np.add.reduceat(over, _starts(mlens)) * (mlens > 0) > 0
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            path = self.shards.paths[self.indices[local]]
            raise ValueError(
                f"{path}: row {int(r[k])} does not fit the model ({int(lens[k])} pieces, at most "
                f"{n}; ids and labels below the vocab size {v}; masked positions inside the "
                "row); the set is damaged: run `make validate` and rebuild it"
            )


def _starts(lens: np.ndarray) -> np.ndarray:
    """Start of each run in values laid end to end, clipped for `reduceat` (empty runs are
    masked by the caller)."""
    starts = np.cumsum(lens) - lens
    return np.minimum(starts, max(int(lens.sum()) - 1, 0))


def _take(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """The concatenated values of `rows` of a flat list column, and their lengths."""
    starts = offsets[rows]
    lens = offsets[rows + 1] - starts
    return values[segment_gather(starts, lens)], lens


def _columns_of(lens: np.ndarray) -> np.ndarray:
    """For rows of the given lengths laid end to end: each value's index within its row."""
    return np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)


def _trim(cache: OrderedDict, size: int) -> None:
    while len(cache) > size:
        cache.popitem(last=False)


def _tensors(ids, labels, lengths, seg_b, nsp) -> dict[str, torch.Tensor]:
    ar = np.arange(ids.shape[1])
    attention = ar < lengths[:, None]
    segments = (ar >= seg_b[:, None]) & attention
    flat = np.flatnonzero(labels >= 0)
    return {
        "input_ids": torch.from_numpy(ids),
        "token_type_ids": torch.from_numpy(segments.astype(np.int64)),
        "attention_mask": torch.from_numpy(attention.astype(np.int64)),
        "mlm_positions": torch.from_numpy(flat),
        "mlm_labels": torch.from_numpy(labels.ravel()[flat]),
        "nsp_labels": torch.from_numpy(nsp),
    }
