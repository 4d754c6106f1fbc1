"""The shard loader: memory-mapped Arrow shards -> padded BERT batches, deterministic and resumable.

The order of one epoch is a pure function of (seed, epoch), the same on every rank:

1. the shards are permuted;
2. each run of `shuffle_window` consecutive shards is a window whose rows are permuted together;
3. the epoch's rows, window after window, are cut into global batches of `batch_size x world_size`
   rows, and rank r takes the r-th slice of each, so ranks never overlap and lose nothing but the
   last incomplete global batch.

A position `p = epoch * batches_per_epoch + k` names one batch of this rank and `batch(p)` builds
it from scratch. Resuming is therefore exact and costs nothing, and DataLoader worker w of W
simply builds positions `start + w, start + w + W, ...`, which the DataLoader yields in order.
Collation is vectorised over the shards' flat numpy buffers: no per-row Python.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from model.config import flag_hint
from schemas.manifest import MANIFEST_NAME
from schemas.masking import MaskingRule, mask_padded
from schemas.reader import ShardSet
from schemas.shard import ShardColumns, schema_metadata, schema_problem, segment_gather

# Distinct random streams drawn from (seed, epoch, purpose, ...).
_SHARD_ORDER, _WINDOW_ROWS, _MASKING = 0, 1, 2
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
    drop_last: bool = True  # False: keep the last, partial global batch (evaluation)

    def __post_init__(self):
        if self.batch_size < 1 or self.shuffle_window < 1:
            raise ValueError("loader: batch_size and shuffle_window must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"loader: rank {self.rank} outside world size {self.world_size}")


def masking_rule(shards: ShardSet) -> MaskingRule:
    """The shards' own masking rule (`schemas.masking`), for dynamic re-masking."""
    config = shards.shard_config
    try:
        return MaskingRule.from_vocab(shards.vocab, config)
    except ValueError as e:
        raise ValueError(
            f"{shards.directory}/{MANIFEST_NAME}: {e}; rebuild the shards or train "
            "without --remask (make: drop it from ARGS)"
        ) from None


def open_shards(directory: str) -> ShardSet:
    """Open a shard set for training, refusing what cannot be trained on."""
    if os.path.isdir(directory) and not os.listdir(directory):
        raise ValueError(
            f"{directory} is empty: no {MANIFEST_NAME}, no shards; build a shard set there "
            f"with `make shards OUT={directory}`"
        )
    shards = ShardSet.open(directory)
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


