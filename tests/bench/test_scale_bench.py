"""The scale and Dask series' measuring: memory of the process tree, temporary disk, CPU."""

from __future__ import annotations

import sys

from bench.procmem import TreePoll, dir_bytes, measure_build, tree_stats


def test_measure_sees_the_temporary_area_and_the_tree(tmp_path):
    building = tmp_path / "building"
    child = (
        "import os, time, subprocess, sys;"
        f"os.makedirs({str(building)!r}, exist_ok=True);"
        f"open({str(building / 'x')!r}, 'wb').write(b'x' * (3 << 20));"
        "subprocess.run([sys.executable, '-c', 'b = bytearray(60 << 20); import time; "
        "time.sleep(1.5)']);"
        f"os.remove({str(building / 'x')!r})"
    )
    got = measure_build([sys.executable, "-c", child], building)
    assert got.peak_sample >= 3 << 20 and dir_bytes(building) == 0  # the peak, since removed
    assert got.peak >= 60 << 20  # the grandchild's buffer counts in the tree
    assert got.peak_one >= 60 << 20 and got.wall >= 1.5


def test_tree_stats_of_this_process():
    import os

    stats = tree_stats(os.getpid())
    assert stats["rss"] >= stats["largest"] > 0 and stats["cpu"] > 0


def test_tree_poll_sees_a_process_that_runs_beside_it():
    import subprocess

    child = "import time\nb = bytearray(40 << 20)\nx = sum(range(3_000_000))\ntime.sleep(1.2)"
    proc = subprocess.Popen([sys.executable, "-c", child])
    poll = TreePoll([proc.pid])
    proc.wait()
    cpu, peak = poll.stop()[proc.pid]
    assert cpu > 0 and peak >= 40 << 20
