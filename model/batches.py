"""Batches of a `PretrainingData` as a stream: built in the calling process, or by DataLoader
worker processes, each building every W-th position; the sequence is the same either way."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from model.data import PretrainingData


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
