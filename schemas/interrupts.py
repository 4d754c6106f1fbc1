"""Ctrl-C and SIGTERM for every command of the three packages: while a command runs, either
signal raises `Interrupted` in the main thread, so the command unwinds as after a failure (its
`finally` blocks run, its child processes end, a lock is released) and its CLI prints one line
and exits 130 or 143. A second signal ends the process at once.

Four places where the exception would be lost, and what is done about each:
- a finalizer (`__del__`): Python ignores what one raises, and gRPC's channels and DataLoader's
  iterators run code in theirs. A signal that arrives there is raised again once the finalizer
  has returned (`interrupts_unwind`).
- a finalizer written in C that runs Python code: a file object's, which calls its `closed` and
  `close` as the garbage collector frees it (urllib3's responses, which the storage client
  leaves to it), drops what they raise without a word, and no frame says it is a finalizer. A
  signal lands there readily: the handler runs at the first Python code after a collection,
  which is that finalizer's.
- a library's clean-up: Beam wraps the interrupt in a `RuntimeError`, and its runner's clean-up
  catches those as `Exception`, logs them and goes on.
  For both, each interrupt raised is watched through a weak reference every `CHECK_SECONDS`
  while the command runs: once nothing holds it, neither a handler nor an exception that it
  caused, it was dropped, and it is raised again. One that is unwinding, or kept to be raised
  later, is held, so it is never raised twice.
- a fork's at-fork hooks (logging's lock release among them): CPython drops what a hook raises.
  Code that forks holds both signals back around the fork (`signals_held`), and the interrupt
  is raised once the block ends, in the code that forked.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
import weakref

HELD = (signal.SIGINT, signal.SIGTERM)
DEFER_SECONDS = 0.01  # how soon a signal that arrived in a finalizer is raised again
CHECK_SECONDS = 0.05  # how often an interrupt raised is looked for, to raise it again if dropped

_DEFERRED: list[int] = []  # a signal that arrived inside a finalizer, raised once it returned
_RAISED: list[tuple[int, weakref.ref]] = []  # the interrupt raised last: signal, weak reference
_HOLDING = 0  # how many `signals_held` blocks this process is inside
_HELD: list[int] = []  # signals that arrived inside one, raised as the outermost ends


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread; `exit_code` is the shell's 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(e: KeyboardInterrupt) -> int:
    """130 for Ctrl-C (also one that came before the handlers were set), 143 for SIGTERM."""
    return 128 + getattr(e, "signum", signal.SIGINT)


def _raise_interrupted(signum, frame) -> None:
    if _HOLDING:
        _HELD.append(signum)
        return
    if _in_finalizer(frame):
        _DEFERRED.append(signum)
        signal.setitimer(signal.ITIMER_REAL, DEFER_SECONDS)
        return
    for sig in HELD:  # a second signal ends the process at once
        signal.signal(sig, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS)
    raise _watched(Interrupted(signum))  # no local name: its traceback would hold it


def _watched(e: Interrupted) -> Interrupted:
    _RAISED[:] = [(e.signum, weakref.ref(e))]
    return e


def _on_alarm(signum, frame) -> None:
    """The timer: raise a deferred signal, or again an interrupt that nothing holds."""
    if _DEFERRED:
        _raise_interrupted(_DEFERRED.pop(), frame)
    elif _RAISED:
        gc.collect(1)  # a dropped one may sit in a cycle with its traceback's frames
        if _RAISED[0][1]() is None:  # nothing holds it: dropped
            _raise_interrupted(_RAISED.pop()[0], frame)
        else:
            signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS)


def _in_finalizer(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def active() -> bool:
    """Whether this process's SIGTERM raises `Interrupted` now (inside `interrupts_unwind`)."""
    return signal.getsignal(signal.SIGTERM) is _raise_interrupted


@contextlib.contextmanager
def interrupts_unwind():
    """While a command runs, SIGINT and SIGTERM raise `Interrupted` (after the finalizer, when
    one was running); the handlers before are restored after. Only the main thread may set
    handlers (a caller's thread keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signal.SIGINT: _raise_interrupted, signal.SIGTERM: _raise_interrupted}
    handlers[signal.SIGALRM] = _on_alarm
    before = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _DEFERRED.clear()
        _RAISED.clear()
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM held back around what an interrupt must not cut: a fork, or a write
    that a library would spoil; yields what a forked child passes to `release_in_child` once
    it runs code of its own.

    Python runs a signal's handler in the main thread, in the next Python code it runs, and in
    a fork that is the interpreter's at-fork hooks, where CPython drops whatever a hook raises:
    the interrupt was lost and the command went on as if nothing had happened. Inside the block
    this thread's signal mask holds both signals, and the handler of `interrupts_unwind` (which
    runs in the main thread whichever thread the kernel chose: torch's own threads leave both
    signals open) records a signal instead of raising; the interrupt is raised as the outermost
    block ends, in the code that forked."""
    global _HOLDING
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    _HOLDING += 1
    try:
        yield mask
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending signal arrives now
        _HOLDING -= 1
        if not _HOLDING and _HELD:
            signum = _HELD[0]
            _HELD.clear()
            _raise_interrupted(signum, None)


def release_in_child(mask, sigint, sigterm) -> None:
    """In a child forked inside `signals_held`: its own handlers for SIGINT and SIGTERM (a fork
    leaves it the parent command's, which would unwind the parent's stack in the child), set
    while both are still held, so that one which landed during the fork meets them; then its
    parent's signal mask from before the block, and signals no longer held."""
    global _HOLDING
    signal.signal(signal.SIGINT, sigint)
    signal.signal(signal.SIGTERM, sigterm)
    _HOLDING = 0
    _HELD.clear()
    _RAISED.clear()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
