"""The output directory before a build: what may be replaced, and one build at a time.

A build replaces only what it would itself write: an empty directory, a shard set of this
schema (its manifest says so) or an unfinished build of ours. Anything else is refused before
any work starts, naming what is there, unless the user passes `--overwrite`, on a local disk
and on gs:// alike. The vocab, tokenizer and Punkt files count as ours only in an OUT that
shows it is ours (`marked_ours`): a folder of someone's tokenizer (`save_pretrained` writes the
same four names) is not replaced silently, by `build`, `vocab` or `punkt`.

A build holds an exclusive lock on OUT for its whole run; a second build
into the same OUT is refused at once, naming the first. Locally the lock is `flock`, so a killed
build never leaves it held. On gs:// it is an object created only if absent (GCS's atomic
`ifGenerationMatch=0`) and deleted at the end; one left by a killed build on this machine (its
process is gone) is taken over, one from another machine is named with what to do.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import time

from pipeline.files import fsio
from pipeline.files.fsio import BUILDING_DIR
from schemas import file_lock, storage
from schemas.manifest import LOCK_NAME, MANIFEST_NAME, OUT_FILES, SHARD_NAME_PATTERN, SHARDS_DIR
from schemas.shard import SCHEMA_NAME
from schemas.storage_errors import StoreError, store_errors

# Ours only beside a mark of ours: a Hugging Face tokenizer folder holds the first four names.
COMMAND_FILES = OUT_FILES - {MANIFEST_NAME, LOCK_NAME}


class OutputError(ValueError):
    """OUT cannot or may not be built into; the message says what is there and what to do."""


def is_local(path: str) -> bool:
    return "://" not in path


def foreign_entries(out: str) -> list[str]:
    """What in `out` this build did not write and may not replace (relative paths)."""
    if fsio.is_gcs(out):
        return foreign_objects(out)
    foreign = []
    names = sorted(os.listdir(out))
    shards = os.path.join(out, SHARDS_DIR)
    shard_names = (
        sorted(os.listdir(shards)) if os.path.isdir(shards) and not os.path.islink(shards) else []
    )
    ours = OUT_FILES if marked_ours(out, names, shard_names) else OUT_FILES - COMMAND_FILES
    for name in names:
        path = os.path.join(out, name)
        if name == SHARDS_DIR and os.path.isdir(path) and not os.path.islink(path):
            foreign += [
                f"{SHARDS_DIR}/{n}"
                for n in shard_names
                if not (SHARD_NAME_PATTERN.fullmatch(n) or n == BUILDING_DIR)
            ]
        elif name not in ours or os.path.isdir(path) or os.path.islink(path):
            foreign.append(name)
    manifest = os.path.join(out, MANIFEST_NAME)
    if os.path.isfile(manifest) and not _our_manifest(manifest):
        foreign.insert(0, f"{MANIFEST_NAME} (not a {SCHEMA_NAME} manifest)")
    return foreign


def gcs_entries(out: str, folder: str = "") -> tuple[list[str], list[str], set[str]]:
    """`fsio.entries` of a gs:// OUT (or of `folder` in it): files, folders and the files our
    commands wrote; a bucket that does not exist said in one line."""
    try:
        return fsio.entries(f"{out}/{folder}" if folder else out)
    except FileNotFoundError:  # a listing finds no object missing: its bucket is
        bucket = fsio.split_gcs(out)[0]
        raise OutputError(
            f"--out {out}: there is no bucket {bucket}; create it (gcloud storage buckets create "
            f"gs://{bucket}) or choose another OUT"
        ) from None


def foreign_objects(out: str) -> list[str]:
    """`foreign_entries` of a gs:// OUT: its folders are name prefixes (two listings)."""
    files, folders, written = gcs_entries(out)
    shard_files, shard_folders = (
        gcs_entries(out, SHARDS_DIR)[:2] if SHARDS_DIR in folders else ([], [])
    )
    ours = (
        OUT_FILES
        if marked_ours(out, files, shard_files + shard_folders)
        else (OUT_FILES - COMMAND_FILES) | (COMMAND_FILES & written)
    )
    foreign = [n for n in files if n not in ours]
    for folder in folders:
        if folder != SHARDS_DIR:
            foreign.append(folder + "/")
            continue
        foreign += [f"{SHARDS_DIR}/{n}" for n in shard_files if not SHARD_NAME_PATTERN.fullmatch(n)]
        foreign += [f"{SHARDS_DIR}/{n}/" for n in shard_folders if n != BUILDING_DIR]
    if MANIFEST_NAME in files and not _our_manifest(f"{out}/{MANIFEST_NAME}"):
        foreign.insert(0, f"{MANIFEST_NAME} (not a {SCHEMA_NAME} manifest)")
    return sorted(foreign[:1]) + sorted(foreign[1:]) if foreign else []


