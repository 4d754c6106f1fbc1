"""Batches of a `PretrainingData` as a stream: built in the calling process, or by DataLoader
worker processes, each building every W-th position; the sequence is the same either way."""

from __future__ import annotations

import itertools
import os
import re
import signal
import time
from collections.abc import Iterator
from functools import partial

import torch
from joblib import cpu_count
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torch.utils.data._utils import signal_handling

from model.data import PretrainingData
from schemas.command_line import exception_chain
from schemas.interrupts import release_in_child, signals_held


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
        # Ctrl-C and SIGTERM wait while the workers are forked (`schemas.interrupts`: one that
        # lands in a fork's at-fork hooks is lost); each worker lets them in again.
        try:
            with signals_held() as mask:
                stream = iter(
                    DataLoader(
                        _Positions(data, start, stop),
                        batch_size=None,
                        num_workers=workers,
                        pin_memory=pin_memory,
                        generator=torch.Generator().manual_seed(0),  # the global RNG untouched
                        worker_init_fn=partial(_release_in_worker, mask),
                    )
                )
        except BaseException:  # a signal held over the forks: the workers end now, not later
            stream = None
            raise
        # closed (the caller's loop ends, however it ends), it lets the loader's iterator go
        # at once, and the iterator joins its workers
        return _handed_over(stream)
    return (b for b in stream if b is not None)


def _handed_over(stream: Iterator) -> Iterator[dict[str, torch.Tensor]]:
    """The loader's batches. A worker killed while the parent takes a batch's memory from it
    (each tensor's file descriptor, over a connection to the worker) breaks that connection
    before the kernel tells the parent of the death: said then as torch says a worker's death,
    a RuntimeError naming it and its signal, not as the broken connection."""
    try:
        for b in stream:
            if b is not None:
                yield b
    except (ConnectionError, EOFError) as e:
        _raise_if_a_worker_died(e)
        raise


def _raise_if_a_worker_died(e: BaseException, wait_s: float = 1.0) -> None:
    """torch's RuntimeError for a loader worker that died, from `e`, once the kernel has it as
    dead (the connection breaks as the dying process closes its files, its death is known a
    moment later); returns after `wait_s` when no worker died."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            signal_handling._error_if_any_worker_fails()  # what torch's SIGCHLD handler calls
        except RuntimeError as died:
            raise died from e
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _release_in_worker(mask, worker_id: int) -> None:
    """A loader worker, as it starts: signals let in, with Python's own handlers (a Ctrl-C is
    torch's to handle in its worker loop, and the loader ends a worker with SIGTERM), not the
    command's, which raise for the parent's command to unwind."""
    release_in_child(mask, sigint=signal.default_int_handler, sigterm=signal.SIG_DFL)


WORKERS_PER_CPU = 4  # the most DataLoader workers per CPU, over this machine's ranks


def refuse_too_many_workers(workers: int) -> None:
    """--workers beyond 4 per CPU this machine gives training, shared by the ranks torchrun
    started on it (LOCAL_WORLD_SIZE): loading is CPU-bound, so more workers would only share the
    CPUs, each holding its own memory. The CPUs are those the process may use (joblib's count:
    its affinity and its cgroup's quota), as the pipeline's --workers counts them."""
    ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    cpus = max(1, cpu_count())
    most = WORKERS_PER_CPU * cpus // ranks
    if workers > most:
        shared = f", shared by the {ranks} ranks on this machine" if ranks > 1 else ""
        raise ValueError(
            f"--workers {workers}: this machine gives training {cpus} CPU(s), and each "
            f"DataLoader worker is a process with its own memory; give at most {most} per rank "
            f"({WORKERS_PER_CPU} per CPU{shared}), or 0 to load in the training process"
        )


# torch's words for a DataLoader worker that died: of a signal (`strsignal`'s name for it), or
# found gone while its batch was awaited
LOADER_DIED = re.compile(
    r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)\."
    r"|DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly"
)


def loader_worker_lost(e: BaseException) -> str | None:
    """The line for a DataLoader worker that died during the run (torch's RuntimeError says
    which and of what), or None for any other error. torch's SIGCHLD handler raises that error
    wherever the training process is, and an error of that code's own cleanup can take its
    place (a checkpoint's writer, closing its file half written): it is looked for in what `e`
    was raised from or during too."""
    found = next(filter(None, (LOADER_DIED.search(str(x)) for x in exception_chain(e))), None)
    if found is None:
        return None
    if found.group(3):  # its end seen before its signal was
        return (
            f"a DataLoader worker (pid {found.group(3)}) ended unexpectedly (the kernel's "
            "out-of-memory killer ends one when memory runs out: `dmesg` says; fewer --workers "
            "hold less)"
        )
    pid, said = found.group(1), found.group(2)
    if said == "Killed":
        return (
            f"a DataLoader worker (pid {pid}) was killed by SIGKILL, which the kernel's "
            "out-of-memory killer sends when memory runs out (`dmesg` says; fewer --workers "
            "hold less)"
        )
    return f"a DataLoader worker (pid {pid}) died of {said}"
