"""A command's process ends without Python's teardown once the command has returned.

`arm()` runs first in a command's entry point, before Beam, Arrow or logging are imported, and
registers `_end` with `atexit`. Exit handlers run last-registered first, so every handler the
libraries register later (logging's, multiprocessing's, Dask's, certifi's) still runs, and
`_end` runs last; non-daemon threads have been joined before any of them, as always.
`returned(code)` records the status of a command that returned: `_end` then flushes the
standard streams and ends the process with `os._exit(code)`, skipping Python's teardown, which
frees every object of every imported module (Beam, Arrow, numpy, the tokenizer) one by one for
memory the OS takes back anyway: about a quarter of a CPU-second after a build
(docs/benchmarks.md, "The process's end"). A command that raised, and a process forked from
one (its own status is never recorded), ends as Python ends it.
"""

from __future__ import annotations

import atexit
import os
import sys

_RETURNED: dict[int, int] = {}  # pid -> the status its command returned
_armed = False


def arm() -> None:
    """Register `_end` (once per process: a later call keeps the first, earliest place): call it
    before the command's heavy imports."""
    global _armed
    if not _armed:
        _armed = True
        atexit.register(_end)


def returned(code: int | None) -> int:
    """Record that this process's command returned `code` (None is 0); returns the status."""
    status = code or 0
    _RETURNED[os.getpid()] = status
    return status


def _end() -> None:
    status = _RETURNED.get(os.getpid())
    if status is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(status)
