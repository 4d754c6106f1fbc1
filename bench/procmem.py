"""A command run and measured: its wall time, the CPU time and peak memory of its whole process
tree (Beam workers are subprocesses), read from /proc while it runs; the same for process trees
that run beside it (a Dask cluster's), and the size of a folder it writes.

A process's memory is its PSS (proportional set size, `Pss:` of /proc/PID/smaps_rollup): a page
shared by N processes counts 1/N in each, so the sum over a tree whose workers were forked from
its driver counts their shared pages once, as the machine holds them. Where smaps_rollup cannot
be read (a kernel before 4.14, or a process not ours), the process's RSS stands in for it, which
counts a shared page in every process that maps it; `Measured.memory` says which one a figure is
(`memory_kind`)."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PSS_READABLE = os.path.exists("/proc/self/smaps_rollup")


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


def pss_bytes(pid: int) -> int | None:
    """The PSS of one process from /proc/PID/smaps_rollup: 0 for one that exited since it was
    listed; None where it cannot be read (no such file on this kernel, a process not ours; a
    zombie has no Pss line, and its RSS is 0)."""
    if not PSS_READABLE:
        return None
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return 0  # gone: it holds nothing now
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_memory(pid: int, fields: list[str], pss=None) -> tuple[int, bool]:
    """Bytes of one process and whether they are its PSS (else its RSS, from its stat fields);
    `pss`: how to read a PSS (default `pss_bytes`)."""
    got = (pss or pss_bytes)(pid)
    if got is not None:
        return got, True
    return int(fields[21]) * PAGE, False


def memory_kind(rss_stand_ins: int) -> str:
    """What a peak is, from how many processes' RSS stood in for their PSS."""
    if not PSS_READABLE:
        return "RSS"
    if rss_stand_ins:
        return f"PSS ({rss_stand_ins} process(es) RSS)"
    return "PSS"


def tree_stats(root: int) -> dict[str, float]:
    """Memory (PSS, else RSS: see the module) of the tree and of its largest process, and the
    tree's CPU seconds (user + system, reaped children included)."""
    table = proc_stats()
    return _totals({p: table[p] for p in tree(root, table)})


def _totals(procs: dict[int, list[str]], pss=None) -> dict:
    """`memory`: the tree's bytes, `largest`: its largest process's, `cpu`: its CPU seconds,
    `rss_pids`: the processes holding memory whose RSS stood in for their PSS."""
    memory, rss_pids = [], set()
    for pid, fields in procs.items():
        size, is_pss = process_memory(pid, fields, pss)
        memory.append(size)
        if not is_pss and size:
            rss_pids.add(pid)
    return {
        "memory": sum(memory),
        "largest": max(memory, default=0),
        "cpu": _cpu(procs),
        "rss_pids": rss_pids,
    }


def _cpu(procs: dict[int, list[str]]) -> float:
    """CPU seconds of processes (user + system, their reaped children included)."""
    return sum(int(x) for fields in procs.values() for x in fields[11:15]) / CLK_TCK


@dataclass(frozen=True)
class Measured:
    wall: float  # seconds
    reaped_cpu: float  # user + sys seconds of the descendants this process reaped meanwhile
    seen_cpu: float  # each process seen in the tree: its own CPU when last seen, summed
    tree_cpu: float  # the largest polled total of the tree, reaped children included
    peak: int  # bytes (PSS, else RSS: `memory`) of the tree, and of `beside`'s, at their largest
    peak_one: int  # bytes of the largest single process of them at its largest
    peak_sample: int  # the largest value the `sample` hook returned (0 without one)
    output: str
    memory: str = "PSS"  # what `peak` and `peak_one` are: "PSS", "RSS" or PSS with RSS for some
    beside_cpu: float = 0.0  # CPU seconds the trees of `beside` spent from the start to the end
    polls: int = 0  # how many times the tree was polled

    @property
    def cpu(self) -> float:
        """CPU seconds of the tree: the kernel's count for reaped descendants, or the polled
        sum of every process seen (which also sees workers that outlive their parent and are
        never reaped by it), whichever is larger."""
        return max(self.reaped_cpu, self.seen_cpu)


