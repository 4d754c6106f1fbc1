"""One writer at a time into a local folder: an exclusive `flock` on a file in it that names its
holder (a build into OUT, `pipeline.shell.outdir.OutputLock`; a run into RUN,
`model.run_lock.RunLock`).

The kernel releases the lock when the descriptor closes or the process ends, however it ends, so
a killed holder never leaves a stale lock; the file stays, empty or naming the last holder."""

from __future__ import annotations

import fcntl
import os

HOLDER_BYTES = 300  # of the file read to name a holder (each writes one short line)


class Held(Exception):
    """The lock is held by another process: `holder` is the line it wrote ("" if none)."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def take(path: str, holder: str) -> int:
    """Open (or create) `path`, lock it without waiting and write `holder` into it in place of
    what was there; returns the open descriptor, whose closing releases the lock. Raises `Held`
    when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, HOLDER_BYTES, 0).decode("utf-8", "replace").strip()
        os.close(fd)
        raise Held(other) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode(), 0)
    return fd
