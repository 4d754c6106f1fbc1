"""The scale and Dask series' measuring: memory of the process tree, temporary disk, CPU."""

from __future__ import annotations

import sys
import time

import pytest

from bench import procmem
from bench.procmem import TreePoll, dir_bytes, measure_build, run_measured, tree_stats


@pytest.mark.slow
def test_measure_sees_the_temporary_area_and_the_tree(tmp_path):
    building = tmp_path / "building"
    child = (
        "import os, time, subprocess, sys;"
        f"os.makedirs({str(building)!r}, exist_ok=True);"
        f"open({str(building / 'x')!r}, 'wb').write(b'x' * (3 << 20));"
        "subprocess.run([sys.executable, '-c', 'b = bytearray(60 << 20); import time; "
        "time.sleep(0.5)']);"  # ten polls at 0.05 s
        f"os.remove({str(building / 'x')!r})"
    )
    got = measure_build([sys.executable, "-c", child], building, every=0.05)
    assert got.peak_sample >= 3 << 20 and dir_bytes(building) == 0  # the peak, since removed
    assert got.peak >= 60 << 20  # the grandchild's buffer counts in the tree
    assert got.peak_one >= 60 << 20 and got.wall >= 0.5


def test_a_commands_wall_holds_no_poll_sleep():
    """The poller sleeping between polls is woken when the command ends: a command far shorter
    than the polling period is not measured as long as the period (a poll is taken at its
    start, then the poller waits)."""
    start = time.perf_counter()
    got = run_measured([sys.executable, "-c", "pass"], every=30.0)
    assert got.wall < 15.0 and time.perf_counter() - start < 15.0


def test_polls_come_often_first_then_every_period():
    """A short command is polled often (its peak is seen), a long one at most every `every`
    seconds, so that the poller takes little from the command it measures."""
    from itertools import islice

    assert list(islice(procmem.poll_waits(1.0), 7)) == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert list(islice(procmem.poll_waits(0.05), 3)) == [0.05, 0.05, 0.05]
    assert list(islice(procmem.poll_waits(0.3), 4)) == [0.05, 0.1, 0.2, 0.3]
    got = run_measured([sys.executable, "-c", "import time; time.sleep(0.8)"])
    assert got.polls >= 3  # at its start, then 0.05, 0.15, 0.35 and 0.75 s later


def test_tree_stats_of_this_process():
    import os

    stats = tree_stats(os.getpid())
    assert stats["memory"] >= stats["largest"] > 0 and stats["cpu"] > 0


@pytest.mark.slow
def test_tree_poll_sees_a_process_that_runs_beside_it():
    import subprocess

    child = "import time\nb = bytearray(40 << 20)\nx = sum(range(3_000_000))\ntime.sleep(0.4)"
    proc = subprocess.Popen([sys.executable, "-c", child])
    poll = TreePoll([proc.pid], every=0.05)
    proc.wait()
    cpu, peak = poll.stop()[proc.pid]
    assert cpu > 0 and peak >= 40 << 20


# A parent that fills a buffer, then forks a child that keeps it (copy-on-write, never written):
# the machine holds the buffer once, RSS counts it in both processes, PSS half in each.
SHARED = (
    "import os, time\n"
    "b = bytearray(b'\\x01') * (96 << 20)\n"
    "pid = os.fork()\n"
    "time.sleep(0.6)\n"  # a dozen polls at run_measured's 0.05 s
    "if pid == 0:\n"
    "    os._exit(0)\n"
    "os.waitpid(pid, 0)\n"
)


@pytest.mark.skipif(not procmem.PSS_READABLE, reason="no /proc/PID/smaps_rollup here")
def test_peak_counts_pages_shared_by_a_forked_child_once():
    got = run_measured([sys.executable, "-c", SHARED], every=0.05)
    assert got.memory == "PSS"
    assert 96 << 20 <= got.peak < int(1.5 * (96 << 20))  # RSS summed would be 192 MiB and more
    # (the largest single process is no test of it: a sample taken after the buffer was made and
    # before the fork sees the parent holding all of it)


def test_rss_stands_in_where_pss_cannot_be_read(monkeypatch):
    monkeypatch.setattr(procmem, "pss_bytes", lambda pid: None)
    got = run_measured([sys.executable, "-c", SHARED], every=0.05)
    assert got.memory == ("PSS (2 process(es) RSS)" if procmem.PSS_READABLE else "RSS")
    assert got.peak >= 2 * (96 << 20)  # the shared buffer counted in both processes


def test_memory_kind_says_which():
    fields = ["S", "1"] + ["0"] * 19 + ["10"]  # stat fields after the name: RSS 10 pages
    assert procmem.process_memory(7, fields, lambda pid: 4096) == (4096, True)
    assert procmem.process_memory(7, fields, lambda pid: None) == (10 * procmem.PAGE, False)
    totals = procmem._totals({7: fields, 8: fields}, lambda pid: None if pid == 8 else 4096)
    assert totals["memory"] == 4096 + 10 * procmem.PAGE and totals["rss_pids"] == {8}
    if procmem.PSS_READABLE:
        assert procmem.memory_kind(0) == "PSS"
        assert procmem.memory_kind(2) == "PSS (2 process(es) RSS)"


@pytest.mark.slow
def test_trees_beside_the_command_add_their_memory_and_cpu(tmp_path):
    """A process beside the command (as a Dask worker is beside the build's driver): its memory
    counts with the command's tree, and its CPU from the command's start to its end apart, not
    what it spent before."""
    import subprocess

    child = (
        "import time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.6: pass\n"  # before the command: not counted
        f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
        "b = bytearray(b'\\x01') * (48 << 20)\n"
        "time.sleep(0.5)\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.8: pass\n"  # while the command runs: counted
        f"open({str(tmp_path / 'done')!r}, 'w').close()\n"
        "time.sleep(5)\n"
    )
    beside = subprocess.Popen([sys.executable, "-c", child])
    try:
        while not (tmp_path / "ready").exists():
            time.sleep(0.01)
        # the command waits until the process beside it has spent its CPU, then ends
        done = str(tmp_path / "done")
        wait = f"import os, time\nwhile not os.path.exists({done!r}): time.sleep(0.01)"
        got = run_measured([sys.executable, "-c", wait], every=0.05, beside=[beside.pid])
    finally:
        beside.kill()
        beside.wait()
    assert got.peak >= 48 << 20 and got.peak_one >= 40 << 20
    assert 0.6 <= got.beside_cpu < 1.3 and got.cpu < 0.5
