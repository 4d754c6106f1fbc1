"""The CPUs this process may use: one local worker each for `--workers 0`, and what `--workers`
is checked against.

`os.cpu_count()` counts the machine's CPUs, not those a build may use: in a container given two
CPUs on a 64-CPU host (Docker's `--cpus 2`, a Kubernetes limit: a cgroup CPU quota) or under
`taskset -c 0,1` (an affinity), it says 64, and 64 CPU-bound workers would share two CPUs, each
holding its own memory. joblib's `cpu_count` (from loky, already installed with NLTK) takes the
least of the machine's CPUs, the process's affinity and its cgroup's quota (v1 `cpu.cfs_quota_us`
or v2 `cpu.max`, rounded up), and `LOKY_MAX_CPU_COUNT` where it is set. It is imported when a
count is needed, not by a build given a few `--workers` (its import's cost:
docs/benchmarks.md, "The process's end")."""

from __future__ import annotations


def usable_cpus() -> int:
    """The CPUs this process may use (at least 1)."""
    from joblib import cpu_count

    return max(1, cpu_count())