def marked_ours(out: str, names: list[str], shard_names: list[str]) -> bool:
    """Whether OUT shows that one of this package's commands wrote into it: its lock file
    (local commands leave it; on gs:// it is there while one runs), a manifest of this schema,
    or a shards folder holding our shard names or an unfinished build's area. `names`: OUT's
    entries; `shard_names`: those of OUT/shards."""
    if LOCK_NAME in names or BUILDING_DIR in shard_names:
        return True
    if any(SHARD_NAME_PATTERN.fullmatch(n) for n in shard_names):
        return True
    return MANIFEST_NAME in names and _our_manifest(f"{out.rstrip('/')}/{MANIFEST_NAME}")


def _our_manifest(path: str) -> bool:
    try:
        if fsio.is_gcs(path):
            data = json.loads(fsio.read_bytes(path))
        else:
            with open(path, "rb") as f:
                data = json.loads(f.read(64 * 1024 * 1024))
    except StoreError:  # not read, so not known to be another's: the store's line says why
        raise
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("schema_name") == SCHEMA_NAME


def check_output(out: str, overwrite: bool) -> None:
    """Refuse, before any work, an OUT that is not a directory, not writable, or holds files
    this build did not write (unless `overwrite`). Nothing is created here: a refusal after
    this one (no disk space, a resume that does not match) leaves no OUT behind."""
    if fsio.is_gcs(out):
        foreign = foreign_entries(out)  # listed with --overwrite too: it says a missing bucket
        refuse_foreign(out, [] if overwrite else foreign)
        return
    if not is_local(out):
        return
    check_writable(out)
    if os.path.isdir(out):
        refuse_foreign(out, [] if overwrite else foreign_entries(out))


def check_writable(out: str) -> None:
    """A local OUT is a directory this process may write in, or can be made as one: its
    nearest existing folder above is a writable directory."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputError(f"--out {out}: exists and is not a directory; choose another OUT")
    probe = storage.nearest_existing(out)
    if not os.path.isdir(probe):
        raise OutputError(f"--out {out}: cannot be created ({probe} is a file); choose another OUT")
    if not os.access(probe, os.W_OK | os.X_OK):
        why, remedy = storage.unwritable(probe)
        what = why if probe == os.path.abspath(out) else f"cannot be created ({probe} {why})"
        raise OutputError(f"--out {out}: {what}; choose another OUT or {remedy}")


def check_side_output(out: str, writes: tuple[str, ...], overwrite: bool) -> None:
    """`vocab` and `punkt` write one or two files into OUT (`writes`: vocab.txt and
    tokenizer.json, or punkt.json): refused before any work when OUT cannot be written, holds a
    shard set, whose vocab a new one would silently replace (validate would then fail the set),
    or holds a file of those names that no command of ours wrote (unless `overwrite`)."""
    if is_local(out):
        check_writable(out)
    if fsio.is_gcs(out):
        names, folders, written = gcs_entries(out)  # first: it says a missing bucket
    manifest = f"{out.rstrip('/')}/{MANIFEST_NAME}"
    if fsio.exists(manifest) and _our_manifest(manifest):
        mine = "vocab.txt" in writes  # else punkt.json, which no set holds
        said = "whose vocab.txt and tokenizer.json belong to it" if mine else "a build's output"
        raise OutputError(f"--out {out}: holds a shard set, {said}; choose another OUT")
    if overwrite or (is_local(out) and not os.path.isdir(out)):
        return
    if fsio.is_gcs(out):
        shard_names = sum(gcs_entries(out, SHARDS_DIR)[:2], []) if SHARDS_DIR in folders else []
        names = [n for n in names if n not in written]  # written by one of our commands
    elif is_local(out):
        names = os.listdir(out)
        shards = os.path.join(out, SHARDS_DIR)
        shard_names = os.listdir(shards) if os.path.isdir(shards) else []
    else:
        return
    theirs = [n for n in writes if n in names]
    if theirs and not marked_ours(out, names, shard_names):
        raise OutputError(
            f"--out {out}: holds {' and '.join(theirs)}, which no bert-shards command wrote "
            "there; choose another OUT, or pass --overwrite (make: ARGS=--overwrite) to "
            "replace them"
        )


def refuse_foreign(out: str, foreign: list[str]) -> None:
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise OutputError(
            f"--out {out}: holds files this build did not write ({shown}); choose an empty "
            "directory, or pass --overwrite (make: ARGS=--overwrite) to replace them"
        )


_HELD: set[int] = set()  # descriptors of the locks this process holds


def _forget_locks_in_child() -> None:
    """A forked child (a local worker) closes its copies of the lock descriptors: an flock
    lasts while any copy is open, and OUT must be free as soon as the build's process ends."""
    for fd in _HELD:
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def lock_holder() -> str:
    return f"build pid {os.getpid()} on {platform.node()}"


