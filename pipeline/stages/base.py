"""The bases of the build's Beam steps.

`Stage`: a composite transform whose settings are dataclass fields, the one way the build
writes one (`expand` a short chain of labelled steps):

@dataclass(eq=False)  # transforms compare by identity, as Beam expects
class SplitSentences(Stage):
    tmp: str
    ...

`Step`: a DoFn of the build; every worker process that runs one collects garbage less often
(`fewer_collections`) and gives numpy's arrays small pages (`small_pages`).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.files.chunks import Chunk

# Python's cyclic collector runs a young-generation pass every 700 new container objects, and
# each pass that promotes survivors leads, in time, to full passes over everything alive. A
# step allocates millions of short-lived objects (mwparserfromhell's tokens, Punkt's tokens,
# pair plans), while a worker holds a large, long-lived heap (Beam, the vocab, the word cache).
# Collecting every 50,000 allocations instead saves CPU on every raw-format build (measured in
# docs/benchmarks.md, the Wikipedia reader). Memory: at most 50,000 young objects wait.
YOUNG_COLLECTION_EVERY = 50_000


def fewer_collections() -> None:
    """Raise the young generation's threshold of this process (never lower it)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_COLLECTION_EVERY:
        gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


# numpy asks the kernel for transparent huge pages (madvise) for every array of 4 MB or more. A
# huge page is faulted in whole, 2 MB at a time, which is costly where free memory is not yet
# backed (a virtual machine that hands its free memory back to its host), and every worker pays
# it again for its first large arrays. The build's arrays are filled once and read in order, so
# ordinary pages cost it no user time (docs/benchmarks.md, "numpy's huge pages").
# NUMPY_MADVISE_HUGEPAGE, when set, is the user's choice and is kept.
HUGE_PAGES_VARIABLE = "NUMPY_MADVISE_HUGEPAGE"


def small_pages() -> None:
    """numpy's large arrays in ordinary pages for this process, unless the user chose
    (HUGE_PAGES_VARIABLE set) or this numpy has no switch for it."""
    if HUGE_PAGES_VARIABLE in os.environ:
        return
    import numpy as np

    core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is not None:
        switch(False)


def worker_settings() -> None:
    """What every process that runs a step of the build sets first."""
    fewer_collections()
    small_pages()


@dataclass(eq=False)
class Stage(beam.PTransform):
    def __post_init__(self) -> None:
        super().__init__()


class Step(beam.DoFn):
    def setup(self) -> None:
        worker_settings()


def has_file(chunk: Chunk) -> bool:
    """Whether a step's record names a file (one without carries only counts)."""
    return bool(chunk.path)


def next_path(tmp: str, kind: str, chunk: Chunk) -> str:
    """The file of the next kind made from `chunk`: the same name in the kind's folder."""
    return FileSystems.join(tmp, kind, chunk.path.rsplit("/", 1)[-1])
