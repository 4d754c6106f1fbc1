"""Archives read as folders: a tar file (`.tar`, or compressed: `.tar.gz`/`.tgz`,
`.tar.bz2`/`.tbz2`, `.tar.xz`/`.txz`, `.tar.zst`/`.tzst`) or a zip file is read member by
member, without unpacking it to disk, each regular file as a file of the input's format would be
read (`books1.tar.gz` holding `books1/epubtxt/*.txt`, a book each). A member is named below
the archive (`books1.tar.gz/books1/epubtxt/a.txt`), which is what its document's id is made
from; a compressed member (`.gz`, ...) is decompressed by its name as a file is.

Left out, as a folder's listing leaves them out: members with a part of the name that begins
with `.` (`.DS_Store`, `._a.txt`, `.git/`), macOS's `__MACOSX/` copies in a zip, and what is
not a regular file (folders, links, devices); all but folders are counted. A tar is read as a
stream, one member after another, so a `.tar.gz` is decompressed once; a zip is read by seeking,
its members in the order of its directory. Parquet and Arrow's file format are read by seeking,
which a tar's stream cannot do: an archive of them is refused (`refuse_seeking_format`)."""

from __future__ import annotations

import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import BinaryIO

from pipeline.sources.compressed import decompressed
from pipeline.sources.documents import REFETCH_OR_SKIP, BadInputError, Tally, hidden_name

TAR_SUFFIXES = (".tar",)
COMPRESSED_TAR_SUFFIXES = (
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tar.zst",
    ".tar.zstd",
    ".tzst",
)
ZIP_SUFFIXES = (".zip",)
SEEKING_FORMATS = ("parquet", "arrow")  # read by seeking: not from a tar's stream
MACOS_FORKS = "__MACOSX"  # a zip made by macOS's Finder keeps resource forks under it


def archive_kind(path: str) -> str | None:
    """'tar' or 'zip' for an archive by its name's suffix, else None; as compressed files are
    known (`compression_of`), the suffix is matched as written (`A.TGZ` is no archive here)."""
    if path.endswith(TAR_SUFFIXES + COMPRESSED_TAR_SUFFIXES):
        return "tar"
    if path.endswith(ZIP_SUFFIXES):
        return "zip"
    return None


def refuse_seeking_format(fmt: str, rel: str) -> None:
    """Raises `BadInputError` for an archive given as a format its members cannot be read in."""
    if fmt in SEEKING_FORMATS:
        raise BadInputError(
            f"{rel}: an archive of {fmt} files is not read: {fmt} files are read by seeking, "
            "which a member of an archive cannot do here. Extract the archive and give its "
            "folder as the input"
        )


def member_name(name: str) -> str | None:
    """A member's name as it is read below the archive (`./a/b.txt` -> `a/b.txt`), or None
    for one left out: a part beginning with `.`, or macOS's `__MACOSX/` copies."""
    parts = PurePosixPath(name).parts
    if not parts or parts[0] == "/":
        parts = parts[1:]
    read_as = "/".join(parts)
    if not parts or hidden_name(read_as) or parts[0] == MACOS_FORKS:
        return None
    return read_as


# what a damaged archive raises as it is read
DAMAGE = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError)


class Unreadable(Exception):
    """A zip's member (`name`, the reason) that Python's zipfile cannot open: encrypted, or
    compressed by a method it lacks (zstd before Python 3.14, PPMd, ...)."""


def archive_error(e: Exception, where: str, kind: str, rel: str) -> BadInputError:
    """The one line for a damaged archive (`where`: the member being read, or the archive), or
    for a member of the archive at `rel` that cannot be opened."""
    if isinstance(e, Unreadable):
        name, reason = e.args
        return BadInputError(
            f"{rel}/{name}: cannot be read from the zip ({reason}); extract the archive with "
            "a tool that can (7z, unzip with the password), and give its folder as the input, "
            "or pass --skip-bad-input to skip and count it"
        )
    return BadInputError(
        f"{where}: a damaged {kind} archive ({type(e).__name__}: {e}). {REFETCH_OR_SKIP}"
    )


def read_archive(raw: BinaryIO, path: str, rel: str, tally: Tally, read) -> Iterator:
    """What `read(file, member's rel)` yields for every regular member to read, in the
    archive's order; a damaged archive raises `BadInputError` naming it, and the member being
    read when the damage was met."""
    kind = archive_kind(path)
    where = rel
    try:
        for name, f in _MEMBERS[kind](raw, path, tally):
            where = f"{rel}/{name}"
            yield from read(decompressed(f, name), where)
    except (*DAMAGE, Unreadable) as e:
        raise archive_error(e, where, kind, rel) from e


def _tar_members(raw: BinaryIO, path: str, tally: Tally):
    """(name, file) of a tar's members to read, the file read or left before the next. The
    members met are not kept (tarfile keeps each one's header for `getmembers`, about 500 bytes
    a member: 10 MB for 20,000), so memory stays flat in the archive's size."""
    with tarfile.open(fileobj=decompressed(raw, path), mode="r|") as tar:
        for member in tar:
            name = _left_out_or_named(member.name, member.isfile(), member.isdir(), tally)
            if name is not None:
                yield name, tar.extractfile(member)
            tar.members.clear()  # a stream's iteration asks for the next header when it is empty


def _zip_members(raw: BinaryIO, path: str, tally: Tally):
    """(name, file) of a zip's members to read, in the order of its directory."""
    with zipfile.ZipFile(raw) as archive:
        for info in archive.infolist():
            link = stat.S_ISLNK(info.external_attr >> 16)  # as Unix's zip stores a link
            name = _left_out_or_named(
                info.filename, not (info.is_dir() or link), info.is_dir(), tally
            )
            if name is None:
                continue
            try:
                f = archive.open(info)
            except RuntimeError as e:  # NotImplementedError too: a method zipfile lacks
                raise Unreadable(name, str(e)) from e
            with f:
                yield name, f


_MEMBERS = {"tar": _tar_members, "zip": _zip_members}


def _left_out_or_named(raw_name: str, is_file: bool, is_dir: bool, tally: Tally) -> str | None:
    """The name to read a member under, or None (counted unless it is a folder)."""
    name = member_name(_printable(raw_name))
    if is_dir:
        return None
    if name is None:
        tally.inc("archive_members_skipped.hidden")
        return None
    if not is_file:
        tally.inc("archive_members_skipped.not_a_file")
        return None
    tally.inc("archive_members_read")
    return name


def _printable(name: str) -> str:
    """A member's name as text: bytes that are not UTF-8 (kept by tarfile as surrogates) are
    written escaped (`caf\\xe9.txt`), so the name can go into an id and a message, and two
    names stay two."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@contextmanager
def first_member(raw: BinaryIO, path: str, rel: str):
    """(rel, file) of the archive's first member to read, decompressed by its name, or
    (rel, None) when it has none; a damaged archive raises `BadInputError`."""
    kind = archive_kind(path)
    members = _MEMBERS[kind](raw, path, Tally())
    try:
        try:
            name, f = next(members, (None, None))
        except (*DAMAGE, Unreadable) as e:
            raise archive_error(e, rel, kind, rel) from e
        yield (rel, None) if name is None else (f"{rel}/{name}", decompressed(f, name))
    finally:
        members.close()
