"""Pre-training on a shard set in an object store: its shards stream into a bounded local cache.

`open_set(directory)` opens a set as `ShardSet.open` does. For a `gs://` set it attaches a
`ShardCache`: the first time the loader reads a shard it is copied (one request) into the cache
folder, its sha256 and size checked against the manifest, and memory-mapped from there as a local
shard is; when the copies would exceed the cache's size, the least recently read ones are
removed, and fetched again when the loader next needs them. The loader's batches address rows by
position, never by what happens to be cached, so batches and resumes are those of a local copy.

The cache folder (`--shard-cache DIR`, by default `~/.cache/bert-shards/shards`) holds one file
per shard, named by its sha256, so sets and runs that share shards share copies. The processes
of one machine (ranks, DataLoader workers) share it: a lock file serialises the decisions of
what to remove, each copy is written under a temporary name and renamed into place, and a
shard another process removed in between is fetched again. The cached copies stay within
`--shard-cache-gb` (copies still arriving included) unless the copies in flight at one moment,
one per process, alone need more; a shard the loader still has mapped keeps its disk blocks after
it is removed until the loader lets go of it (the loader keeps up to 2 x --shuffle-window).
Only files of the cache's own names are ever removed, in a folder that is new, empty, or marked
as a cache by an earlier run.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from schemas import storage
from schemas.manifest import MANIFEST_NAME
from schemas.reader import ShardSet
from schemas.shard import read_shard

DEFAULT_GB = 20.0
MARKER = ".bert-shard-cache"  # names a folder as a cache; only then are its files removed
LOCK = ".lock"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COPY = re.compile(r"([0-9a-f]{64})\.arrow")  # a finished copy
_PART = re.compile(r"\.([0-9a-f]{64})\.(\d+)\.[0-9a-f]{32}\.part")  # a copy arriving, by pid


@dataclass(frozen=True)
class CacheSettings:
    directory: str | None = None  # None: default_directory()
    gigabytes: float | None = None  # None: DEFAULT_GB

    @property
    def given(self) -> bool:
        return self.directory is not None or self.gigabytes is not None


_settings = CacheSettings()


@contextmanager
def settings(directory: str | None, gigabytes: float | None) -> Iterator[None]:
    """The cache `open_set` gives a gs:// set while the block runs (the command line's flags)."""
    global _settings
    saved, _settings = _settings, CacheSettings(directory, gigabytes)
    try:
        yield
    finally:
        _settings = saved


def default_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bert-shards", "shards")


def gigabytes(text: str) -> float:
    """argparse type of --shard-cache-gb: a positive number of GB (10^9 bytes)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of GB")
    return value


def open_set(directory: str) -> ShardSet:
    """`ShardSet.open`, a gs:// set reading its shards through a `ShardCache`."""
    try:
        shards = ShardSet.open(directory)
    except OSError as e:  # refused access, an unreachable store: one line, as a bad flag is
        if isinstance(e, FileNotFoundError) or not storage.is_remote(directory):
            raise
        raise ValueError(str(e)) from None
    given = _settings
    if not shards.is_remote:
        if given.given:
            raise ValueError(
                f"--shard-cache and --shard-cache-gb are for shards in an object store "
                f"(gs://...); {directory} is read where it is: drop them"
            )
        return shards
    cache = ShardCache(
        shards,
        given.directory or default_directory(),
        int((given.gigabytes or DEFAULT_GB) * 1e9),
    )
    shards.read_table = cache.table
    return shards


