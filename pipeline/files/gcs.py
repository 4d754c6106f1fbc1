"""gs:// through one google-cloud-storage client per process (made on first use, again in a
forked child): objects named, read by byte range, listed by prefix and deleted by the hundred,
every request retried as the client retries its own (408, 429, 5xx, a lost connection: for up
to two minutes; uploads, copies and each part of a batch of deletes too), and what still fails
said in one line naming the object (`gcs_errors`). `pipeline.files.fsio` is the build's one
interface over this and the local disk."""

from __future__ import annotations

import io
import os
from contextlib import contextmanager

from pipeline.files.credentials import dask_worker, no_credentials, runner_worker
from schemas.storage import READ_WRITE, check_reachable
from schemas.storage_errors import Unreachable, retry_always, store_errors

TAIL_BYTES = 256 << 10  # a span's reader past the span's end: its first requests' size
DELETE_BATCH = 100  # calls per GCS batch request (the JSON API's limit)

_CLIENT: tuple[int, object] | None = None  # (pid, client): a forked worker makes its own


class NoCredentials(ValueError):
    """gs:// was asked for and Google Cloud's default credentials were not found."""


class StoreUnreachable(OSError):
    """gs:// was asked for and the store's API took no connection (`check_reachable`)."""


def gcs_client():
    """This process's storage client, made on first use (a child forked after that makes its
    own: connections do not survive a fork)."""
    global _CLIENT
    if _CLIENT is None or _CLIENT[0] != os.getpid():
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        from google.cloud import storage

        # The default credentials, also against an emulator (STORAGE_EMULATOR_HOST), where the
        # client given none makes its requests anonymous, as it does when there are none.
        try:
            credentials, project = google.auth.default(scopes=[READ_WRITE])
            client = storage.Client(project=project, credentials=credentials)
        except DefaultCredentialsError as e:
            if not os.environ.get("STORAGE_EMULATOR_HOST"):
                said = str(e).split(". ", 1)[0].rstrip(".")
                raise NoCredentials(no_credentials(said, dask_worker(), runner_worker())) from None
            client = storage.Client()
        # google-cloud-storage 3.x looks each bucket up for its telemetry in a background
        # thread (and again on every 404): a request per bucket, and threads beside which the
        # driver may not fork its workers (`pipeline.runners.local_workers`).
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
        # No network, or an emulator address where nothing listens: said within seconds, where
        # the client's own retries of the first request would wait two minutes.
        try:
            check_reachable(client.api_endpoint)
        except Unreachable as e:
            raise StoreUnreachable(f"gs:// cannot be reached: {e}") from None
        _CLIENT = (os.getpid(), client)
    return _CLIENT[1]


def gcs_problem() -> str | None:
    """None when this process's storage client can be made and its API takes a connection;
    else the one line saying what is missing (credentials, network). None, too, without
    google-cloud-storage: whoever needs it says so."""
    try:
        gcs_client()
    except (NoCredentials, StoreUnreachable) as e:
        return str(e)
    except ImportError:  # no client library
        pass
    return None


def split_gcs(path: str) -> tuple[str, str]:
    bucket, _, name = path[len("gs://") :].partition("/")
    return bucket, name


def blob(path: str):
    bucket, name = split_gcs(path)
    return gcs_client().bucket(bucket).blob(name)


@contextmanager
def gcs_errors(path: str):
    """The client's failures on `path` in one line: `FileNotFoundError` for a missing object,
    else `schemas.storage_errors.store_errors`' `StoreError`s."""
    from google.api_core.exceptions import NotFound

    with store_errors(path):
        try:
            yield
        except NotFound:
            raise FileNotFoundError(f"{path}: no such object") from None


def objects(prefix_path: str):
    """Every object whose name starts with the name part of `prefix_path` (paged), but the
    empty "folder/" placeholders some tools make."""
    bucket, prefix = split_gcs(prefix_path)
    return (o for o in gcs_client().list_blobs(bucket, prefix=prefix) if not o.name.endswith("/"))


class RangedReader(io.RawIOBase):
    """A gs:// object read by ranged requests, each of exactly what its caller asked for (up to
    `stop`, then little at first, see `open_read`); the end is learned from a short read (or
    asked for only when seeking from the end)."""

    def __init__(self, path: str, stop: int | None = None):
        self.path, self.pos, self.size, self.stop = path, 0, None, stop
        self._blob = blob(path)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            offset += self._size()
        elif whence == io.SEEK_CUR:
            offset += self.pos
        self.pos = max(0, offset)
        return self.pos

    def _size(self) -> int:
        if self.size is None:
            with gcs_errors(self.path):
                self._blob.reload()
            self.size = self._blob.size
        return self.size

    def _fetch(self, n: int | None) -> bytes:
        if (self.size is not None and self.pos >= self.size) or n == 0:
            return b""
        if self.stop is not None and n is not None:
            past = self.pos - self.stop  # past the stop, requests grow with the distance
            n = min(n, -past if past < 0 else max(TAIL_BYTES, past))
        end = None if n is None else self.pos + n - 1
        with gcs_errors(self.path):
            data = self._blob.download_as_bytes(start=self.pos, end=end)
        if n is None or len(data) < n:
            self.size = self.pos + len(data)
        self.pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self._fetch(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self._fetch(None)


def delete_objects(paths: list[str]) -> None:
    """One batch request deleting `paths`, sent again, as the client retries its own calls,
    for the deletes GCS answered with a transient failure (each part of a batch has its own
    status: 429 or 503 under load), or for the whole request when it failed so. An object
    already gone is no error; another answer is said in one line naming its object."""
    from google.api_core.exceptions import from_http_response
    from google.cloud.storage.batch import Batch

    class Answered(Batch):  # a batch that keeps its parts' answers
        def finish(self, raise_exception=True):
            self.answers = super().finish(raise_exception)
            return self.answers

    pending = list(paths)

    def send() -> None:
        batch = Answered(gcs_client(), raise_exception=False)
        with batch:
            for p in pending:
                blob(p).delete()
        failed = [
            (p, r)
            for p, r in zip(pending, batch.answers, strict=True)
            if not (200 <= r.status_code < 300 or r.status_code == 404)
        ]
        if failed:  # raised as the client raises its own, so that its retry decides
            pending[:] = [p for p, _ in failed]
            raise from_http_response(failed[0][1])

    try:
        retry_always()(send)()
    except Exception as failure:
        with gcs_errors(pending[0]):  # named by the first object still not deleted
            raise failure from None
