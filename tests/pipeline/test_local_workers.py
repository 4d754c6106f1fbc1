"""Local workers forked from the driver: the same shards as one worker, every child reaped,
OUT's lock never kept by a child, and Beam's own workers whenever forking is not safe."""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pipeline.runners.local_workers import fork_is_safe
from tests.helpers import ROOT, SAMPLE_INPUT, build_process, build_shards, file_digests


def run_python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (forking inside the test process is not safe: earlier
    tests leave Beam's threads behind)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def one_worker(sample_shards) -> dict[str, str]:
    """The digests of a 1-worker build of 4 shards (`sample_shards`), which both parameters
    compare against."""
    return file_digests(sample_shards)


@pytest.mark.slow
@pytest.mark.parametrize("forked", [2, 1], ids=["both-forked", "one-started-by-beam"])
def test_two_workers_build_the_shards_of_one_worker(one_worker, tmp_path, forked):
    two = str(tmp_path / "two")
    done = run_python(
        f"""
        import os
        from pipeline.runners import local_workers
        from pipeline.shell.cli import main

        init = local_workers.ForkedWorkers.__init__
        def fewer(self, count):  # fewer children than workers: Beam's way for the rest
            init(self, {forked})
        local_workers.ForkedWorkers.__init__ = fewer
        handed = []
        start = local_workers.ForkedWorkers.start
        def counted(self, environ):
            handed.append(len(self.waiting))  # children still waiting before this one
            start(self, environ)
        local_workers.ForkedWorkers.start = counted
        args = ["build", "--input", {SAMPLE_INPUT!r}, "--out", {two!r}, "--num-shards", "4"]
        assert main(args + ["--workers", "2", "--progress-seconds", "0"]) == 0
        print("handed", handed)
        try:
            os.waitpid(-1, os.WNOHANG)
            print("a child is left")
        except ChildProcessError:
            print("no child left")
        """
    )
    expected = [2, 1] if forked == 2 else [1, 0]  # children still waiting at each start
    assert f"handed {expected}" in done.stdout
    assert "no child left" in done.stdout
    assert file_digests(two) == one_worker


def test_unused_children_end_when_the_pool_closes():
    done = run_python(
        """
        import os
        from pipeline.runners.local_workers import ForkedWorkers

        pool = ForkedWorkers(3)
        pids = [pid for pid, _ in pool.waiting]
        pool.close()
        try:
            os.waitpid(-1, os.WNOHANG)
            print("a child is left")
        except ChildProcessError:
            print("all", len(pids), "reaped")
        """
    )
    assert "all 3 reaped" in done.stdout


def test_a_signal_while_the_pool_starts_or_closes_leaves_no_child():
    """Ctrl-C (a KeyboardInterrupt) landing inside `start` or inside `close`'s wait: every
    child is still reaped, the last one killed, before the interrupt goes on."""
    done = run_python(
        """
        import os, time
        import pipeline.runners.local_workers as lw

        pool = lw.ForkedWorkers(2)
        first = pool.waiting[0][0]
        real_fdopen = os.fdopen
        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt
        lw.os.fdopen = interrupted  # the signal lands as start() hands the child its work
        try:
            pool.start({})
        except KeyboardInterrupt:
            pass
        lw.os.fdopen = real_fdopen
        print("started holds the child:", first in pool.started)

        sleeper = os.fork()
        if sleeper == 0:  # a worker that would run on and on
            time.sleep(60)
            os._exit(0)
        pool.started.append(sleeper)
        real_reap, calls = lw._reap, []
        def reap(child, deadline):
            calls.append(child)
            if len(calls) == 1:  # the signal lands while close() waits for the first child
                raise KeyboardInterrupt
            return real_reap(child, deadline)
        lw._reap = reap
        began = time.monotonic()
        try:
            pool.close()
        except KeyboardInterrupt:
            print("the interrupt went on")
        try:
            os.waitpid(-1, os.WNOHANG)
            print("a child is left")
        except ChildProcessError:
            print("all reaped in", round(time.monotonic() - began), "s")
        """
    )
    assert "started holds the child: True" in done.stdout, done.stdout + done.stderr
    assert "the interrupt went on" in done.stdout
    reaped = re.search(r"all reaped in (\d+) s", done.stdout)
    assert reaped and int(reaped.group(1)) < 10, done.stdout  # killed, not waited for (60 s)


def test_a_signal_as_the_pool_begins_to_close_leaves_no_child():
    """Ctrl-C landing as the block's own `close` begins (before it waits for anything), and
    while `close` hands the waiting children their end of file: every child is still reaped
    before the interrupt goes on."""
    done = run_python(
        """
        import os, time
        from apache_beam.options.pipeline_options import PipelineOptions
        import pipeline.runners.local_workers as lw
        from pipeline.runners.run import forked_workers

        def none_left(what):
            try:
                os.waitpid(-1, os.WNOHANG)
                print(what, "left a child")
            except ChildProcessError:
                print(what, "reaped all")

        args = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
        real_close, closes = lw.ForkedWorkers.close, []
        def close(self, kill=False):
            closes.append(kill)
            if len(closes) == 1:  # the signal lands as the block's own close begins
                raise KeyboardInterrupt
            return real_close(self, kill)
        lw.ForkedWorkers.close = close
        try:
            with forked_workers(PipelineOptions(args)) as pool:
                print("children", len(pool.waiting))
        except KeyboardInterrupt:
            print("closes", closes)
        none_left("the block")
        lw.ForkedWorkers.close = real_close

        pool = lw.ForkedWorkers(2)
        real_os_close, calls = os.close, []
        def os_close(fd):
            calls.append(fd)
            real_os_close(fd)
            if len(calls) == 1:  # the signal lands after the first pipe closes
                raise KeyboardInterrupt
        lw.os.close = os_close
        began = time.monotonic()
        try:
            pool.close()
        except KeyboardInterrupt:
            pass
        lw.os.close = real_os_close
        none_left("close")
        print("in", round(time.monotonic() - began), "s")
        """
    )
    out = done.stdout
    assert "children 2" in out and "closes [False, True]" in out, out + done.stderr
    assert "the block reaped all" in out and "close reaped all" in out, out
    assert int(re.search(r"in (\d+) s", out).group(1)) < 10, out


def test_a_child_does_not_keep_out_locked(tmp_path):
    out = str(tmp_path / "out")
    done = run_python(
        f"""
        import os, time
        from pipeline.shell.outdir import OutputLock

        os.makedirs({out!r})
        read, write = os.pipe()
        with OutputLock({out!r}):
            pid = os.fork()
            if pid == 0:  # fork's hooks have run by now
                os.write(write, b"up")
                time.sleep(5)
                os._exit(0)
            assert os.read(read, 2) == b"up"
        with OutputLock({out!r}):  # the child still runs, and OUT is free again
            print("locked again")
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        """
    )
    assert "locked again" in done.stdout


def test_forking_is_refused_while_another_thread_runs():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not fork_is_safe()
    finally:
        stop.set()
        thread.join()


def test_a_process_that_ran_a_graph_forks_no_workers():
    done = run_python(
        """
        import apache_beam as beam
        from pipeline.runners.local_workers import fork_is_safe
        from pipeline.runners.run import make_pipeline, pipeline_options

        print("before", fork_is_safe())
        with make_pipeline(pipeline_options([], "DirectRunner", 2)) as p:
            _ = p | beam.Create([1, 2]) | beam.Map(lambda x: x)
        print("after", fork_is_safe())
        """
    )
    assert "before True" in done.stdout and "after False" in done.stdout


def test_a_worker_killed_during_a_build_is_named_and_resume_goes_on(sample_shards, tmp_path):
    """A forked worker killed as the kernel's out-of-memory killer kills (SIGKILL) once the
    vocab is trained: the build ends in one line naming the worker and its signal, not in
    Beam's `Channel closed prematurely.`, and --resume finishes with the sample's bytes."""
    out = str(tmp_path / "out")
    driver = build_process(out, "--workers", "2", "--num-shards", "4", "--progress-seconds", "0")
    deadline = time.monotonic() + 120
    while not glob.glob(f"{out}/shards/.building/tmp/vocab.json"):
        assert driver.poll() is None, "the build ended before a worker was killed"
        assert time.monotonic() < deadline, "the vocab was not trained in two minutes"
        time.sleep(0.02)
    with open(f"/proc/{driver.pid}/task/{driver.pid}/children") as f:
        worker = int(f.read().split()[0])
    os.kill(worker, signal.SIGKILL)
    said = driver.communicate(timeout=120)[0].decode().strip().splitlines()
    assert driver.returncode == 1
    assert said == [
        f"error: a worker process (pid {worker}) was killed by SIGKILL, which the kernel's "
        "out-of-memory killer sends when memory runs out (`dmesg` says; fewer --workers hold "
        "less); then run the same command with --resume to continue from what is finished"
    ]
    assert build_shards(out, "--num-shards", "4", "--resume") == 0
    assert file_digests(out) == file_digests(sample_shards)