class OutputLock:
    """An exclusive lock on OUT for the whole build: local (`flock`) or gs:// (`GcsLock`);
    none on other remote filesystems."""

    def __init__(self, out: str):
        self.out = out
        self.fd: int | None = None
        self.gcs: GcsLock | None = None

    def __enter__(self) -> OutputLock:
        if fsio.is_gcs(self.out):
            self.gcs = GcsLock(self.out).acquire()
            return self
        if not is_local(self.out):
            return self
        try:
            os.makedirs(self.out, exist_ok=True)  # checked writable before (`check_writable`)
        except OSError as e:
            raise OutputError(
                f"--out {self.out}: cannot be created ({e.strerror}); choose another OUT"
            ) from None
        try:
            fd = file_lock.take(os.path.join(self.out, LOCK_NAME), lock_holder())
        except file_lock.Held as held:
            raise OutputError(
                f"--out {self.out}: {held.holder or 'another build'} is building into it now; "
                "wait for it to finish or choose another OUT"
            ) from None
        self.fd = fd
        _HELD.add(fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.gcs is not None:
            self.gcs.release()
            self.gcs = None
        if self.fd is not None:
            _HELD.discard(self.fd)
            os.close(self.fd)  # releases the flock; the empty file stays (it is ours)
            self.fd = None


HOLDER = re.compile(r"build pid (\d+) on (\S+)")


class GcsLock:
    """`OUT/.bert-shards.lock` on gs://, created only if absent (`if_generation_match=0`, atomic
    in GCS) and deleted, by its generation, when the build ends."""

    def __init__(self, out: str):
        self.out = out
        self.path = f"{out.rstrip('/')}/{LOCK_NAME}"
        self.generation: int | None = None

    def acquire(self) -> GcsLock:
        with store_errors(self.path):
            return self._acquire()

    def _acquire(self) -> GcsLock:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ours = f"{lock_holder()} since {since}"
        for attempt in range(3):
            lock = fsio.blob(self.path)
            try:
                lock.upload_from_string(ours, if_generation_match=0)
                self.generation = lock.generation
                return self
            except PreconditionFailed:
                pass
            held = fsio.blob(self.path)
            try:
                holder = held.download_as_bytes().decode("utf-8", "replace").strip()
            except NotFound:
                continue  # released meanwhile: try again
            if holder == ours:  # made by the try whose answer was lost, which the client retried
                self.generation = held.generation
                return self
            if attempt < 2 and stale(holder):
                try:  # only the generation read: a build that took it meanwhile keeps it
                    held.delete(if_generation_match=held.generation)
                except (NotFound, PreconditionFailed):
                    pass
                continue
            raise OutputError(
                f"--out {self.out}: {holder or 'another build'} is building into it now; wait "
                "for it to finish or choose another OUT (if that build no longer runs, it was "
                f"killed on another machine: remove {self.path} and build again)"
            )
        raise OutputError(f"--out {self.out}: its lock {self.path} keeps changing; try again")

    def release(self) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with store_errors(self.path):
            try:
                fsio.blob(self.path).delete(if_generation_match=self.generation)
            except (NotFound, PreconditionFailed):
                pass


def stale(holder: str) -> bool:
    """A lock left by a build of this machine whose process is gone (killed)."""
    found = HOLDER.match(holder)
    if not found or found.group(2) != platform.node():
        return False
    try:
        os.kill(int(found.group(1)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


# Disk a local build needs, per byte of input text, at its peak: the chunk files of documents,
# sentences and tokenized passes beside the finished shards, set just above the peak measured on
# prose in the reference format at seq 128, dupe 5 (docs/benchmarks.md, "Scale on one machine").
# Compressed input counts as COMPRESSED_TEXT times its stored size; so does Parquet, whose pages
# are compressed (snappy by default) and hold columns beside the text.
DISK_PER_TEXT_BYTE = 8.5
COMPRESSED_TEXT = 4
COMPRESSED_SUFFIXES = (
    *(".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4", ".parquet"),
    *(".tgz", ".tbz2", ".tbz", ".txz", ".tzst", ".zip"),  # archives, compressed
)


def text_bytes(files: list[tuple[str, int]]) -> int:
    """(path, stored size) -> an estimate of the text they hold."""
    return sum(
        size * (COMPRESSED_TEXT if path.endswith(COMPRESSED_SUFFIXES) else 1)
        for path, size in files
    )


def check_free_space(out: str, needed: int) -> None:
    """Refuse a local build whose filesystem lacks the space it will need at its peak."""
    if not is_local(out):
        return  # object stores do not say; the runner's own limits apply
    probe = storage.nearest_existing(out)
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise OutputError(
            f"{out}: the build needs about {disk_figure(needed)} of free disk at its peak "
            f"({DISK_PER_TEXT_BYTE}x the input text, the shards included) and its filesystem "
            f"has {disk_figure(free)}; free space, choose another OUT, or pass "
            "--no-disk-check (make: ARGS=--no-disk-check) to try anyway"
        )


def disk_figure(size: float) -> str:
    """Bytes in the unit that fits: 30.0 MB, not 0.0 GB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{int(size)} bytes"


def within(path: str, folder: str) -> bool:
    """`path` is `folder` or lies under it (local paths compared as resolved, links followed)."""
    if "://" not in path and "://" not in folder:
        path, folder = os.path.realpath(path), os.path.realpath(folder or ".")
    path, folder = path.rstrip("/"), folder.rstrip("/")
    return path == folder or path.startswith(folder + "/")
