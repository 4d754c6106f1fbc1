"""`schemas.interrupts`, which every CLI of the three packages runs its command inside: a
signal that lands in a finalizer is raised once it has returned; one that a C finalizer or a
clean-up dropped is raised again once nothing holds it, one being unwound or kept to be raised
later is left alone; the handlers before are restored, and a thread other than the main one
keeps its own; and `bert-schemas` stopped by a signal: one line, 130 or 143, and for an export
the way to export again (`--overwrite`). The other commands, stopped by real signals in fresh
processes: tests/pipeline/test_interrupts.py and tests/model/test_interrupts.py."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import schemas.inspection
import schemas.validate.run
from schemas.cli import main
from schemas.export.dest import Dest
from schemas.interrupts import Interrupted, interrupts_unwind, signals_held
from tests.helpers import ROOT, signal_after


def test_a_signal_inside_a_finalizer_is_not_lost():
    """A `__del__` that catches everything (gRPC's channels have one) would swallow the
    interrupt raised inside it, and the command would go on; it is raised once the finalizer has
    returned."""

    class Swallows:
        def __del__(self):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(100_000):  # the handler runs in here
                    pass
            except BaseException:
                pass

    with pytest.raises(Interrupted) as caught:
        with interrupts_unwind():
            obj = Swallows()
            del obj
            time.sleep(2)  # the deferred interrupt arrives within it
    assert caught.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_signal_that_a_file_objects_finalizer_drops_is_raised_again():
    """A file object freed by the garbage collector is closed by a finalizer written in C, which
    drops what its `closed` raises without a word (urllib3's responses: a gs:// build stopped by
    SIGTERM once ran on to the end and exited 0); the interrupt is raised again."""

    class Response(io.RawIOBase):
        @property
        def closed(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100_000):  # the handler runs in here
                pass
            return False

    with pytest.raises(Interrupted) as caught:
        with interrupts_unwind():
            obj = Response()
            del obj
            time.sleep(2)  # the interrupt is raised again within it
    assert caught.value.signum == signal.SIGTERM
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def sigterm_here() -> None:
    """SIGTERM to this process, and a wait in which its handler raises."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(2)


def sigterm_wrapped_as_beam_does() -> None:
    try:
        sigterm_here()
    except Interrupted as e:
        raise RuntimeError(f"{e} while running") from e


def test_an_interrupt_being_unwound_is_not_raised_again():
    """The check finds the interrupt unwinding, wrapped as a runner wraps it: the `finally` that
    cleans up runs to its end."""
    cleaned = []
    try:
        with interrupts_unwind():
            try:
                sigterm_wrapped_as_beam_does()
            finally:
                time.sleep(0.3)  # the check comes within it
                cleaned.append(True)
    except BaseException as e:  # an interrupt raised again would be a KeyboardInterrupt
        caught = e
    assert type(caught) is RuntimeError and str(caught) == "SIGTERM while running"
    assert cleaned


def test_an_interrupt_caught_as_an_exception_once_wrapped_is_raised_again():
    """Beam wraps an interrupt in a `RuntimeError`, and its runner's clean-up catches those as
    `Exception`, logs them and goes on; the interrupt, held by nothing then, is raised again."""
    with pytest.raises(Interrupted):
        with interrupts_unwind():
            try:
                sigterm_wrapped_as_beam_does()
            except Exception:
                pass
            time.sleep(2)  # the interrupt is raised again within it


def test_an_interrupt_dropped_after_it_was_seen_unwinding_is_raised_again():
    """A check that finds the interrupt in a `finally` on its way out keeps watching it: a
    handler further out that drops it is found out too."""
    with pytest.raises(Interrupted):
        with interrupts_unwind():
            try:
                try:
                    sigterm_here()
                finally:
                    time.sleep(0.3)  # checks come within it, and find it unwinding
            except BaseException:
                pass
            time.sleep(2)  # the interrupt is raised again within it


def test_an_interrupt_kept_to_be_raised_later_is_not_raised_twice():
    """Code that keeps the interrupt, cleans up and raises it itself: nothing handles it
    meanwhile, but it is held, so it is left alone."""
    cleaned = []
    try:
        with interrupts_unwind():
            try:
                sigterm_here()
            except Interrupted as e:
                kept = e
            time.sleep(0.3)  # checks come within it
            cleaned.append(True)
            raise kept
    except BaseException as e:
        caught = e
    assert caught is kept and cleaned


def test_the_handlers_are_restored_and_threads_keep_theirs():
    before = signal.getsignal(signal.SIGTERM)
    with interrupts_unwind():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    failed = []

    def in_a_thread():
        try:
            with interrupts_unwind():
                pass
        except ValueError as e:  # signal.signal outside the main thread
            failed.append(e)

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert not failed


def test_a_signal_while_held_is_raised_as_the_block_ends_whichever_thread_took_it():
    """Inside `signals_held` the handler records the signal, even when the kernel hands it to a
    thread that leaves it open (torch's do), and the interrupt is raised as the block ends."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)  # started before the block: both signals open
    other.start()
    reached = []
    try:
        with pytest.raises(Interrupted) as caught:
            with interrupts_unwind(), signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler runs in here, and only records it
                reached.append(True)
    finally:
        stop.set()
        other.join()
    assert reached and caught.value.signum == signal.SIGTERM


@pytest.mark.parametrize(
    "command, owner, name, sig, code",
    [
        ("validate", schemas.validate.run, "validate", signal.SIGINT, 130),
        ("validate", schemas.validate.run, "validate", signal.SIGTERM, 143),
        ("inspect", schemas.inspection, "summarize", signal.SIGINT, 130),
        ("inspect", schemas.inspection, "summarize", signal.SIGTERM, 143),
    ],
)
def test_a_signal_stops_validate_and_inspect_with_one_line(
    sample_shards, monkeypatch, capsys, command, owner, name, sig, code
):
    signal_after(monkeypatch, owner, name, sig)
    assert main([command, sample_shards]) == code
    assert capsys.readouterr().err == "interrupted; run the same command again\n"


def test_a_second_signal_ends_the_process_at_once(tmp_path):
    """The first signal unwinds the command; one that comes while it unwinds (a cleanup that
    hangs, say) ends the process, as a user pressing Ctrl-C again expects."""
    script = (
        "import os, signal, time\n"
        "from schemas.interrupts import interrupts_unwind\n"
        "with interrupts_unwind():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(30)\n"
        "    except KeyboardInterrupt:\n"
        "        print('unwinding', flush=True)\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(30)\n"
        "        print('still here', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "unwinding\n")


def test_an_export_stopped_by_sigterm_says_how_to_export_again(sample_shards, tmp_path, capsys):
    dest = str(tmp_path / "dest")
    args = ["export", sample_shards, dest, "--format", "tfrecord"]
    with pytest.MonkeyPatch.context() as patch:  # after the first file is published
        signal_after(patch, Dest, "publish", signal.SIGTERM)
        assert main(args) == 143
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"interrupted; {dest} may hold part of the export, without its export.json: run the "
        "same command with --overwrite to export again"
    )
    assert os.listdir(dest) and "export.json" not in os.listdir(dest)
    assert main(args) == 1  # not empty: refused
    assert main([*args, "--overwrite"]) == 0  # what the line says works
    assert "export.json" in os.listdir(dest)
