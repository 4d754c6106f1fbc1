"""What a command says when its storage or a worker fails under it, in one line with how to go
on: a disk that filled or turned read-only (naming the filesystem), an object store that
refused or kept failing (`schemas.storage_errors.StoreError`), a worker process killed
(`WorkerLost`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil

from pipeline.runners.failures import LOST
from pipeline.shell.outdir import disk_figure, is_local, within
from schemas import storage
from schemas.storage_errors import LATER, StoreError

NO_SPACE = "No space left on device"
READ_ONLY = "Read-only file system"
# How a command stopped by its disk goes on once that is mended: a build from what it finished,
# vocab and punkt (which keep no resume record) from the start.
RESUME = "run the same command with --resume to continue from what is finished"
AGAIN = "run the same command again"


@contextlib.contextmanager
def out_trouble_said(out: str, what: str = "the build", then: str = RESUME):
    """A command (`what`) whose disk filled or turned read-only says so in one line naming the
    filesystem, and how to go on once that is mended (`then`): a build's `--resume` finds what
    was finished in OUT/shards/.building. So does one whose object store failed it, or whose
    worker process was killed."""
    try:
        yield
    except SystemExit as e:
        said = e.code if isinstance(e.code, str) else ""
        if NO_SPACE in said:
            raise SystemExit(f"error: {disk_full_line(out, said, what, then)}") from None
        if READ_ONLY in said:
            raise SystemExit(f"error: {read_only_line(out, said, what, then)}") from None
        if STORE in said or said.startswith(f"error: {LOST} "):
            raise SystemExit(then_line(said, then)) from None
        raise


STORE = "the object store"  # in every line of a `schemas.storage_errors.StoreError`


def then_line(said: str, then: str = RESUME) -> str:
    """A line of the object store's refusal or failure (a `StoreError`'s), or of a worker
    process lost (`WorkerLost`), with how the command goes on once that is mended (`then`)."""
    if said.endswith(f"; {LATER}"):
        return f"{said[: -len(LATER)]}later, {then}"
    return f"{said}; then {then}"


@contextlib.contextmanager
def store_trouble_said(args):
    """The object store's refusal or failure met outside the graph's steps (OUT's lock, its
    listing, the last files), in one line: a build that had begun goes on with --resume."""
    try:
        yield
    except StoreError as e:
        resumable = args.command == "build" and getattr(args, "resumable", False)
        raise SystemExit(f"error: {then_line(str(e), RESUME if resumable else AGAIN)}") from None


def troubled(out: str, said: str, error: str) -> tuple[str, str]:
    """The path an OS error names (else OUT), and the line's words for it: `--out OUT` when it
    lies in OUT, else the path itself (the temporary folder, say)."""
    found = re.search(rf"{error}: '([^']+)'", said)
    path = found.group(1) if found else out
    return path, f"--out {out}" if within(path, out) else path


def mount_of(path: str) -> str:
    mount = storage.nearest_existing(path)
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    return mount


def disk_full_line(out: str, said: str = "", what: str = "the build", then: str = RESUME) -> str:
    path, holds = troubled(out, said, NO_SPACE)
    if not is_local(path):
        return (
            f"{what} ran out of space writing to {out} ({NO_SPACE}); free space there, then {then}"
        )
    free = shutil.disk_usage(storage.nearest_existing(path)).free
    return (
        f"{what} ran out of disk: the filesystem at {mount_of(path)}, which holds {holds}, "
        f"has {disk_figure(free)} free ({NO_SPACE}); free space, then {then}"
    )


def read_only_line(out: str, said: str, what: str = "the build", then: str = RESUME) -> str:
    """The filesystem that turned read-only during the command (it checked it was writable
    before it began). One the kernel remounted read-only after an error needs checking before
    use."""
    path, holds = troubled(out, said, READ_ONLY)
    return (
        f"{what} could not write: the filesystem at {mount_of(path)}, which holds {holds}, "
        f"is read-only ({READ_ONLY}); make it writable again (check it first if the system "
        f"turned it read-only after an error), then {then}"
    )
