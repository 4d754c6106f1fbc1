"""The build's files on any filesystem: written whole or not at all, read whole or by byte range,
listed and removed by name prefix; and the build's own places inside OUT.

Local files are read and written with the OS's own calls (a large one written through to disk
and dropped from the page cache as it is published: `schemas.manifest.settle`); the commands
refuse other stores' URLs before any work (`pipeline.shell.configs.refuse_other_stores`), and a
path that is neither reaches Beam's filesystems. gs:// goes through one
google-cloud-storage client per process (`pipeline.files.gcs`), imported only when a gs://
path is used: Beam's GCS filesystem makes a client per call (each starting with a bucket
lookup), reads through a 16 MiB buffer whatever was asked, and renames by copy plus delete.
Here:
- an object store has no directories: a folder is a name prefix, listed and removed as one
  (`FileSystems.exists(folder + "/")` is false there);
- an upload becomes visible whole or not at all, so a gs:// file is written once under its own
  name (a local one under a temporary name, then renamed);
- reads ask for exactly the bytes wanted (`read_bytes(path, start, end)`), so a bucket of the
  build reads only its record batches of each units file;
- a missing file is `FileNotFoundError` on every filesystem;
- every gs:// request is retried as the client retries (408, 429, 5xx, a lost connection: for
  up to two minutes), uploads, copies and each delete of a batch among them, and what still
  fails is one line naming the object (`schemas.storage_errors.StoreError`), never a traceback.
"""

from __future__ import annotations

import io
import json
import os
import re
from contextlib import contextmanager

from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from pipeline.files.gcs import (
    DELETE_BATCH,
    RangedReader,
    blob,
    delete_objects,
    gcs_client,
    gcs_errors,
    objects,
    split_gcs,
)
from pipeline.files.localglob import local_match
from schemas.manifest import SHARDS_DIR, settle
from schemas.storage_errors import retry_always

BUILDING_DIR = ".building"  # inside OUT/shards: the unfinished build's files
GLOB_CHARS = "*?["
READ_BUFFER = 8 << 20  # a gs:// input file is read in ranged requests of this size


def building_dir(out: str) -> str:
    return FileSystems.join(out, SHARDS_DIR, BUILDING_DIR)


def is_gcs(path: str) -> bool:
    return path.startswith("gs://")


def is_local(path: str) -> bool:
    return "://" not in path


# -- gs:// listings: the sizes they gave ---------------------------------------------------

_LISTED_SIZES: dict[str, int] = {}  # gs:// path -> size, from this process's listings


def _metadata(bucket: str, obj) -> FileMetadata:
    updated = obj.updated.timestamp() if obj.updated else 0.0
    path = f"gs://{bucket}/{obj.name}"
    _LISTED_SIZES[path] = obj.size or 0
    return FileMetadata(path, obj.size or 0, updated)


# -- reading ----------------------------------------------------------------------------------


def read_bytes(path: str, start: int = 0, end: int | None = None) -> bytes:
    """Bytes [start, end) of a file (to its end when `end` is None), in one request on gs://."""
    if is_gcs(path):
        with gcs_errors(path):
            if end is not None and end <= start:
                return b""
            return blob(path).download_as_bytes(
                start=start or None, end=None if end is None else end - 1
            )
    if not is_local(path) and not FileSystems.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open_read(path) as f:
        f.seek(start)
        return f.read(-1 if end is None else end - start)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def open_read(path: str, buffer_bytes: int = READ_BUFFER, stop: int | None = None):
    """A seekable binary file as stored (no decompression), for reading a file in pieces; on
    gs:// each request asks for at least `buffer_bytes`, but none reaches past `stop` (a span's
    end), and past it the first ask for `TAIL_BYTES` (a reader that finishes a line or a page
    there needs a little), then as much as has been read past it (a long document's owner reads
    on in requests that grow back to `buffer_bytes`)."""
    if is_gcs(path):
        return io.BufferedReader(RangedReader(path, stop), buffer_size=buffer_bytes)
    if is_local(path):
        return open(path, "rb")
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


# -- writing ----------------------------------------------------------------------------------


@contextmanager
def atomic_create(path: str):
    """A file opened for writing that appears at `path` only complete, when the block ends
    without error: an upload on gs:// (visible whole or not at all), elsewhere a temporary
    name renamed (a killed writer leaves `.tmp`); a large local file is first written through to
    disk and dropped from the page cache (`schemas.manifest.settle`)."""
    if is_gcs(path):
        buffer = io.BytesIO()
        yield buffer
        write_bytes(path, buffer.getvalue())
        return
    tmp = path + ".tmp"
    if is_local(path):
        os.makedirs(os.path.dirname(tmp) or ".", exist_ok=True)
        with open(tmp, "wb") as f:
            yield f
            settle(f)
        os.replace(tmp, path)
        return
    with FileSystems.create(tmp) as f:
        yield f
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


# Every object this package writes on gs:// carries this metadata, in the same request. A gs://
# OUT keeps no lock file after a command, so this is how a later command knows that the
# vocab.txt or punkt.json there is ours, not a user's (`pipeline.shell.outdir`).
WRITTEN_BY = {"written-by": "bert-shards"}


def write_bytes(path: str, data) -> None:
    """`data` as the whole of `path`, replacing it; never seen half written."""
    if is_gcs(path):
        data = data if isinstance(data, bytes) else bytes(data)
        target = blob(path)
        target.metadata = WRITTEN_BY
        with gcs_errors(path):
            target.upload_from_string(
                data, content_type="application/octet-stream", retry=retry_always()
            )
        return
    with atomic_create(path) as f:
        f.write(data)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


