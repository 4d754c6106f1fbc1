"""The export's target folder, DEST: the one place an export touches it.

A local DEST (`Dest`): every file is published as a shard set's files are, written under a
temporary name beside its final one, fsynced, hashed and renamed
(`schemas.manifest.atomic_write`), so a trainer never reads a half-written file under a name it
globs for.

A `gs://bucket/prefix` DEST (`RemoteDest`, through `schemas.storage`): every file is written
the same way into a local scratch folder (the same writer, so the same bytes; h5py needs a
local file anyway), hashed there, uploaded once under its final name and removed from the
scratch folder. An object appears only once its upload completes, so a trainer globbing the
prefix never sees part of a file either; the scratch folder holds one file at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from schemas import storage
from schemas.manifest import atomic_write


@dataclass(frozen=True)
class Written:
    """One file an export wrote: its name inside DEST, rows, size and sha256."""

    path: str
    rows: int
    bytes: int
    sha256: str


class Dest:
    """A local folder an export writes into."""

    def __init__(self, path: str):
        self.path = path

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def problem(self) -> str:
        """Why DEST cannot be a target, and what to do ("" when it can): it exists and is not
        a folder, or it (or the nearest folder above, where it is to be made) refuses writes."""
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            return f"{self.path} exists and is not a folder; give a folder for the export"
        above = storage.nearest_existing(self.path)
        if not os.path.isdir(above):
            return f"{self.path} cannot be made: {above} is a file; give a folder for the export"
        if not os.access(above, os.W_OK | os.X_OK):
            why, remedy = storage.unwritable(above)
            if above != os.path.abspath(self.path):
                why = f"cannot be made: {above} {why}"
            return f"{self.path} {why}; choose another DEST or {remedy}"
        return ""

    def names(self) -> list[str]:
        """The entries of DEST, sorted (none when it does not exist yet)."""
        return sorted(os.listdir(self.path)) if os.path.isdir(self.path) else []

    def read_text(self, name: str) -> str | None:
        path = self.join(name)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()

    def create(self) -> None:
        os.makedirs(self.path, exist_ok=True)

    def publish(self, name: str, rows: int, write: Callable[[BinaryIO], object]) -> Written:
        """Write `name` atomically with `write(f)`, `f` a seekable file open for reading and
        writing; its size and sha256 are read back from the temporary file before the rename,
        so the summary describes the bytes on disk."""
        digest = {}

        def write_and_hash(f: BinaryIO) -> None:
            f.flush()
            # The temporary file's descriptor is open for reading too (mkstemp): a second file
            # object on a copy of it gives writers that seek and read back (HDF5) what they need.
            with open(os.dup(f.fileno()), "r+b") as g:
                write(g)
                g.flush()
            digest["sha256"], digest["bytes"] = storage.sha256_of(f.fileno())

        atomic_write(self.join(name), write_and_hash)
        return Written(name, rows, digest["bytes"], digest["sha256"])

    def remove(self, name: str) -> None:
        path = self.join(name)
        if os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)


class RemoteDest:
    """A `gs://bucket/prefix` an export writes into, each file made in `scratch` (a local
    folder of the export's own) and uploaded whole."""

    def __init__(self, path: str, scratch: str):
        self.path = path
        self.scratch = Dest(scratch)

    def join(self, name: str) -> str:
        return storage.join(self.path, name)

    def problem(self) -> str:
        """An object named as DEST itself is a file, not a folder; anything below it is fine."""
        if storage.exists(self.path):
            return (
                f"{self.path} is an object, not a folder (a prefix); give a folder for the export"
            )
        return ""

    def names(self) -> list[str]:
        """The entries right below DEST, sorted: its objects' names, and the first part of the
        names of those further down (as a local listing shows a sub-folder)."""
        return sorted({rel.split("/", 1)[0] for rel in storage.list_files(self.path)})

    def read_text(self, name: str) -> str | None:
        try:
            return storage.read_text(self.join(name))
        except FileNotFoundError:
            return None

    def create(self) -> None:
        """Nothing: an object store has no folders; DEST appears with its first object."""

    def publish(self, name: str, rows: int, write: Callable[[BinaryIO], object]) -> Written:
        """`Dest.publish` into the scratch folder, then one upload under the final name; the
        summary describes the bytes uploaded."""
        written = self.scratch.publish(name, rows, write)
        local = self.scratch.join(name)
        try:
            storage.upload(local, self.join(name))
        finally:
            os.unlink(local)
        return written

    def remove(self, name: str) -> None:
        storage.remove(self.join(name))


def open_dest(path: str, scratch: str | None) -> Dest | RemoteDest:
    """The DEST `path` names: a local folder, or (with a scratch folder) an object store's."""
    if storage.is_remote(path):
        if scratch is None:
            raise ValueError(f"{path}: an object store's DEST needs a local scratch folder")
        return RemoteDest(path, scratch)
    return Dest(path)
