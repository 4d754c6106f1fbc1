"""A command's imports without Python's cyclic garbage collector, and the objects they made
kept out of every later collection.

`bert-shards` imports Beam, Arrow, numpy and the project's modules before it does anything:
over 100,000 objects that live as long as the process. The collector walks them again at every
full collection, during the imports themselves and through the input's listing and the graph,
all before a build's workers start (docs/benchmarks.md, "The collector during a build's
start"). `paused()` stops the collector where the command begins; the `resume` it yields,
called once the modules are imported, freezes what exists then (`gc.freeze`: those objects are
skipped by every later collection, in the worker processes forked afterwards too) and starts
the collector again, for all the command does from there: the garbage a listing of many gs://
objects makes is collected as it goes. Leaving the block undoes both, for a caller that runs
the command inside its own process (tests), except that a caller that had frozen objects of
its own keeps them frozen, and with them what `resume` added (the collector cannot unfreeze
some objects and not others). What the imports leave as reference cycles stays until the
process ends.

The test suite uses the same block around its own imports and collection (tests/conftest.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[Callable[[], None]]:
    """Stop the collector inside (a caller that stopped it keeps it stopped); yields `resume`,
    which freezes what exists then and starts the collector again (once; later calls do
    nothing). Leaving unfreezes what `resume` froze, unless the caller had frozen objects
    before (they stay frozen, with what `resume` added), and leaves the collector as it was."""
    ran = gc.isenabled()
    caller_froze = gc.get_freeze_count() > 0
    gc.disable()
    frozen = False

    def resume() -> None:
        nonlocal frozen
        if ran and not frozen:
            gc.freeze()
            frozen = True
            gc.enable()

    try:
        yield resume
    finally:
        if frozen and not caller_froze:
            gc.unfreeze()
        if ran:
            gc.enable()
