"""The files of a shard set where they are: a local path, or a `gs://bucket/prefix` URL.

A small interface over two back ends: local paths go straight to the operating system (and so
behave exactly as they did before object stores were read), `gs://` URLs to Google's own
client, `google-cloud-storage` (the `gcs` extra), imported on the first `gs://` call only, so a
local set still needs nothing beyond the standard library.

    is_remote(path)             whether the path names an object store
    other_store(path)           the scheme of a URL this interface does not serve (`s3`), else None
    nearest_existing(path)      a local path, or its nearest folder above that exists
    unwritable(folder)          why a local folder refuses writes, and what to do
    join(base, *parts)          a path below a folder, for both kinds
    exists(path), isdir(path)   a file (object) / a folder (any object below `path/`)
    size(path)                  bytes of one file
    list_files(folder)          {name relative to folder: bytes}, every file below it
    open_file(path, mode)       a file object ("rb", "r", "wb", "w")
    read_bytes(path), read_text(path)
    fetch(path, local)          copy to a local file, returning the bytes' sha256
    sha256_of(fd)               the sha256 and size of an open local file's bytes
    upload(local, path)         copy a local file there (an object appears whole, on completion)
    remove(path)                delete one file (an object); nothing when there is none
    check_reachable(endpoint)   the store's API takes a connection, else `Unreachable`
    reach(path)                 the client for a path's store made (and so its store reached)

One storage client serves a process (made again after a fork). It honours
`STORAGE_EMULATOR_HOST` and takes the application default credentials
(`GOOGLE_APPLICATION_CREDENTIALS`, `gcloud auth application-default login`, or the metadata
server); with none it reads anonymously, as a public bucket allows. Failures are one-line
`OSError`s naming the URL (`store_errors`): `FileNotFoundError` for a missing object or
bucket, `StoreAccessError` (a `PermissionError`) when access is refused, `StoreError` for any
other answer or a lost connection once the client's retries are spent. Every request is
retried on the answers GCS gives when it sheds load (408, 429, 5xx) and on lost connections,
uploads and copies too (`retry_always`). Before a process's first request its client is made
only once the store's API takes a TCP connection (`check_reachable`): with no network, or an
emulator address where nothing listens, that is said within seconds, where the client's own
retries would wait two minutes; a store that answered once keeps the client's retries.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import socket
import time
from typing import IO

from schemas.storage_errors import (
    Unreachable,
    first_line,
    require_client_library,
    retry_always,
    store_errors,
)

SCHEME = "gs://"
CHUNK = 8 * 1024 * 1024  # bytes per read while copying a file
READ_WRITE = "https://www.googleapis.com/auth/devstorage.read_write"
_CLIENT: dict[tuple[int, str], object] = {}  # (pid, emulator host) -> client
CONNECT_TRIES = 3  # first contact: connections tried before the store counts as unreachable
CONNECT_TIMEOUT = 3.0  # seconds each try may take
CONNECT_PAUSE = 1.0  # seconds between tries


def is_remote(path: str) -> bool:
    return path.startswith(SCHEME)


def other_store(path: str) -> str | None:
    """The scheme of a URL of any store but gs:// (`s3` for `s3://b/x`), which nothing here
    reads or writes (the local filesystem would take it for a folder `s3:`); None for a local
    path or a gs:// URL. A `FORMAT:` prefix before the URL (`books:s3://b`) is no part of it."""
    head, sep, _ = path.partition("://")
    scheme = head.rpartition(":")[2]
    if not sep or is_remote(path[len(head) - len(scheme) :]):
        return None
    return scheme or None