class _Peaks:
    """What the polling thread has seen so far."""

    def __init__(self) -> None:
        self.memory = self.one = self.sample = self.polls = 0
        self.tree_cpu = 0.0
        self.seen: dict[int, float] = {}
        self.rss_pids: set[int] = set()

    def add(self, procs: dict[int, list[str]], sample: int, beside=None) -> None:
        """One poll: `procs`, the command's tree; `beside`, the processes of the trees polled
        with it (their memory counts with the tree's, their CPU apart)."""
        now = _totals({**(beside or {}), **procs})
        self.memory = max(self.memory, int(now["memory"]))
        self.one = max(self.one, int(now["largest"]))
        self.rss_pids |= now["rss_pids"]
        self.tree_cpu = max(self.tree_cpu, _cpu(procs))
        self.seen.update({p: (int(f[11]) + int(f[12])) / CLK_TCK for p, f in procs.items()})
        self.sample = max(self.sample, sample)
        self.polls += 1


def _trees(roots, table: dict[int, list[str]]) -> dict[int, list[str]]:
    return {p: table[p] for root in roots for p in tree(root, table)}


def _tree_cpu(roots, table: dict[int, list[str]]) -> dict[int, float]:
    return {r: _cpu({p: table[p] for p in tree(r, table)}) for r in roots}


# The first wait between two polls of `run_measured`; each wait after is twice the one before,
# up to its `every` (`poll_waits`).
FIRST_WAIT = 0.05


def poll_waits(every: float) -> Iterator[float]:
    """The waits between `run_measured`'s polls: `FIRST_WAIT`, then each twice the one before,
    none longer than `every`. A short command is polled often, and a long one's poller, which
    reads each process's smaps_rollup, takes little from it (polled at a fixed fifth of a
    second, 2-worker builds took longer: docs/benchmarks.md, "the bench's own poller")."""
    wait = min(FIRST_WAIT, every)
    while True:
        yield wait
        wait = min(2 * wait, every)


def run_measured(
    cmd: list[str],
    env: dict | None = None,
    every: float = 1.0,
    sample: Callable[[], int] | None = None,
    beside: Sequence[int] = (),
) -> Measured:
    """Run `cmd`, polling its process tree at its start, then after each wait of `poll_waits`
    (up to `every` seconds apart). `sample`, when given, is called at each poll too (the scale
    bench's size of the build's temporary area) and its largest value kept. `beside`: the roots
    of process trees that run with the command and work for it (a Dask cluster's scheduler and
    workers): polled at the same instants, their memory is added to the tree's (`peak`,
    `peak_one`) and their CPU from just before the command starts to just after it ends is
    `beside_cpu`. Raises RuntimeError, with the end of the output, if `cmd` fails."""
    beside = list(beside)
    cpu_before = _tree_cpu(beside, proc_stats())
    cpu_last = dict(cpu_before)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peaks, done = _Peaks(), threading.Event()

    def poll() -> None:
        waits = poll_waits(every)
        while not done.is_set():
            table = proc_stats()
            own = {p: table[p] for p in tree(proc.pid, table)}
            others = {p: f for p, f in _trees(beside, table).items() if p not in own}
            peaks.add(own, sample() if sample else 0, others)
            for root, cpu in _tree_cpu(beside, table).items():
                cpu_last[root] = max(cpu_last[root], cpu)
            done.wait(next(waits))  # woken at the command's end: its wall holds no poll's sleep

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for root, cpu in _tree_cpu(beside, proc_stats()).items():
        cpu_last[root] = max(cpu_last[root], cpu)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out.decode()[-3000:]}")
    seen = sum(peaks.seen.values())
    return Measured(
        wall,
        reaped,
        seen,
        peaks.tree_cpu,
        peaks.memory,
        peaks.one,
        peaks.sample,
        out.decode(),
        memory_kind(len(peaks.rss_pids)),
        sum(cpu_last[r] - cpu_before[r] for r in beside),
        peaks.polls,
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


def measure_build(cmd: list[str], building: str | os.PathLike, every: float = 0.5) -> Measured:
    """Run a build, polling its process tree's memory and CPU and the size of its temporary
    area `building` (`Measured.peak_sample`) as `run_measured` does, at most `every` seconds
    apart."""
    return run_measured(cmd, every=every, sample=lambda: dir_bytes(building))


class TreePoll:
    """Peak bytes (PSS, else RSS) and last CPU seconds of each of some process trees, polled every
    `every` seconds from construction to `stop`."""

    def __init__(self, pids: list[int], every: float = 0.5):
        self.pids = pids
        self.every = every
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
                self.peak[p] = max(self.peak[p], now["memory"])
                self.cpu[p] = max(self.cpu[p], now["cpu"])
            self.done.wait(self.every)  # `stop` wakes it

    def stop(self) -> dict[int, tuple[float, int]]:
        """pid -> (CPU seconds since construction, peak bytes) of each tree."""
        self.done.set()
        self.thread.join()
        return {p: (self.cpu[p] - self.start[p], self.peak[p]) for p in self.pids}