def check_shard(shards: ShardSet, index: int, table) -> None:
    """Refuse a shard whose schema, vocab or row count disagrees with what this code reads."""
    path, entry = shards.paths[index], shards.manifest.shards[index]
    md = schema_metadata(table.schema)
    problem = schema_problem(md["schema_name"], md["schema_version"])
    if problem:
        raise ValueError(f"{path}: shard {problem}; rebuild the shards with this version")
    size = shards.manifest.vocab_size
    id_type = table.schema.field("input_ids").type.value_type
    if md["vocab_size"] != size or size > 2**id_type.bit_width:
        raise ValueError(
            f"{path}: schema metadata says {md['vocab_size']} pieces in {id_type} ids, the "
            f"manifest {size}; the ids cannot address this vocab, rebuild the set"
        )
    if md["vocab_sha256"] != shards.manifest.vocab_sha256:
        raise ValueError(
            f"{path}: built with vocab {md['vocab_sha256']}, the manifest names "
            f"{shards.manifest.vocab_sha256}; the shard set mixes vocabularies, rebuild it"
        )
    if table.num_rows != entry.rows:
        raise ValueError(
            f"{path}: {table.num_rows} rows, the manifest says {entry.rows}; the shard set is "
            "inconsistent (run `make validate`), rebuild it"
        )


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
        self.rule = masking_rule(shards) if cfg.remask else None
        self.global_batch = cfg.batch_size * cfg.world_size
        self.total_rows = int(self.rows.sum())
        whole, part = divmod(self.total_rows, self.global_batch)
        self.batches_per_epoch = whole + (0 if cfg.drop_last or not part else 1)
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"{shards.directory}: the {len(self.indices)} shard(s) used here hold "
                f"{self.total_rows} rows, fewer than one global batch of {self.global_batch} "
                "(batch size x world size); use a smaller "
                f"{flag_hint('--batch-size', 'N')} or more data"
            )
        for i in sorted(set(self.indices)):
            check_shard(shards, i, shards.table(i))
        self._reset_caches()

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
        and mlm_labels (flat over batch x length), nsp_labels (batch,)."""
        epoch = position // self.batches_per_epoch
        local, rows = self._rows_at(position)
        if len(rows) == 0:
            return None
        ids, labels, lengths, seg_b, nsp = self._collate(local, rows)
        if self.rule is not None:
            rng = np.random.default_rng((self.cfg.seed, epoch, _MASKING, position, self.cfg.rank))
            originals = np.where(labels >= 0, labels, ids)
            ids, labels = mask_padded(originals, lengths, seg_b, self.rule, rng)
        return _tensors(ids, labels, lengths, seg_b, nsp)

    def rows_at(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(manifest shard index, row) of every sequence in the batch at `position`."""
        local, rows = self._rows_at(position)
        return np.asarray(self.indices, np.int64)[local], rows

    def _rows_at(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        epoch, k = divmod(position, self.batches_per_epoch)
        start = k * self.global_batch + self.cfg.rank * self.cfg.batch_size
        stop = min(start + self.cfg.batch_size, self.total_rows)
        windows, bounds = self._layout(epoch)
        j = int(np.searchsorted(bounds, start, side="right")) - 1
        parts = []
        while start < stop:
            shard, row = self._window(epoch, j, windows[j])
            lo, hi = start - bounds[j], min(stop, bounds[j + 1]) - bounds[j]
            parts.append((shard[lo:hi], row[lo:hi]))
            start, j = bounds[j] + hi, j + 1
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _layout(self, epoch: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The epoch's windows (local shard indices) and their row boundaries."""
        if epoch not in self._layouts:
            n, w = len(self.indices), self.cfg.shuffle_window
            order = np.arange(n)
            if self.cfg.shuffle:
                order = np.random.default_rng((self.cfg.seed, epoch, _SHARD_ORDER)).permutation(n)
            windows = [order[i : i + w] for i in range(0, n, w)]
            sizes = [int(self.rows[win].sum()) for win in windows]
            self._layouts[epoch] = (windows, np.concatenate([[0], np.cumsum(sizes)]))
            _trim(self._layouts, 2)
        return self._layouts[epoch]

    def _window(self, epoch: int, j: int, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(local shard, row) of every row of window j, in the epoch's order."""
        key = (epoch, j)
        if key not in self._windows:
            shard = np.repeat(window, self.rows[window])
            row = np.concatenate([self.first[s] + np.arange(self.rows[s]) for s in window])
            if self.cfg.shuffle:
                rng = np.random.default_rng((self.cfg.seed, epoch, _WINDOW_ROWS, j))
                p = rng.permutation(len(row))
                shard, row = shard[p], row[p]
            self._windows[key] = (shard, row)
            _trim(self._windows, 2)
        return self._windows[key]

    def _shard(self, local: int) -> ShardColumns:
        """Flat numpy views of a memory-mapped shard, the last few kept open."""
        if local in self._columns:
            self._columns.move_to_end(local)
        else:
            cols = ShardColumns.from_table(self.shards.table(self.indices[local]))
            _check_offsets(self.shards.paths[self.indices[local]], cols)
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


def _check_offsets(path: str, cols: ShardColumns) -> None:
    """Offsets that start at 0, never decrease and end at their column's length."""
    for name, off, values in (
        ("input_ids", cols.input_offsets, cols.input_ids),
        ("masked_positions", cols.masked_offsets, cols.masked_positions),
    ):
        if off[-1] != len(values) or (len(off) > 1 and np.any(np.diff(off) < 0)):
            raise ValueError(
                f"{path}: the {name} offsets overrun or run backwards; the shard is damaged: run "
                "`make validate` and rebuild it"
            )
    if len(cols.masked_labels) != len(cols.masked_positions):
        raise ValueError(f"{path}: masked_labels and masked_positions differ in length; rebuild it")


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


class _Positions(IterableDataset):
    """Worker w of W builds positions start + w, start + w + W, ... (all of them when W = 1)."""

    def __init__(self, data: PretrainingData, start: int, stop: int | None):
        self.data, self.start, self.stop = data, start, stop

    def __iter__(self) -> Iterator[dict[str, torch.Tensor] | None]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        first = self.start + worker
        positions = (
            itertools.count(first, workers)
            if self.stop is None
            else range(first, self.stop, workers)
        )
        for p in positions:
            yield self.data.batch(p)


def batches(
    data: PretrainingData,
    start: int = 0,
    stop: int | None = None,
    workers: int = 0,
    pin_memory: bool = False,
) -> Iterator[dict[str, torch.Tensor]]:
    """Batches at positions start, start + 1, ... (endless when `stop` is None), built in the
    calling process or by `workers` DataLoader processes; the sequence is the same either way."""
    if workers == 0:
        stream: Iterator = iter(_Positions(data, start, stop))
    else:
        stream = iter(
            DataLoader(
                _Positions(data, start, stop),
                batch_size=None,
                num_workers=workers,
                pin_memory=pin_memory,
                generator=torch.Generator().manual_seed(0),  # leaves the global RNG alone
            )
        )
    return (b for b in stream if b is not None)