def nearest_existing(path: str) -> str:
    """A local path made absolute, or its nearest folder above that exists: where a write
    that creates `path` would be decided."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return probe


def unwritable(folder: str) -> tuple[str, str]:
    """Why a local folder that this process may not write in refuses it, and what to do: on a
    filesystem mounted read-only, rights are not the cause (root is refused there too)."""
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return "is on a read-only filesystem", "remount it writable"
    return "is not writable", "fix its rights"


def join(base: str, *parts: str) -> str:
    if not is_remote(base):
        return os.path.join(base, *parts)
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def exists(path: str) -> bool:
    """Whether `path` is a file (an object)."""
    if not is_remote(path):
        return os.path.isfile(path)
    return _blob_meta(path) is not None


def isdir(path: str) -> bool:
    """A local folder, or any object below `gs://bucket/prefix/` (object stores have no folders)."""
    if not is_remote(path):
        return os.path.isdir(path)
    bucket, prefix = _split(path)
    with store_errors(path):
        found = _client().list_blobs(bucket, prefix=_folder(prefix), max_results=1)
        return any(True for _ in found)


def size(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(path)
    blob = _blob_meta(path)
    if blob is None:
        raise FileNotFoundError(f"{path}: no such object")
    return int(blob.size)


def list_files(folder: str) -> dict[str, int]:
    """Every file below `folder`, by its path relative to it ("a.arrow", "sub/b.arrow"), with
    its size; {} when there is no such folder. One listing request per 1,000 objects."""
    if not is_remote(folder):
        found: dict[str, int] = {}
        for root, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(root, name)
                if os.path.isfile(path):
                    rel = os.path.relpath(path, folder).replace(os.sep, "/")
                    found[rel] = os.path.getsize(path)
        return found
    bucket, prefix = _split(folder)
    prefix = _folder(prefix)
    with store_errors(folder):
        blobs = list(_client().list_blobs(bucket, prefix=prefix))
    return {b.name[len(prefix) :]: int(b.size) for b in blobs if not b.name.endswith("/")}


def open_file(path: str, mode: str = "rb") -> IO:
    """A file object; on an object store "rb"/"r" read in ranges (seekable), "wb"/"w" upload on
    close."""
    if mode not in ("rb", "r", "wb", "w"):
        raise ValueError(f"{path}: mode {mode!r}; storage.open_file takes rb, r, wb or w")
    if not is_remote(path):
        return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    blob = _blob(path)
    with store_errors(path):
        if mode == "wb":
            return blob.open(mode, chunk_size=CHUNK, ignore_flush=True)
        if mode == "rb":
            return blob.open(mode, chunk_size=CHUNK)
        return blob.open(mode, encoding="utf-8", chunk_size=CHUNK)


def read_bytes(path: str) -> bytes:
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    blob = _blob(path)
    with store_errors(path):
        return blob.download_as_bytes()


def read_text(path: str) -> str:
    """UTF-8 text (UnicodeDecodeError when it is not); local files read as `open` reads them."""
    if not is_remote(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    # decoded as `open` decodes (universal newlines), so both kinds read the same text
    return io.TextIOWrapper(io.BytesIO(read_bytes(path)), encoding="utf-8").read()


# the piece of a file `sha256_of` reads at a time, into one buffer
HASH_BUFFER = 1 << 20


def sha256_of(fd: int) -> tuple[str, int]:
    """The sha256 and size of an open local file's bytes, read from its start in pieces of
    `HASH_BUFFER` bytes into one buffer. Not through a memory map: on shards whose pages came
    back from disk, as the build's do (it drops what it writes from the page cache), hashing a
    map took more CPU than this (docs/benchmarks.md, "the validator's sha256")."""
    digest, size = hashlib.sha256(), 0
    buffer = bytearray(HASH_BUFFER)
    view = memoryview(buffer)
    while n := os.preadv(fd, [buffer], size):
        digest.update(view[:n])
        size += n
    return digest.hexdigest(), size


def fetch(path: str, local: str) -> str:
    """Copy `path` to the local file `local` (created or replaced), streaming; returns the
    sha256 of the bytes written. An object is read in one request."""
    digest = hashlib.sha256()
    try:
        with open(local, "wb") as out:
            sink = _Hashing(out, digest)
            if is_remote(path):
                blob = _blob(path)
                with store_errors(path):
                    blob.download_to_file(sink)
            else:
                with open(path, "rb") as f:
                    shutil.copyfileobj(f, sink, CHUNK)
    except OSError as e:  # a full disk: a file object's write error names no file
        if e.filename is None and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(e.errno, e.strerror, local) from None
        raise
    return digest.hexdigest()


def upload(local: str, path: str) -> None:
    """Copy the local file `local` to `path` (created or replaced). An object is uploaded in one
    request below 8 MiB, resumably above, checksummed (CRC-32C) either way; it appears under
    its name only once whole, so a reader never sees part of it."""
    if not is_remote(path):
        shutil.copyfile(local, path)
        return
    blob = _blob(path)
    blob.chunk_size = CHUNK
    with store_errors(path):
        blob.upload_from_filename(local, retry=retry_always())


def remove(path: str) -> None:
    """Delete the file (object) `path`; nothing when there is none (a folder is not removed)."""
    if not is_remote(path):
        if os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)
        return
    blob = _blob(path)  # makes the client, or says which library is missing
    from google.api_core.exceptions import NotFound

    with store_errors(path):
        try:
            blob.delete()
        except NotFound:
            pass


class _Hashing:
    """A write-only file that hashes what passes through it."""

    def __init__(self, out: IO[bytes], digest) -> None:
        self.out, self.digest = out, digest

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.out.write(data)

    def tell(self) -> int:  # the client asks where a resumed download stands
        return self.out.tell()

    def flush(self) -> None:
        self.out.flush()


# ----------------------------------------------------------------------------- gs://


def _split(url: str) -> tuple[str, str]:
    """gs://bucket/a/b -> ("bucket", "a/b"), refusing a URL without a bucket."""
    rest = url[len(SCHEME) :]
    bucket, _, name = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url}: no bucket; write gs://BUCKET/PATH")
    return bucket, name.rstrip("/")