# -- names ------------------------------------------------------------------------------------


def exists(path: str) -> bool:
    if is_gcs(path):
        with gcs_errors(path):
            return blob(path).exists()
    return FileSystems.exists(path)


def size(path: str) -> int:
    if is_gcs(path):
        with gcs_errors(path):
            found = blob(path)
            found.reload()
            return found.size
    return FileSystems.get_filesystem(path).size(path)


def listed_size(path: str) -> int:
    """A file's size as its folder's listing in this process gave it (no request), else asked
    for. For what only plans work (packing small files into reads), never for what is read."""
    if path in _LISTED_SIZES:
        return _LISTED_SIZES[path]
    return size(path)


def match(
    pattern: str, walks: dict | None = None, missed: list[str] | None = None
) -> list[FileMetadata]:
    """The files a glob names (`*` within a name, `**` across folders, as Beam's patterns
    mean on every filesystem), sorted by path; none when nothing matches. `walks` and
    `missed` (local globs only): see `localglob.local_match`."""
    if is_local(pattern) and any(c in pattern for c in GLOB_CHARS):
        return local_match(pattern, walks, missed)
    if not is_gcs(pattern):
        try:
            found = [m for r in FileSystems.match([pattern]) for m in r.metadata_list]
        except Exception:  # Beam raises when nothing matches
            return []
        return sorted(found, key=lambda m: m.path)
    cut = min((pattern.find(c) for c in GLOB_CHARS if c in pattern), default=len(pattern))
    regex = re.compile(FileSystem.translate_pattern(pattern))
    bucket, _ = split_gcs(pattern)
    with gcs_errors(pattern):
        found = [_metadata(bucket, o) for o in objects(pattern[:cut])]
    return sorted((m for m in found if regex.match(m.path)), key=lambda m: m.path)


def files_under(
    folder: str, walks: dict | None = None, missed: list[str] | None = None
) -> list[FileMetadata]:
    """Every file below `folder`, at any depth, sorted by path (a name prefix on object
    stores: `folder/`); the file itself when `folder` names a file; none when neither.
    `walks` and `missed` (a local folder only): see `localglob.local_match`."""
    folder = folder.rstrip("/")
    if is_gcs(folder):
        bucket, name = split_gcs(folder)
        with gcs_errors(folder):
            found = [_metadata(bucket, o) for o in objects(folder)]
        exact = [m for m in found if m.path == folder]
        below = [m for m in found if m.path.startswith(folder + "/")] if name else found
        return exact or sorted(below, key=lambda m: m.path)
    if is_local(folder) and not os.path.isdir(folder):
        return match(folder) if os.path.exists(folder) else []
    return match(folder + "/**", walks, missed)


def entries(folder: str) -> tuple[list[str], list[str], set[str]]:
    """(files, folders, the files written by this package: `WRITTEN_BY`) directly in a gs://
    folder, by name: one delimited listing."""
    bucket, name = split_gcs(folder.rstrip("/"))
    prefix = name + "/" if name else ""
    listing = gcs_client().list_blobs(bucket, prefix=prefix, delimiter="/")
    with gcs_errors(folder):
        objects = [o for o in listing if o.name != prefix]
    files = [o.name[len(prefix) :] for o in objects]
    ours = {
        o.name[len(prefix) :] for o in objects if WRITTEN_BY.items() <= (o.metadata or {}).items()
    }
    folders = [p[len(prefix) :].rstrip("/") for p in listing.prefixes]
    return sorted(files), sorted(folders), ours


# -- removing and publishing ------------------------------------------------------------------


def remove(paths: list[str]) -> None:
    """Delete files; one already gone is no error. gs:// deletes go in batch requests."""
    gcs = [p for p in paths if is_gcs(p)]
    for start in range(0, len(gcs), DELETE_BATCH):
        delete_objects(gcs[start : start + DELETE_BATCH])
    others = [p for p in paths if not is_gcs(p) and FileSystems.exists(p)]
    if others:
        FileSystems.delete(others)


def remove_tree(folder: str) -> None:
    """Delete a folder and all below it: every object of its name prefix on object stores."""
    folder = folder.rstrip("/")
    if is_gcs(folder):
        remove([m.path for m in files_under(folder) if m.path != folder])
    elif is_local(folder):
        if os.path.isdir(folder):
            FileSystems.delete([folder])
    else:  # another object store through Beam: its folders are prefixes too
        remove([m.path for m in match(folder + "/**")])


def move(src: str, dst: str) -> None:
    """`src`'s bytes under the name `dst`. Locally a rename; on gs:// a copy inside the store
    (no bytes through this process), its source left for `remove_tree` of its folder, which
    deletes by the hundred: a rename there would be a copy and a delete each."""
    if is_gcs(src) and is_gcs(dst):
        source, target = blob(src), blob(dst)
        with gcs_errors(src):
            source.bucket.copy_blob(source, target.bucket, target.name, retry=retry_always())
        return
    if FileSystems.exists(dst):
        FileSystems.delete([dst])
    FileSystems.rename([src], [dst])


VOCAB_MARKER = "vocab.json"  # in the temporary area, once the vocab is trained


def read_marker(path: str) -> dict:
    """A marker's content; {} when it is not there (yet), on every filesystem."""
    try:
        return json.loads(read_bytes(path).decode("utf-8"))
    except (OSError, ValueError):  # FileNotFoundError among them
        return {}


def write_marker(path: str, content: dict) -> None:
    write_text(path, json.dumps(content))
