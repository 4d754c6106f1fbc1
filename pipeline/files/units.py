"""Units files: every dupe pass of every tokenized document, sorted by its bucket hash `h`, in
one record batch per slice of the hash space (the `slices` top bits of `h`), with an index of
each slice's byte offset and CRC-32C beside the file (`u.arrow.index`), so that a bucket (a range
of `h`) reads only the slices it overlaps: on a remote filesystem in two ranged requests. The
checks and the other chunk files are `pipeline.files.chunks`'.

The slices are small remotely (about 16 KiB) and large locally, where the file is mapped and a
bucket touches only the rows it takes: how many buckets a build has is not known when units are
written, so only slices small beside any bucket keep a bucket's reads near what it needs.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import numpy as np
import pyarrow as pa

from pipeline.core.instances import TokenizedDoc
from pipeline.files.chunks import (
    ARROW_MAGIC,
    CHECK_KEY,
    INDEX_ENTRY,
    INDEX_SUFFIX,
    Chunk,
    batch_sums,
    checked_batches,
    damaged,
    head_schema,
    metadata_check,
    write_table,
)
from pipeline.files.fsio import is_local, read_bytes, write_bytes

# Target bytes of one slice of a units file: remote, what a bucket may read beyond its range at
# each end; local, few batches (a mapped file costs nothing beyond the rows read).
REMOTE_SLICE_BYTES, LOCAL_SLICE_BYTES = 16 << 10, 256 << 10
MAX_SLICE_BITS = 16
REMOTE_READERS = 16  # a bucket's concurrent ranged reads of remote units files


def unit_schema(id_type: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            ("h", pa.uint64()),  # the bucket hash of (pass, document)
            ("pass", pa.uint32()),
            ("id", pa.string()),
            ("source", pa.string()),
            ("ids", pa.large_list(id_type)),
            ("offsets", pa.large_list(pa.int64())),  # sentence k: ids[offsets[k]:offsets[k+1]]
        ]
    )


def write_units(
    path: str, units: Sequence[tuple[int, int, TokenizedDoc]], documents=0, tokens=0, counts=None
) -> Chunk:
    """(h, pass, document) units, sorted here by (h, pass, id), one record batch per slice of
    the hash space (empty ones too: batch s is slice s); remote, with the slices' byte offsets
    beside the file. `documents` (units: document passes), `tokens` (of every pass) and
    `counts` are kept with the file."""
    units = sorted(units, key=lambda u: (u[0], u[1], u[2].id))
    id_type = pa.from_numpy_dtype(units[0][2].ids.dtype) if units else pa.uint16()
    h = np.array([u[0] for u in units], dtype=np.uint64)
    table = pa.table(
        {
            "h": h,
            "pass": np.array([u[1] for u in units], dtype=np.uint32),
            "id": [u[2].id for u in units],
            "source": [u[2].source for u in units],
            "ids": large_lists([u[2].ids for u in units], id_type),
            "offsets": large_lists([u[2].offsets for u in units], pa.int64()),
        },
        schema=unit_schema(id_type),
    )
    target = LOCAL_SLICE_BYTES if is_local(path) else REMOTE_SLICE_BYTES
    bits = min(MAX_SLICE_BITS, max(0, math.ceil(math.log2(max(1, table.nbytes / target)))))
    chunk = Chunk(path, documents, 0, tokens, counts or {}, bits, str(id_type))
    whole = table.combine_chunks().to_batches()[0] if len(table) else None
    bounds = np.searchsorted(slice_of(h, bits), np.arange((1 << bits) + 1), side="left")
    batches = [
        whole.slice(a, b - a) if whole is not None else pa.RecordBatch.from_pylist([], table.schema)
        for a, b in itertools.pairwise(bounds.tolist())
    ]
    # where each batch starts, after the magic and the schema message, and its CRC-32C
    sums = np.array(batch_sums(batches), dtype=np.uint64).reshape(-1, 2)
    record = {k: v for k, v in asdict(chunk).items() if k != "path"}
    metadata = {b"chunk": json.dumps(record).encode()}
    metadata[CHECK_KEY] = str(metadata_check(metadata)).encode()
    head = ARROW_MAGIC + table.schema.with_metadata(metadata).serialize().size
    index = np.zeros(len(batches) + 1, dtype=INDEX_ENTRY)
    index["at"] = np.cumsum(np.concatenate([[head], sums[:, 0]]), dtype=np.uint64)
    index["crc"][:-1] = sums[:, 1]
    write_bytes(path + INDEX_SUFFIX, index.tobytes())
    write_table(path, table, chunk, batches, indexed=True)
    return chunk


def slice_of(h: np.ndarray, bits: int) -> np.ndarray:
    """The slice of each bucket hash: its top `bits` bits."""
    return h >> np.uint64(64 - bits) if bits else np.zeros(len(h), dtype=np.uint64)


def large_lists(arrays: Sequence[np.ndarray], value_type: pa.DataType) -> pa.LargeListArray:
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    return pa.LargeListArray.from_arrays(offsets, pa.array(values, type=value_type))


def hash_range(bucket: int, buckets: int) -> tuple[int, int]:
    """The h of bucket b: those with (h * buckets) >> 64 == b, i.e. lo <= h < hi."""
    lo = -((-bucket << 64) // buckets)
    hi = -((-(bucket + 1) << 64) // buckets)
    return lo, hi


def read_units(chunk: Chunk, lo: int, hi: int) -> list[tuple[int, TokenizedDoc]]:
    """The (pass, document) units of a units chunk with lo <= h < hi; reads only their slices."""
    shift = 64 - chunk.slices
    first, last = lo >> shift, (hi - 1) >> shift
    out = []
    for batch in unit_batches(chunk, first, last + 1):
        if not batch.num_rows:
            continue
        h = batch.column(0).to_numpy()
        keep = h >= np.uint64(lo)
        if hi < 1 << 64:
            keep &= h < np.uint64(hi)
        out.extend(batch_units(batch, np.flatnonzero(keep)))
    return out


def read_bucket_units(chunks: Sequence[Chunk], lo: int, hi: int) -> list[tuple[int, TokenizedDoc]]:
    """`read_units` of every chunk, in order; remote files are read side by side, since a
    bucket asks every units file for a few slices and each asking is a round trip."""
    if all(is_local(c.path) for c in chunks):
        return [u for c in chunks for u in read_units(c, lo, hi)]
    with ThreadPoolExecutor(max_workers=REMOTE_READERS) as pool:
        parts = list(pool.map(lambda c: read_units(c, lo, hi), chunks))
    return [u for part in parts for u in part]


def unit_batches(chunk: Chunk, first: int, stop: int) -> list[pa.RecordBatch]:
    """Record batches [first, stop) of a units file, each checked against its CRC-32C.

    Every bucket reads every units file, so with several workers one that finds a file damaged
    removes it (`damaged`) while others may still be about to read it: a file or index gone is
    said the same way, not as the bare FileNotFoundError of whichever worker the runner
    reports first (docs/pipeline.md, "Checksums")."""
    try:
        return _checked_unit_batches(chunk, first, stop)
    except FileNotFoundError:
        raise damaged(chunk.path, "it or its index is missing") from None


def _checked_unit_batches(chunk: Chunk, first: int, stop: int) -> list[pa.RecordBatch]:
    """`unit_batches`: their offsets and sums from the index beside the file, then exactly
    their bytes (from its memory map locally; elsewhere each one ranged read)."""
    path = chunk.path
    size = INDEX_ENTRY.itemsize
    index = read_bytes(path + INDEX_SUFFIX, size * first, size * (stop + 1))
    if len(index) != size * (stop + 1 - first):
        raise damaged(path, "its index is too short")
    entries = np.frombuffer(index, dtype=INDEX_ENTRY)
    start, end = int(entries["at"][0]), int(entries["at"][-1])
    if start == end:
        return []
    if is_local(path):
        data = pa.memory_map(path).read_buffer()
        if end > data.size:
            raise damaged(path, "shorter than its index says")
        data = data.slice(start, end - start)
    else:
        data = pa.py_buffer(read_bytes(path, start, end))
    sums = np.stack([np.diff(entries["at"]), entries["crc"][:-1]], axis=1).tolist()
    if chunk.id_type:
        schema = unit_schema(pa.type_for_alias(chunk.id_type))
    else:  # a record made without it: the file's own (one more read)
        schema = head_schema(path)
    return checked_batches(path, data, start, sums, schema)


def batch_units(batch: pa.RecordBatch, rows: np.ndarray) -> Iterator[tuple[int, TokenizedDoc]]:
    """The units of some rows of a units batch; their ids and offsets are views of the batch."""
    passes = batch.column(1).to_numpy()
    ids, sources = batch.column(2).to_pylist(), batch.column(3).to_pylist()
    tokens, token_at = batch.column(4).values.to_numpy(), batch.column(4).offsets.to_numpy()
    offsets, offset_at = batch.column(5).values.to_numpy(), batch.column(5).offsets.to_numpy()
    for r in rows.tolist():
        doc = TokenizedDoc(
            ids[r],
            tokens[token_at[r] : token_at[r + 1]],
            offsets[offset_at[r] : offset_at[r + 1]],
            sources[r],
        )
        yield int(passes[r]), doc
