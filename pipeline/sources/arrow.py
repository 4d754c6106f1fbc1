"""Arrow IPC files: what the `datasets` library keeps (`Dataset.save_to_disk`'s
`data-00000-of-00001.arrow`, and the files of its cache), and what any Arrow writer gives, in the
stream format or the file format. A row is what a Parquet row is (`pipeline.sources.parquet`):
its text in a string column `text` (another name with `--text-field`), an optional `id`, the
same ids, bad rows and counts under the source's name (`arrow_bad_record`, ...).

The file is read a record batch at a time (the stream format in order, the file format by
seeking to each), so memory follows the batch, not the file. A file of the stream format may be
compressed as a whole (`.arrow.gz`); one of the file format must be seekable, so not.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import BadInputError, Document, Tally
from pipeline.sources.parquet import columns_read, first_bytes, rows_documents, slice_rows
from pipeline.sources.streams import PrefixedReader

FILE_MAGIC = b"ARROW1"  # the file format's first (and last) six bytes
STREAM_START = b"\xff\xff\xff\xff"  # the stream format's first message: a continuation marker
HEAD = len(FILE_MAGIC)


def is_arrow(head: bytes) -> bool:
    """Whether a file's first bytes start Arrow's file or stream format."""
    return head.startswith((FILE_MAGIC, STREAM_START))


def read_arrow(
    f: BinaryIO,
    rel: str,
    tally: Tally,
    source: str = "arrow",
    text_field: str = "text",
    id_field: str | None = "id",
) -> Iterator[Document]:
    """Documents of one Arrow IPC file (see the module docstring)."""
    reader = opened(f, rel)
    if reader is None:
        tally.drop("empty_file")
        return
    columns = columns_read(reader.schema, rel, text_field, source, id_field)
    yield from rows_documents(batches(reader, rel), columns, rel, source, tally)


def opened(f: BinaryIO, rel: str):
    """A record batch reader over the file (stream or file format), or None for a file of
    nothing or white space, which every reader counts as empty; a file of neither format raises
    `BadInputError` naming it."""
    import pyarrow as pa

    head = first_bytes(f, HEAD)
    if not head:
        return None
    if not is_arrow(head):
        raise BadInputError(
            f"{rel}: not an Arrow IPC file (it starts with neither {FILE_MAGIC.decode()} nor a "
            "stream's 0xFFFFFFFF); is this the right --format? (`datasets`' save_to_disk "
            "folders hold JSON beside the data: give DIR/*.arrow)"
        )
    try:
        if head.startswith(FILE_MAGIC):
            if not f.seekable():
                raise BadInputError(compressed_file_format(rel))
            f.seek(0)
            return pa.ipc.open_file(f)
        if f.seekable():
            f.seek(0)
            return pa.ipc.open_stream(f)
        return pa.ipc.open_stream(io.BufferedReader(_Raw(PrefixedReader(head, f))))
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInputError(f"{rel}: not an Arrow IPC file pyarrow can read ({e})") from None


def batches(reader, rel: str):
    """The record batches, in order, each cut into slices of about `parquet.BATCH_BYTES`
    (views, no copy), so that a writer's one batch of a whole table (polars writes such files)
    is not made into Python strings at once; a file cut short or damaged raises
    `BadInputError`."""
    import pyarrow as pa

    try:
        if isinstance(reader, pa.ipc.RecordBatchFileReader):
            whole = (reader.get_batch(k) for k in range(reader.num_record_batches))
        else:
            whole = iter(reader)
        for batch in whole:
            rows = slice_rows(batch.nbytes, batch.num_rows)
            for start in range(0, batch.num_rows, rows):
                yield batch.slice(start, rows)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInputError(f"{rel}: a damaged or truncated Arrow IPC file ({e})") from None


def compressed_file_format(rel: str) -> str:
    """The line for an Arrow file of the file format compressed as a whole: it is read by
    seeking (the stream format may be compressed)."""
    return (
        f"{rel}: an Arrow file of the file format, compressed; decompress it (the file format "
        "is read by seeking)"
    )


class _Raw(io.RawIOBase):
    """A plain `read(n)` stream as the raw stream pyarrow reads from."""

    def __init__(self, f):
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._f.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
