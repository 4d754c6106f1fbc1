"""A command run and measured: its wall time, the CPU time and peak resident memory of its whole
process tree (Beam workers are subprocesses), read from /proc while it runs; the same for process
trees that run beside it (a Dask cluster's), and the size of a folder it writes."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stats() -> dict[int, list[str]]:
    """pid -> the fields of /proc/<pid>/stat after the command name (index 1 is the parent)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                table[int(name)] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
    return table


def tree(root: int, table: dict[int, list[str]]) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, fields in table.items():
        children.setdefault(int(fields[1]), []).append(pid)
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            out.append(pid)
            stack.extend(children.get(pid, []))
    return out


def tree_stats(root: int) -> dict[str, float]:
    """Resident bytes of the tree and of its largest process, and the tree's CPU seconds
    (user + system, reaped children included)."""
    table = proc_stats()
    return _totals({p: table[p] for p in tree(root, table)})


def _totals(procs: dict[int, list[str]]) -> dict[str, float]:
    rss = [int(fields[21]) * PAGE for fields in procs.values()]
    cpu = sum(int(x) for fields in procs.values() for x in fields[11:15]) / CLK_TCK
    return {"rss": sum(rss), "largest": max(rss, default=0), "cpu": cpu}


@dataclass(frozen=True)
class Measured:
    wall: float  # seconds
    reaped_cpu: float  # user + sys seconds of the descendants this process reaped meanwhile
    seen_cpu: float  # each process seen in the tree: its own CPU when last seen, summed
    tree_cpu: float  # the largest polled total of the tree, reaped children included
    peak: int  # bytes resident in the tree at its largest
    peak_one: int  # bytes resident in the tree's largest process at its largest
    peak_sample: int  # the largest value the `sample` hook returned (0 without one)
    output: str

    @property
    def cpu(self) -> float:
        """CPU seconds of the tree: the kernel's count for reaped descendants, or the polled
        sum of every process seen (which also sees workers that outlive their parent and are
        never reaped by it), whichever is larger."""
        return max(self.reaped_cpu, self.seen_cpu)


class _Peaks:
    """What the polling thread has seen so far."""

    def __init__(self) -> None:
        self.rss = self.one = self.sample = 0
        self.tree_cpu = 0.0
        self.seen: dict[int, float] = {}

    def add(self, procs: dict[int, list[str]], sample: int) -> None:
        now = _totals(procs)
        self.rss = max(self.rss, int(now["rss"]))
        self.one = max(self.one, int(now["largest"]))
        self.tree_cpu = max(self.tree_cpu, now["cpu"])
        self.seen.update({p: (int(f[11]) + int(f[12])) / CLK_TCK for p, f in procs.items()})
        self.sample = max(self.sample, sample)


def run_measured(
    cmd: list[str],
    env: dict | None = None,
    every: float = 0.2,
    sample: Callable[[], int] | None = None,
) -> Measured:
    """Run `cmd`, polling its process tree every `every` seconds; `sample`, when given, is
    called at each poll too (the scale bench's size of the build's temporary area) and its
    largest value kept. Raises RuntimeError, with the end of the output, if `cmd` fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peaks, done = _Peaks(), threading.Event()

    def poll() -> None:
        while not done.is_set():
            table = proc_stats()
            peaks.add({p: table[p] for p in tree(proc.pid, table)}, sample() if sample else 0)
            time.sleep(every)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    done.set()
    watcher.join()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out.decode()[-3000:]}")
    seen = sum(peaks.seen.values())
    return Measured(
        wall, reaped, seen, peaks.tree_cpu, peaks.rss, peaks.one, peaks.sample, out.decode()
    )


def dir_bytes(path: str | os.PathLike) -> int:
    """Bytes of the files under `path` (files that vanish meanwhile not counted)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def measure_build(cmd: list[str], building: str | os.PathLike) -> Measured:
    """Run a build, polling its process tree's memory and CPU and the size of its temporary
    area `building` (`Measured.peak_sample`) every half second."""
    return run_measured(cmd, every=0.5, sample=lambda: dir_bytes(building))


class TreePoll:
    """Peak resident bytes and last CPU seconds of each of some process trees, polled every
    half second from construction to `stop`."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.start = {p: tree_stats(p)["cpu"] for p in pids}
        self.peak = dict.fromkeys(pids, 0)
        self.cpu = dict(self.start)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.is_set():
            for p in self.pids:
                now = tree_stats(p)
                self.peak[p] = max(self.peak[p], now["rss"])
                self.cpu[p] = max(self.cpu[p], now["cpu"])
            time.sleep(0.5)

    def stop(self) -> dict[int, tuple[float, int]]:
        """pid -> (CPU seconds since construction, peak resident bytes) of each tree."""
        self.done.set()
        self.thread.join()
        return {p: (self.cpu[p] - self.start[p], self.peak[p]) for p in self.pids}