def _folder(prefix: str) -> str:
    return prefix.rstrip("/") + "/" if prefix.strip("/") else ""


STORE_HINT = "check the network, or STORAGE_EMULATOR_HOST when it is set"


def check_reachable(endpoint: str, hint: str = STORE_HINT) -> None:
    """Raises `Unreachable` unless the store's API at `endpoint` (a URL, the client's
    `api_endpoint`: https://storage.googleapis.com, or the emulator's address), or the proxy
    that `https_proxy`/`http_proxy` (else `all_proxy`) names for it, `no_proxy` honoured, takes
    a TCP connection within `CONNECT_TRIES` tries. Nothing is sent: it is closed at once. The
    message ends with `hint`, what to do (another service's caller gives its own)."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    def address(url) -> tuple[str, int]:
        return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)

    url = urlsplit(endpoint)
    host, port = address(url)
    proxies = getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if proxy and not proxy_bypass(host):
        host, port = address(urlsplit(proxy if "://" in proxy else f"http://{proxy}"))
    for attempt in range(1, CONNECT_TRIES + 1):
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
            return
        except OSError as e:
            if attempt == CONNECT_TRIES:
                raise Unreachable(
                    f"{host}:{port} took no connection in {CONNECT_TRIES} tries "
                    f"({type(e).__name__}: {first_line(e)}); {hint}"
                ) from None
            time.sleep(CONNECT_PAUSE)


def _client():
    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST", ""))
    if key not in _CLIENT:
        require_client_library()
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        from google.cloud import storage

        try:
            credentials, project = google.auth.default(scopes=[READ_WRITE])
        except DefaultCredentialsError:
            client = storage.Client.create_anonymous_client()
        else:
            client = storage.Client(project=project, credentials=credentials)
        check_reachable(client.api_endpoint)
        _CLIENT.clear()  # one client per process: a forked child makes its own
        _CLIENT[key] = client
    return _CLIENT[key]


def reach(path: str) -> None:
    """For a `gs://` path, the process's client made, which first checks that the store takes
    a connection: the one-line `OSError` naming the path when it does not. Nothing locally."""
    if is_remote(path):
        with store_errors(path):
            _client()


def _blob(url: str):
    bucket, name = _split(url)
    if not name:
        raise ValueError(f"{url}: names a bucket, not an object")
    with store_errors(url):  # making the client may find the store unreachable
        client = _client()
    return client.bucket(bucket).blob(name)


def _blob_meta(url: str):
    """The object's metadata (one request), or None when there is no such object."""
    bucket, name = _split(url)
    if not name:
        return None
    with store_errors(url):
        return _client().bucket(bucket).get_blob(name)
