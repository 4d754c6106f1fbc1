"""The C allocator of a build's processes, told to keep the memory it frees for reuse (when the
build is given its vocab: `pipeline.shell.cli` does not tell it where a vocab is trained).

A build's stages allocate and free large numpy arrays over and over: a bucket's rows, their
gather indices, masking's keys. glibc gives an allocation above its mmap threshold (at most
32 MiB) pages of its own and returns them on free, so the next array of that size faults in
and zeroes every page again, in the kernel's time. Told to allocate from its heap alone and to
return freed memory to the system only past `TRIM_BYTES`, it hands the same pages back out.
The peak stays what the largest arrays need at once; what was freed below it stays mapped
until the process ends (docs/benchmarks.md, raw formats, has the figures).

Only glibc has `mallopt`; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
TRIM_BYTES = 1 << 30


def reuse_freed_memory(trim_bytes: int = TRIM_BYTES) -> bool:
    """Whether glibc was told (in this process, and so in the workers it forks)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, trim_bytes) == 1
