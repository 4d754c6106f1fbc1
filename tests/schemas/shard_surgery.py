"""Break a good shard set in one precise way (tests only).

File-level damage (truncation, flipped bytes, deleted or extra files) leaves the manifest as it
was, as a disk or a copy would. Content damage (`rewrite_shard`) rewrites the shard *and* its
manifest entry, as a buggy writer would: sizes and hashes then match, and only the row rules
can tell.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from schemas.manifest import Manifest, ShardEntry, read_manifest
from schemas.shard import ShardColumns, read_shard, shard_to_bytes


def copy_set(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


def shard_file(directory: str, index: int) -> str:
    return os.path.join(directory, read_manifest(directory).shards[index].path)


def columns(directory: str, index: int) -> ShardColumns:
    """A writable copy of one shard's columns."""
    c = ShardColumns.from_table(read_shard(shard_file(directory, index)))
    return ShardColumns(
        *(np.array(getattr(c, f.name), copy=True) for f in dataclasses.fields(ShardColumns))
    )


def rewrite_shard(directory: str, index: int, mutate: Callable[[ShardColumns], ShardColumns]):
    """Rewrite shard `index` with `mutate(columns)` and update its manifest entry to match."""
    path = shard_file(directory, index)
    schema = pa.ipc.open_file(pa.memory_map(path)).schema
    id_type = str(schema.field("input_ids").type.value_type)
    cols = mutate(columns(directory, index))
    data = shard_to_bytes(cols.to_table(id_type, schema.metadata))
    with open(path, "wb") as f:
        f.write(data)
    edit_manifest(
        directory,
        lambda m: _replace_entry(
            m,
            index,
            ShardEntry.describe(
                m.shards[index].path,
                data,
                cols,
                short_rows=min(m.shards[index].short_rows, cols.num_rows),
                forced_random_next=m.shards[index].forced_random_next,
                forced_actual_next=m.shards[index].forced_actual_next,
            ),
        ),
    )


def _replace_entry(m: Manifest, index: int, entry: ShardEntry) -> Manifest:
    shards = list(m.shards)
    shards[index] = entry
    return dataclasses.replace(m, shards=tuple(shards))


def edit_manifest(directory: str, change: Callable[[Manifest], Manifest]) -> Manifest:
    m = change(read_manifest(directory))
    m.write(directory)
    return m


def ids_buffer_offset(path: str) -> int:
    """File offset of the first record batch's `input_ids` values buffer."""
    mm = pa.memory_map(path)
    whole = mm.read_buffer()
    batch = pa.ipc.open_file(mm).get_batch(0)
    values = batch.column(0).values.buffers()[1]
    return values.address - whole.address


def delete_token(c: ShardColumns, row: int, position: int) -> ShardColumns:
    """Remove one piece from a row (the row gets shorter; later rows shift)."""
    at = int(c.input_offsets[row]) + position
    off = c.input_offsets.copy()
    off[row + 1 :] -= 1
    return dataclasses.replace(c, input_ids=np.delete(c.input_ids, at), input_offsets=off)
