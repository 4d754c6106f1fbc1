"""A build stopped by Ctrl-C or SIGTERM, or by a full disk, ends in one line that says how to go
on (`--resume`); its workers are gone, OUT's lock is free, and the resumed build equals a clean
one. Disk figures come in the unit that fits."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pipeline.shell.outdir import OutputError, OutputLock, check_free_space, disk_figure
from pipeline.shell.trouble import NO_SPACE, disk_full_line, out_trouble_said, read_only_line
from schemas.manifest import read_manifest
from schemas.validate.run import validate
from tests.helpers import INTERRUPTED as STOPPED
from tests.helpers import ROOT, SAMPLE_INPUT, alive, children, ctrl_c_at_fork, signal_at_fork, tmpfs

BUILD = [sys.executable, "-m", "pipeline", "build", "--input", SAMPLE_INPUT]
BUILD += ["--num-shards", "4", "--progress-seconds", "0"]
INTERRUPTED = STOPPED + "\n"  # as stderr ends


def shard_hashes(out: str) -> list[str]:
    return [entry.sha256 for entry in read_manifest(out).shards]


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.slow
def test_a_signal_during_a_two_worker_build_ends_in_one_line(sig, code, tmp_path, sample_shards):
    """SIGINT as a terminal's Ctrl-C sends it, to the whole process group (the workers too);
    SIGTERM as `kill` sends it, to the driver alone."""
    out = str(tmp_path / "out")
    p = subprocess.Popen(
        [*BUILD, "--out", out, "--workers", "2"],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )
    deadline = time.monotonic() + 120
    workers = []
    while time.monotonic() < deadline and p.poll() is None:  # the graph runs on its workers
        workers = children(p.pid)
        if len(workers) >= 2 and os.path.isdir(os.path.join(out, "shards", ".building")):
            break
        time.sleep(0.02)
    assert len(workers) >= 2, "the build never started its workers"
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert (p.returncode, err) == (code, INTERRUPTED)
    assert not [w for w in workers if alive(w)]
    with OutputLock(out):  # free at once
        pass
    if sig == signal.SIGINT:  # what the line says works: the resumed build is a clean build
        resumed = run([*BUILD, "--out", out, "--workers", "2", "--resume"])
        assert resumed.returncode == 0, resumed.stderr
        assert shard_hashes(out) == shard_hashes(sample_shards)


@pytest.mark.slow
def test_a_signal_that_lands_in_a_fork_still_stops_the_build(tmp_path):
    """A handler that runs inside the interpreter's at-fork hooks, where CPython drops what a
    hook raises: the build went on to publish and exit 0; the signal now waits for the fork."""
    out = str(tmp_path / "out")
    script = signal_at_fork("pipeline.shell.cli")
    r = run([sys.executable, "-c", script, *BUILD[3:], "--out", out, "--workers", "2"])
    assert (r.returncode, r.stderr) == (143, INTERRUPTED)
    assert not os.path.exists(os.path.join(out, "manifest.json"))


@pytest.mark.slow
def test_ctrl_c_while_the_workers_fork_ends_in_the_drivers_line_alone(tmp_path):
    """The new worker receives the SIGINT too, before it has its own handlers: it once ran the
    driver's, unwound the driver's stack it was forked with and printed a second report."""
    out = str(tmp_path / "out")
    script = ctrl_c_at_fork("pipeline.shell.cli")
    r = subprocess.run(
        [sys.executable, "-c", script, *BUILD[3:], "--out", out, "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,  # the group the script signals is the build's alone
    )
    assert (r.returncode, r.stderr) == (130, INTERRUPTED)
    assert not os.path.exists(os.path.join(out, "manifest.json"))


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 300 kB tmpfs (needs root and mount); remount it larger with `grow()`."""
    with tmpfs(tmp_path / "fs", "size=300k", "test_disk_full_line covers the line") as where:

        def grow():
            subprocess.run(["mount", "-o", "remount,size=64m", where], check=True)

        yield where, grow


