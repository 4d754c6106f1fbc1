"""`--workers 0` starts one worker per CPU the build may use, and `--workers` is checked against
them: the CPUs of the process's affinity and of its cgroup's CPU quota, not the machine's
(docs/build-flags.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT

PRINT_CPUS = "from pipeline.runners.cpus import usable_cpus; print(usable_cpus(), os.cpu_count())"
# a private mount namespace with an empty tmpfs over /sys/fs/cgroup, the quota files written
# there: the process reads them where the kernel shows a container's own, and the host's
# mounts are untouched (unshare makes the namespace's mounts private)
QUOTA = {
    "v1": "mkdir /sys/fs/cgroup/cpu && echo 50000 > /sys/fs/cgroup/cpu/cpu.cfs_quota_us && "
    "echo 100000 > /sys/fs/cgroup/cpu/cpu.cfs_period_us",
    "v2": "echo '50000 100000' > /sys/fs/cgroup/cpu.max",
    "v2, no quota": "echo 'max 100000' > /sys/fs/cgroup/cpu.max",
}


@pytest.fixture
def affinity():
    """Restores the test thread's CPU affinity after the test."""
    saved = os.sched_getaffinity(0)
    yield saved
    os.sched_setaffinity(0, saved)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_an_affinity_of_one_cpu_is_one_usable_cpu(affinity):
    from pipeline.runners.cpus import usable_cpus

    assert 1 <= usable_cpus() <= len(affinity)
    if len(affinity) < 2:
        pytest.skip("this process may run on one CPU only: nothing to narrow")
    os.sched_setaffinity(0, {min(affinity)})  # what `taskset -c N` gives a command
    assert usable_cpus() == 1 and (os.cpu_count() or 1) >= 2


@pytest.mark.parametrize("layout", sorted(QUOTA))
def test_a_cgroup_cpu_quota_limits_the_usable_cpus(layout):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here to give a process a CPU quota of its own")
    script = (
        f"mount -t tmpfs none /sys/fs/cgroup && {QUOTA[layout]} && "
        f'exec "$0" -c "import os; {PRINT_CPUS}"'
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, sys.executable],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and ("Operation not permitted" in done.stderr or os.geteuid() != 0):
        pytest.skip(f"a mount namespace is not allowed here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    usable, machine = map(int, done.stdout.split())
    allowed = len(os.sched_getaffinity(0))
    assert usable == (min(allowed, machine) if layout == "v2, no quota" else 1)  # half a CPU: 1
