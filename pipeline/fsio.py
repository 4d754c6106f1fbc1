"""Files through Beam filesystems (local, gs://, ...): written whole or not at all, and the
build's own places inside OUT."""

from __future__ import annotations

from contextlib import contextmanager

from apache_beam.io.filesystems import FileSystems

from schemas.manifest import SHARDS_DIR

BUILDING_DIR = ".building"  # inside OUT/shards: the unfinished build's files


def building_dir(out: str) -> str:
    return FileSystems.join(out, SHARDS_DIR, BUILDING_DIR)


@contextmanager
def atomic_create(path: str):
    """A file opened for writing under a temporary name and renamed to `path` when the block
    ends without error, so a file that exists is complete (a killed writer leaves `.tmp`)."""
    tmp = path + ".tmp"
    with FileSystems.create(tmp) as f:
        yield f
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def write_text(path: str, text: str) -> None:
    with atomic_create(path) as f:
        f.write(text.encode("utf-8"))