@pytest.mark.slow
def test_a_full_disk_names_out_and_its_filesystem_and_resume_goes_on(
    tiny_filesystem, sample_shards
):
    where, grow = tiny_filesystem
    out = os.path.join(where, "out")
    full = run([*BUILD, "--out", out, "--workers", "1", "--no-disk-check"])
    assert full.returncode == 1
    assert full.stderr == (
        f"error: the build ran out of disk: the filesystem at {where}, which holds --out {out}, "
        f"has 0 bytes free ({NO_SPACE}); free space, then run the same command with --resume "
        "to continue from what is finished\n"
    )
    grow()
    resumed = run([*BUILD, "--out", out, "--workers", "1", "--no-disk-check", "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert validate(out).ok
    assert shard_hashes(out) == shard_hashes(sample_shards)


def test_disk_full_line(tmp_path):
    """The line for the runner's wrapped ENOSPC, whatever step hit it (no mount needed)."""
    wrapped = (
        f"error: the build failed: RuntimeError: OSError: [Errno 28] {NO_SPACE} [while running "
        "'SplitSentences/Split'] (run again with --verbose for the traceback)"
    )
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit) as caught, out_trouble_said(out):
        raise SystemExit(wrapped)
    line = caught.value.code
    assert line.startswith("error: the build ran out of disk: the filesystem at ")
    assert f"which holds --out {out}, has " in line and "run the same command with --resume" in line
    assert "RuntimeError" not in line and "\n" not in line
    with pytest.raises(SystemExit, match="^error: something else$"), out_trouble_said(out):
        raise SystemExit("error: something else")
    # a path the error names outside OUT (a temporary folder, say) is named with its own
    elsewhere = disk_full_line(out, f"OSError: [Errno 28] {NO_SPACE}: '/proc/self/x'")
    assert elsewhere.startswith("the build ran out of disk: the filesystem at /proc, which ")
    assert "which holds /proc/self/x, has " in elsewhere


@pytest.mark.parametrize("command", ["vocab", "punkt"])
def test_a_full_disk_stops_vocab_and_punkt_in_one_line_saying_to_run_again(tmp_path, command):
    """They said `the build failed: RuntimeError: OSError: [Errno 28] ...` with no word of
    what to do; they keep no resume record, so the line says to run them again."""
    from pipeline.shell.cli import main

    with tmpfs(tmp_path / "fs", "size=20k", "test_disk_full_line covers the line") as where:
        out = f"{where}/out"
        with pytest.raises(SystemExit) as caught:
            main([command, "--input", SAMPLE_INPUT, "--out", out, "--workers", "1"])
        assert caught.value.code == (
            f"error: bert-shards {command} ran out of disk: the filesystem at {where}, which "
            f"holds --out {out}, has 0 bytes free ({NO_SPACE}); free space, then run the same "
            "command again"
        )
        assert os.listdir(out) == [".bert-shards.lock"]  # its temporary area removed


def test_a_filesystem_that_turns_read_only_during_a_build_is_one_line(tmp_path, monkeypatch):
    """The build's writes fail with EROFS after its start (a filesystem the kernel remounted
    read-only after an error): the line names the filesystem and OUT, and that --resume goes
    on once it is writable; the work finished so far is kept."""
    import errno

    import pipeline.stages.shards
    from pipeline.shell.cli import main

    out = str(tmp_path / "out")
    real, calls = pipeline.stages.shards.write_text, []

    def turns_read_only(path, text):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        real(path, text)

    monkeypatch.setattr(pipeline.stages.shards, "write_text", turns_read_only)
    with pytest.raises(SystemExit) as caught:
        main(["build", "--input", SAMPLE_INPUT, "--out", out, "--workers", "1"])
    mount = tmp_path
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    assert caught.value.code == (
        f"error: the build could not write: the filesystem at {mount}, which holds --out {out}, "
        "is read-only (Read-only file system); make it writable again (check it first if the "
        "system turned it read-only after an error), then run the same command with --resume "
        "to continue from what is finished"
    )
    monkeypatch.setattr(pipeline.stages.shards, "write_text", real)
    assert main(["build", "--input", SAMPLE_INPUT, "--out", out, "--workers", "1", "--resume"]) == 0
    assert validate(out).ok
    # a path outside OUT (a temporary folder, say) is named with its own filesystem
    said = read_only_line(out, "OSError: [Errno 30] Read-only file system: '/proc/self/x'")
    assert said.startswith("the build could not write: the filesystem at /proc, which holds ")
    assert "holds /proc/self/x, is read-only" in said


@pytest.mark.parametrize(
    "size, said",
    [
        (30e6, "30.0 MB"),
        (0, "0 bytes"),
        (512, "512 bytes"),
        (4_200, "4.2 kB"),
        (1.5e9, "1.5 GB"),
        (2.25e12, "2.2 TB"),
    ],
)
def test_disk_figures_in_the_unit_that_fits(size, said):
    assert disk_figure(size) == said


def test_the_disk_check_with_30_mb_free_says_mb(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)._replace(free=30_000_000)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    with pytest.raises(OutputError) as caught:
        check_free_space(str(tmp_path / "out"), 2_400_000_000)
    assert "needs about 2.4 GB of free disk" in str(caught.value)
    assert "its filesystem has 30.0 MB;" in str(caught.value)
    assert "0.0 GB" not in str(caught.value)


# Beam's `StateSampler.start` as it is, up to where a signal can raise: the sampling thread
# started, `started` not yet set, which `process_bundle`'s cleanup reads to decide to stop it.
STRANDING_START = """
import sys, threading
from apache_beam.runners.worker import statesampler, statesampler_fast
def start(self):
    self.tracked_thread = threading.current_thread()
    statesampler.set_current_tracker(self)
    statesampler_fast.StateSampler.start(self)
    raise KeyboardInterrupt
statesampler.StateSampler.start = start
"""


@pytest.mark.slow
def test_an_interrupt_that_strands_beams_sampling_thread_still_ends_the_build(tmp_path):
    """The signal lands inside Beam's bundle start, where Beam's cleanup would leave its
    sampling thread (not a daemon) running and the process waiting for it forever: the build
    ends in its line, with the interrupt's exit status."""
    code = STRANDING_START + (
        "from tests.helpers import build_shards\n"
        f"sys.exit(build_shards({str(tmp_path / 'out')!r}, '--num-shards', '4'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.endswith(INTERRUPTED)


def test_stranded_sampling_threads_are_stopped():
    import threading

    from apache_beam.runners.worker import statesampler, statesampler_fast
    from apache_beam.utils.counters import CounterFactory

    from pipeline.runners.beam_internals import stop_stranded_samplers

    before = set(threading.enumerate())
    sampler = statesampler.StateSampler("stage", CounterFactory(), sampling_period_ms=1)
    statesampler_fast.StateSampler.start(sampler)  # as an interrupt leaves it
    sampler.stop_if_still_running()  # Beam's cleanup: nothing, `started` is not set
    (thread,) = set(threading.enumerate()) - before
    assert thread.is_alive() and not thread.daemon
    stop_stranded_samplers()
    assert sampler.finished and not thread.is_alive()
    stop_stranded_samplers()  # nothing left: nothing done


@pytest.mark.parametrize(
    "command, sig, code", [("vocab", signal.SIGINT, 130), ("punkt", signal.SIGTERM, 143)]
)
def test_a_signal_stops_vocab_and_punkt_in_one_line(
    tmp_path, monkeypatch, capsys, command, sig, code
):
    """While the graph runs (in this process: the runner's place taken by a wait for the
    signal), a signal ends the command in the line that says to run it again."""
    import pipeline.runners.run
    from pipeline.shell.cli import main

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), sig)
        time.sleep(10)  # the handler raises in here
        raise AssertionError(f"{sig} did not interrupt")

    monkeypatch.setattr(pipeline.runners.run, "run_pipeline", signalled)
    argv = [command, "--input", SAMPLE_INPUT, "--out", str(tmp_path / "o"), "--workers", "1"]
    assert main(argv) == code
    assert capsys.readouterr().err == "interrupted; run the same command again\n"


@pytest.mark.parametrize("where", ["check_first_file", "run_pipeline"])
def test_a_build_stopped_before_its_out_was_made_says_run_it_again(
    tmp_path, monkeypatch, capsys, where
):
    """A signal while the inputs are checked (before OUT is made) has nothing to resume: the
    line says to run the command again. Once OUT holds the build's resume record, --resume."""
    import pipeline.runners.run
    import pipeline.shell.cli
    from pipeline.shell.cli import main

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # the handler raises in here
        raise AssertionError("SIGINT did not interrupt")

    owner = pipeline.shell.cli if where == "check_first_file" else pipeline.runners.run
    monkeypatch.setattr(owner, where, signalled)
    out = tmp_path / "o"
    assert main(["build", "--input", SAMPLE_INPUT, "--out", str(out), "--workers", "1"]) == 130
    said = capsys.readouterr().err
    if where == "check_first_file":
        assert said == "interrupted before any work started; run the same command again\n"
        assert not out.exists()
    else:
        assert said == INTERRUPTED
        assert (out / "shards" / ".building" / "build.json").exists()
