"""The Arrow layout of one shard: one row per pre-training instance, no padding stored.

A shard is an Arrow IPC *file* (random access, memory-mappable). Per row:

- `input_ids`        list<uint16|uint32>  `[CLS] A [SEP] B [SEP]` after masking
- `segment_b_start`  uint16               index of B's first token (right after the first `[SEP]`)
- `masked_positions` list<uint16>         ascending positions selected for prediction
- `masked_labels`    list<uint16|uint32>  original ids at those positions
- `is_random_next`   bool                 True: B comes from another document

Schema metadata names the schema and its version, the vocab's sha256 and special ids,
and the build config, so a shard alone says how it was made.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from schemas.config import type_name

SCHEMA_NAME = "bert-pretraining-instances"
SCHEMA_VERSION = 1
ROWS_PER_BATCH = 4096

META_SCHEMA_NAME = b"schema.name"
META_SCHEMA_VERSION = b"schema.version"
META_VOCAB_SHA256 = b"vocab.sha256"
META_VOCAB_SIZE = b"vocab.size"
META_SPECIAL_IDS = b"vocab.special_ids"
META_CONFIG = b"build.config"


def schema_problem(name: object, version: object) -> str:
    """Why a schema name and version (a manifest's, or a shard's metadata) are not the ones
    this code reads; "" when they are. The one check every reader of shards calls."""
    if name == SCHEMA_NAME and version == SCHEMA_VERSION and type(version) is int:
        return ""
    if type(version) is not int:
        return f"schema version {version!r} is {type_name(version)}, not an integer"
    return (
        f"schema {name!r} version {version} is not the one this code reads "
        f"({SCHEMA_NAME!r} version {SCHEMA_VERSION})"
    )


def arrow_schema(id_type: str = "uint16", metadata: dict[bytes, bytes] | None = None) -> pa.Schema:
    ids = pa.uint16() if id_type == "uint16" else pa.uint32()
    return pa.schema(
        [
            pa.field("input_ids", pa.list_(ids), nullable=False),
            pa.field("segment_b_start", pa.uint16(), nullable=False),
            pa.field("masked_positions", pa.list_(pa.uint16()), nullable=False),
            pa.field("masked_labels", pa.list_(ids), nullable=False),
            pa.field("is_random_next", pa.bool_(), nullable=False),
        ],
        metadata=metadata,
    )


def shard_metadata(
    vocab_sha256: str, vocab_size: int, special_ids: dict[str, int], config: dict
) -> dict[bytes, bytes]:
    return {
        META_SCHEMA_NAME: SCHEMA_NAME.encode(),
        META_SCHEMA_VERSION: str(SCHEMA_VERSION).encode(),
        META_VOCAB_SHA256: vocab_sha256.encode(),
        META_VOCAB_SIZE: str(vocab_size).encode(),
        META_SPECIAL_IDS: json.dumps(special_ids, sort_keys=True).encode(),
        META_CONFIG: json.dumps(config, sort_keys=True).encode(),
    }


def segment_gather(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) for each (s, n), without a Python loop: the flat
    indices of some rows of a list column laid end to end (int64)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total)


@dataclass
class ShardColumns:
    """A shard's rows as flat numpy arrays: values plus row offsets (length rows + 1)."""

    input_ids: np.ndarray  # all rows' ids, concatenated
    input_offsets: np.ndarray  # int64, row i is input_ids[off[i]:off[i+1]]
    segment_b_start: np.ndarray  # uint16 per row
    masked_positions: np.ndarray  # concatenated, positions within each row
    masked_labels: np.ndarray  # concatenated, same layout as masked_positions
    masked_offsets: np.ndarray  # int64, row i is masked_*[off[i]:off[i+1]]
    is_random_next: np.ndarray  # bool per row

    @property
    def num_rows(self) -> int:
        return len(self.segment_b_start)

    def to_table(self, id_type: str, metadata: dict[bytes, bytes] | None = None) -> pa.Table:
        ids = np.dtype(id_type)
        off = self.input_offsets.astype(np.int32)
        moff = self.masked_offsets.astype(np.int32)
        arrays = [
            pa.ListArray.from_arrays(off, pa.array(self.input_ids.astype(ids, copy=False))),
            pa.array(self.segment_b_start.astype(np.uint16, copy=False)),
            pa.ListArray.from_arrays(moff, pa.array(self.masked_positions.astype(np.uint16))),
            pa.ListArray.from_arrays(moff, pa.array(self.masked_labels.astype(ids, copy=False))),
            pa.array(self.is_random_next.astype(bool, copy=False)),
        ]
        return pa.Table.from_arrays(arrays, schema=arrow_schema(id_type, metadata))

    @classmethod
    def from_table(cls, table: pa.Table) -> ShardColumns:
        """Flat numpy views of a table (zero-copy where Arrow allows)."""
        table = table.combine_chunks()
        ids = table.column("input_ids").chunk(0) if table.num_rows else None
        pos = table.column("masked_positions").chunk(0) if table.num_rows else None
        lab = table.column("masked_labels").chunk(0) if table.num_rows else None
        if ids is None:
            e = np.zeros(0, np.uint16)
            z = np.zeros(1, np.int64)
            return cls(e, z, e, e, e, z, np.zeros(0, bool))
        masked_offsets = _offsets(pos)
        row = label_mismatch(masked_offsets, _offsets(lab))
        if row >= 0:
            raise ValueError(
                f"row {row} has {masked_offsets[row + 1] - masked_offsets[row]} masked positions "
                f"and {_offsets(lab)[row + 1] - _offsets(lab)[row]} masked labels; the shard is "
                "corrupt: run `bert-schemas validate` and rebuild it"
            )
        return cls(
            input_ids=_values(ids),
            input_offsets=_offsets(ids),
            segment_b_start=table.column("segment_b_start").to_numpy(),
            masked_positions=_values(pos),
            masked_labels=_values(lab),
            masked_offsets=masked_offsets,
            is_random_next=table.column("is_random_next").to_numpy(zero_copy_only=False),
        )