def human(n: float) -> str:
    """Bytes in the unit that fits: 812 B, 38.8 kB, 97.1 MB, 2.40 GB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


class ShardCache:
    """Local copies of a remote set's shards, at most `max_bytes` of them (see the module)."""

    def __init__(self, shards: ShardSet, folder: str, max_bytes: int):
        self.url = shards.directory
        self.folder = os.path.abspath(folder)
        self.max_bytes = max_bytes
        self.entries = [(e.path, e.sha256, e.bytes) for e in shards.manifest.shards]
        self.fetched = self.hits = self.evicted = 0  # this process's, for tests and logs
        self._refuse_what_cannot_work()
        self.sizes = {sha: n for _, sha, n in self.entries}
        self._adopt_folder()
        with self._locked():
            self._remove_dead_parts()

    def _refuse_what_cannot_work(self) -> None:
        for i, (path, sha, size) in enumerate(self.entries):  # they name files in the folder
            digest = isinstance(sha, str) and _SHA256.fullmatch(sha)
            if not digest or type(size) is not int or size < 0:
                raise ValueError(
                    f"{self.url}/{MANIFEST_NAME}: shard entry {i} ({path!r}) lists sha256 "
                    f"{sha!r} and {size} bytes, not a digest and a size; rebuild the set"
                )
        if not self.entries:
            return
        path, _, largest = max(self.entries, key=lambda e: e[2])
        if largest > self.max_bytes:
            raise ValueError(
                f"--shard-cache-gb {self.max_bytes / 1e9:g} ({human(self.max_bytes)}) cannot hold "
                f"{self.url}/{path} ({human(largest)}); give at least "
                f"{largest * 1.01 / 1e9:.3g} GB, "
                "better room for --shuffle-window + 1 shards, which the loader reads together"
            )

    def _adopt_folder(self) -> None:
        """Make the folder a cache, or refuse one that holds anything else."""
        marker = os.path.join(self.folder, MARKER)
        if os.path.isdir(self.folder) and not os.path.exists(marker) and os.listdir(self.folder):
            raise ValueError(
                f"--shard-cache {self.folder}: holds files and is not a shard cache (no {MARKER}); "
                "the cache removes the shards it evicts, so give it a new or empty folder"
            )
        try:
            os.makedirs(self.folder, exist_ok=True)
            with open(marker, "a", encoding="utf-8"):
                pass
        except OSError as e:
            raise ValueError(f"--shard-cache {self.folder}: cannot be used ({e})") from None
        need = min(self.max_bytes, sum(self.sizes.values()))
        free = shutil.disk_usage(self.folder).free + self._held()
        if free < need:
            raise ValueError(
                f"--shard-cache {self.folder}: its filesystem has {human(free)} free (cached "
                f"copies included) and the cache may take {human(need)}; free space, or pass a "
                "smaller --shard-cache-gb or another --shard-cache folder"
            )

    def table(self, i: int) -> pa.Table:
        """Shard i's table, memory-mapped from its local copy (fetched first when needed)."""
        for _ in range(3):
            path = self.path(i)
            try:
                return read_shard(path)
            except FileNotFoundError:  # removed by another process since `path` returned
                continue
        return read_shard(self.path(i))

    def path(self, i: int) -> str:
        """The local copy of shard i, fetched and checked when it is not in the cache."""
        rel, sha, size = self.entries[i]
        local = os.path.join(self.folder, f"{sha}.arrow")
        try:
            if os.path.getsize(local) == size:
                os.utime(local)  # most recently read: the last to be removed
                self.hits += 1
                return local
        except FileNotFoundError:
            pass
        part = os.path.join(self.folder, f".{sha}.{os.getpid()}.{uuid.uuid4().hex}.part")
        with self._locked():
            self._make_room(size)
            open(part, "wb").close()  # counted by every process from here on
        try:
            try:
                digest = storage.fetch(storage.join(self.url, rel), part)
            except OSError as e:
                if e.errno is not None:  # the local disk's (full, read-only), not the store's
                    raise ValueError(
                        f"--shard-cache {self.folder}: cannot write a copy ({e.strerror}); free "
                        "space or pass another folder, then continue with --resume"
                    ) from None
                raise ValueError(
                    f"{e}; when the object store answers again, continue with --resume"
                ) from None
            got = os.path.getsize(part)
            if digest != sha or got != size:
                raise ValueError(
                    f"{self.url}/{rel}: {human(got)} with sha256 {digest[:12]}..., the manifest "
                    f"lists {human(size)} with {sha[:12]}...; the shard changed after the build: "
                    f"run `bert-schemas validate {self.url}` and rebuild the set"
                )
            os.replace(part, local)
        finally:
            if os.path.exists(part):
                os.unlink(part)
        self.fetched += 1
        return local

    # --------------------------------------------------------------------- the folder

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(os.path.join(self.folder, LOCK), "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _files(self) -> tuple[list[tuple[float, str, int]], int]:
        """(mtime, path, bytes) of the finished copies, oldest first; and the bytes of the copies
        still arriving (each at its full size when it is a shard of this set)."""
        copies, arriving = [], 0
        for name in os.listdir(self.folder):
            path = os.path.join(self.folder, name)
            try:
                if _COPY.fullmatch(name):
                    st = os.stat(path)
                    copies.append((st.st_mtime, path, st.st_size))
                elif m := _PART.fullmatch(name):
                    arriving += self.sizes.get(m.group(1)) or os.path.getsize(path)
            except FileNotFoundError:  # removed by another process meanwhile
                continue
        return sorted(copies), arriving

    def _held(self) -> int:
        copies, arriving = self._files()
        return sum(n for _, _, n in copies) + arriving

    def _make_room(self, size: int) -> None:
        """Remove the least recently read copies until `size` more bytes fit (under the lock)."""
        copies, arriving = self._files()
        total = sum(n for _, _, n in copies) + arriving
        while copies and total + size > self.max_bytes:
            _, path, n = copies.pop(0)
            try:
                os.unlink(path)
                self.evicted += 1
            except FileNotFoundError:
                pass
            total -= n

    def _remove_dead_parts(self) -> None:
        """Copies left half-written by a process that has ended (under the lock)."""
        for name in os.listdir(self.folder):
            m = _PART.fullmatch(name)
            if m and not _alive(int(m.group(2))):
                try:
                    os.unlink(os.path.join(self.folder, name))
                except FileNotFoundError:
                    pass

    def __repr__(self) -> str:
        return (
            f"ShardCache({self.url} in {self.folder}, {human(self.max_bytes)}: "
            f"{self.fetched} fetched, {self.hits} hits, {self.evicted} removed)"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
