"""A command's imports without Python's cyclic garbage collector, and the objects they made
kept out of every later collection.

`bert-shards` imports Beam, Arrow, numpy and the project's modules before it does anything:
over 100,000 objects that live as long as the process. The collector walks them again at every
full collection, during the imports themselves and through the input's listing and the graph,
all before a build's workers start (docs/benchmarks.md, "The collector during a build's
start"). `pause()` stops the collector where the command begins. `resume()`, once the modules
are imported, freezes what exists then (`gc.freeze`: those objects are skipped by every later
collection, in the worker processes forked afterwards too) and starts the collector again, for
all the command does from there: the garbage a listing of many gs:// objects makes is collected
as it goes. `restore()` undoes both, for a caller that runs the command inside its own process
(tests). What the imports leave as reference cycles stays until the process ends.
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
