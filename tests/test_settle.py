"""A large file written locally, by the build (`pipeline.files.fsio.atomic_create`) or by
`schemas.manifest.atomic_write` (exports, checkpoints), is on disk and out of the page cache once
published; a small one is left to the kernel, or only fsynced by `atomic_write`. Which of a
file's pages are cached is read with `mincore`."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

import numpy as np
import pytest

from pipeline.files.fsio import atomic_create
from schemas import manifest
from schemas.manifest import SETTLE_BYTES, atomic_write

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


def random_bytes(n: int) -> bytes:
    return np.random.default_rng(0).bytes(n)


@pytest.fixture
def observable(tmp_path):
    """Skip where a freshly written file's pages cannot be seen cached (tmpfs keeps them
    always; some kernels do not report them)."""
    plain = tmp_path / "plain.bin"
    plain.write_bytes(random_bytes(2 * SETTLE_BYTES))
    cached, pages = cached_pages(plain)
    if cached < pages:
        pytest.skip("this filesystem's page cache cannot be observed with mincore")


def test_a_large_chunk_file_is_published_on_disk_and_out_of_the_page_cache(tmp_path, observable):
    data = random_bytes(2 * SETTLE_BYTES)
    path = tmp_path / "chunks" / "units-0.arrow"  # its folder is made, as Beam's create did
    with atomic_create(str(path)) as f:
        f.write(data[:SETTLE_BYTES])
        f.write(data[SETTLE_BYTES:])
    assert cached_pages(path) == (0, 2 * SETTLE_BYTES // mmap.PAGESIZE)
    assert path.read_bytes() == data
    assert os.listdir(path.parent) == ["units-0.arrow"]  # the temporary name is gone


def test_a_large_export_or_checkpoint_is_out_of_the_page_cache(tmp_path, observable):
    data = random_bytes(SETTLE_BYTES)
    path = tmp_path / "part-00000.hdf5"
    atomic_write(str(path), lambda f: f.write(data))
    assert cached_pages(path) == (0, SETTLE_BYTES // mmap.PAGESIZE)
    assert path.read_bytes() == data


def test_a_small_file_is_left_to_the_kernel_or_only_fsynced(tmp_path, monkeypatch):
    synced, dropped = [], []
    monkeypatch.setattr(manifest.os, "fsync", lambda fd: synced.append(fd))
    monkeypatch.setattr(manifest.os, "posix_fadvise", lambda *a: dropped.append(a), raising=False)
    small = b"x" * (SETTLE_BYTES - 1)
    with atomic_create(str(tmp_path / "marker.json")) as f:
        f.write(small)
    assert synced == [] and dropped == []
    atomic_write(str(tmp_path / "manifest.json"), lambda f: f.write(small))
    assert len(synced) == 1 and dropped == []  # a manifest is durable once published
    assert (tmp_path / "marker.json").read_bytes() == (tmp_path / "manifest.json").read_bytes()


def test_a_failed_write_publishes_nothing_and_leaves_its_temporary_file(tmp_path):
    path = tmp_path / "units-1.arrow"
    with pytest.raises(RuntimeError):
        with atomic_create(str(path)) as f:
            f.write(b"y" * SETTLE_BYTES)
            raise RuntimeError("the writer failed")
    assert not path.exists()
    assert (tmp_path / "units-1.arrow.tmp").exists()  # a resumed build writes it again


def test_a_write_the_disk_refuses_names_the_file_and_leaves_nothing(tmp_path):
    """A file object's OSError (a full disk) names no file: `atomic_write` names `path`."""
    import errno

    path = tmp_path / "manifest.json"

    def full(f):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as e:
        atomic_write(str(path), full)
    assert (e.value.errno, e.value.filename) == (errno.ENOSPC, str(path))
    assert os.listdir(tmp_path) == []


def test_a_filesystem_that_declines_the_advice_still_gets_the_file(tmp_path, monkeypatch):
    def declined(*args):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(manifest.os, "posix_fadvise", declined, raising=False)
    data = random_bytes(SETTLE_BYTES)
    with atomic_create(str(tmp_path / "units-2.arrow")) as f:
        f.write(data)
    atomic_write(str(tmp_path / "part-00001.hdf5"), lambda f: f.write(data))
    assert (tmp_path / "units-2.arrow").read_bytes() == data
    assert (tmp_path / "part-00001.hdf5").read_bytes() == data
