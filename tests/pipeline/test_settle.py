"""A large file the build writes locally is on disk and out of the page cache once published;
a small one is left to the kernel. Which of a file's pages are cached is read with `mincore`."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

import numpy as np
import pytest

from pipeline.files import fsio
from pipeline.files.fsio import SETTLE_BYTES, atomic_create

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="posix_fadvise and mincore as Linux has them"
)


def cached_pages(path) -> tuple[int, int]:
    """(pages of `path` in the page cache, pages in all), without reading the file."""
    size = os.path.getsize(path)
    pages = -(-size // mmap.PAGESIZE)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
        view = np.frombuffer(m, dtype=np.uint8)
        vector = (ctypes.c_ubyte * pages)()
        mincore = ctypes.CDLL(None, use_errno=True).mincore
        rc = mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vector)
        del view
    assert rc == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vector), pages


def test_a_large_file_is_published_on_disk_and_out_of_the_page_cache(tmp_path):
    data = np.random.default_rng(0).bytes(2 * SETTLE_BYTES)
    plain = tmp_path / "plain.arrow"
    plain.write_bytes(data)
    cached, pages = cached_pages(plain)
    if cached < pages:
        pytest.skip("this filesystem's page cache cannot be observed with mincore")
    path = tmp_path / "chunks" / "units-0.arrow"  # its folder is made, as Beam's create did
    with atomic_create(str(path)) as f:
        f.write(data[:SETTLE_BYTES])
        f.write(data[SETTLE_BYTES:])
    assert cached_pages(path) == (0, pages)
    assert path.read_bytes() == data
    assert os.listdir(path.parent) == ["units-0.arrow"]  # the temporary name is gone


def test_a_small_file_is_left_to_the_kernel(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(fsio.os, "fsync", lambda fd: synced.append(fd))
    path = tmp_path / "marker.json"
    with atomic_create(str(path)) as f:
        f.write(b"x" * (SETTLE_BYTES - 1))
    assert synced == []
    assert path.read_bytes() == b"x" * (SETTLE_BYTES - 1)


def test_a_failed_write_publishes_nothing_and_leaves_its_temporary_file(tmp_path):
    path = tmp_path / "units-1.arrow"
    with pytest.raises(RuntimeError):
        with atomic_create(str(path)) as f:
            f.write(b"y" * SETTLE_BYTES)
            raise RuntimeError("the writer failed")
    assert not path.exists()
    assert (tmp_path / "units-1.arrow.tmp").exists()  # a resumed build writes it again
