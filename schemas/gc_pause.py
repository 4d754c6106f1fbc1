"""A command's start without Python's cyclic garbage collector; its work with what the start made
kept out of every later collection.

Before a build does any work its driver imports Beam, Arrow, numpy and the project's modules,
lists the input and makes the graph: well over 100,000 objects, nearly all of which live as long
as the process. The collector walks them again at every full collection, several times during
that start, while the workers wait for it (docs/benchmarks.md, "The collector during a
build's start"). `pause()` stops the collector where the command begins. `resume()`, where
the work begins, freezes what exists then (`gc.freeze`: those objects are skipped by every later
collection, in the worker processes forked afterwards too) and starts the collector again.
`restore()` undoes both, for a caller that runs the command inside its own process (tests).

Paused, the collector frees no reference cycles; what the start leaves as cycles is a few
modules' and the graph's bookkeeping, kept until the process ends.
"""

from __future__ import annotations

import gc

_paused: list[bool] = []  # one entry per pause() not yet restored: whether it stopped the collector
_frozen: list[bool] = []  # the same, whether resume() froze the objects since


def pause() -> None:
    """Stop the collector, if it runs (a caller that stopped it keeps it stopped)."""
    stopped = gc.isenabled()
    if stopped:
        gc.disable()
    _paused.append(stopped)
    _frozen.append(False)


def resume() -> None:
    """Freeze what exists now and start the collector again, if `pause()` stopped it; once per
    pause (a second call does nothing)."""
    if not _paused or not _paused[-1] or _frozen[-1]:
        return
    gc.freeze()
    _frozen[-1] = True
    gc.enable()


def restore() -> None:
    """Undo the last `pause()` (and its `resume()`): the frozen objects are collectable again and
    the collector runs as it did before the pause."""
    if not _paused:
        return
    stopped, frozen = _paused.pop(), _frozen.pop()
    if frozen:
        gc.unfreeze()
    if stopped:
        gc.enable()
