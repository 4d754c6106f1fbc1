"""The shard contract between the pipeline (which writes) and the model (which reads).

Nothing here imports Beam or torch: only pyarrow, numpy and the standard library.
"""

from schemas.manifest import Manifest, ShardEntry, read_manifest
from schemas.reader import ShardSet
from schemas.shard import (
    SCHEMA_NAME,
    SCHEMA_VERSION,
    ShardColumns,
    arrow_schema,
    read_shard,
    shard_metadata,
    shard_to_bytes,
)
from schemas.vocab import SpecialIds, Vocab

__all__ = [
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "Manifest",
    "ShardColumns",
    "ShardEntry",
    "ShardSet",
    "SpecialIds",
    "Vocab",
    "arrow_schema",
    "read_manifest",
    "read_shard",
    "shard_metadata",
    "shard_to_bytes",
]
