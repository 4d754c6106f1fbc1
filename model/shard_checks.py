"""What the loader checks of a local shard before reading its rows: its bytes (size and sha256
against the manifest, once per process), its schema, vocab and row count, and its offsets."""

from __future__ import annotations

import os

import numpy as np

from schemas.reader import ShardSet
from schemas.shard import ShardColumns, schema_metadata, schema_problem
from schemas.storage import is_remote
from schemas.validate.files import sha256_file

# (path, size, mtime) of the local shards whose bytes this process has checked: a set is hashed
# once per process, not again for each epoch's data, the held-out rows or a resume
_CHECKED: set[tuple[str, int, int]] = set()


def check_shard_bytes(shards: ShardSet, index: int) -> None:
    """A local shard's size and sha256 against its manifest entry, before it is read: a bit
    flipped after the build (a disk, a copy) would otherwise train silently wherever the
    per-batch checks let it through. A set in GCS is checked by the shard cache as it fetches
    each shard. Once per process, for the shards a rank reads; the cost is sha256's rate, in
    docs/benchmarks.md ("validate")."""
    path, entry = shards.paths[index], shards.manifest.shards[index]
    if is_remote(path):
        return
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key in _CHECKED:
        return
    changed = "the file changed after it was written: run `make validate` and rebuild the set"
    if st.st_size != entry.bytes:
        raise ValueError(
            f"{path}: {st.st_size:,} bytes, the manifest says {entry.bytes:,}; {changed}"
        )
    digest = sha256_file(path)
    if digest != entry.sha256:
        raise ValueError(
            f"{path}: sha256 {digest[:12]}... differs from the manifest's {entry.sha256[:12]}...; "
            f"{changed}"
        )
    _CHECKED.add(key)


def check_shard(shards: ShardSet, index: int, table) -> None:
    """Refuse a shard whose schema, vocab or row count disagrees with what this code reads."""
    path, entry = shards.paths[index], shards.manifest.shards[index]
    md = schema_metadata(table.schema)
    problem = schema_problem(md["schema_name"], md["schema_version"])
    if problem:
        raise ValueError(f"{path}: shard {problem}; rebuild the shards with this version")
    size = shards.manifest.vocab_size
    id_type = table.schema.field("input_ids").type.value_type
    if md["vocab_size"] != size or size > 2**id_type.bit_width:
        raise ValueError(
            f"{path}: schema metadata says {md['vocab_size']} pieces in {id_type} ids, the "
            f"manifest {size}; the ids cannot address this vocab, rebuild the set"
        )
    if md["vocab_sha256"] != shards.manifest.vocab_sha256:
        raise ValueError(
            f"{path}: built with vocab {md['vocab_sha256']}, the manifest names "
            f"{shards.manifest.vocab_sha256}; the shard set mixes vocabularies, rebuild it"
        )
    if table.num_rows != entry.rows:
        raise ValueError(
            f"{path}: {table.num_rows} rows, the manifest says {entry.rows}; the shard set is "
            "inconsistent (run `make validate`), rebuild it"
        )


def check_offsets(path: str, cols: ShardColumns) -> None:
    """Offsets that start at 0, never decrease and end at their column's length."""
    for name, off, values in (
        ("input_ids", cols.input_offsets, cols.input_ids),
        ("masked_positions", cols.masked_offsets, cols.masked_positions),
    ):
        if off[-1] != len(values) or (len(off) > 1 and np.any(np.diff(off) < 0)):
            raise ValueError(
                f"{path}: the {name} offsets overrun or run backwards; the shard is damaged: run "
                "`make validate` and rebuild it"
            )
    if len(cols.masked_labels) != len(cols.masked_positions):
        raise ValueError(f"{path}: masked_labels and masked_positions differ in length; rebuild it")