def label_mismatch(position_offsets: np.ndarray, label_offsets: np.ndarray) -> int:
    """The first row whose masked_labels list is not as long as its masked_positions list, or
    -1. Every reader pairs a label with a position by index, so one flipped offset would shift
    every later pair without this check."""
    if len(position_offsets) == len(label_offsets):
        differ = np.flatnonzero(position_offsets != label_offsets)
        return int(differ[0]) - 1 if len(differ) else -1
    return 0


def row_lengths_differ(position_offsets: np.ndarray, label_offsets: np.ndarray) -> np.ndarray:
    """Per row, True where the labels' list length differs from the positions'."""
    return np.diff(position_offsets) != np.diff(label_offsets)


def _offsets(arr: pa.ListArray) -> np.ndarray:
    off = arr.offsets.to_numpy().astype(np.int64)
    return off - off[0]


def _values(arr: pa.ListArray) -> np.ndarray:
    off = arr.offsets.to_numpy()
    return arr.values.to_numpy()[off[0] : off[-1]]


def shard_to_bytes(table: pa.Table, rows_per_batch: int = ROWS_PER_BATCH) -> bytes:
    """Serialise a table as an Arrow IPC file in record batches of `rows_per_batch` rows."""
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=rows_per_batch):
            writer.write_batch(batch)
    return sink.getvalue()


def read_shard(path: str, memory_map: bool = True) -> pa.Table:
    """Read one shard; memory-mapped by default so that only touched pages are loaded."""
    source = pa.memory_map(path, "r") if memory_map else pa.OSFile(path, "r")
    try:
        return pa.ipc.open_file(source).read_all()
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"{path}: not a readable Arrow IPC file ({e}); the shard is truncated or corrupt, "
            "rebuild it with `make shards`"
        ) from None


def schema_metadata(schema: pa.Schema) -> dict[str, object]:
    """Decoded shard metadata: schema name/version, vocab hash/size/special ids, build config."""
    md = schema.metadata or {}

    def get(key: bytes) -> str | None:
        v = md.get(key)
        return v.decode() if v is not None else None

    version = get(META_SCHEMA_VERSION)
    specials = get(META_SPECIAL_IDS)
    config = get(META_CONFIG)
    size = get(META_VOCAB_SIZE)
    return {
        "schema_name": get(META_SCHEMA_NAME),
        "schema_version": int(version) if version and version.isdigit() else version,
        "vocab_sha256": get(META_VOCAB_SHA256),
        "vocab_size": int(size) if size and size.isdigit() else size,
        "special_ids": json.loads(specials) if specials else None,
        "config": json.loads(config) if config else None,
    }
