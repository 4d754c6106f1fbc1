"""`OUT/manifest.json`: the list of shards, the config and the run's counts.

It is written last and atomically: its presence means the dataset is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field

import numpy as np

from schemas.shard import SCHEMA_NAME, SCHEMA_VERSION, ShardColumns

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class ShardEntry:
    path: str  # relative to the dataset directory, e.g. "shards/train-00000-of-00004.arrow"
    rows: int
    bytes: int
    sha256: str
    tokens: int  # sum of row lengths
    masked_tokens: int  # sum of masked positions
    random_next: int  # rows with is_random_next
    short_rows: int = 0  # rows whose target length was drawn short (short_seq_prob)
    # Rows whose is_random_next was not drawn with random_next_prob: a one-sentence chunk always
    # takes B from another document; a bucket holding one document never can.
    forced_random_next: int = 0
    forced_actual_next: int = 0

    @classmethod
    def describe(cls, path: str, data: bytes, columns: ShardColumns, **counts: int) -> ShardEntry:
        """The entry of a shard from its bytes and columns; `counts` are the figures only the
        writer knows (short_rows, forced_random_next, forced_actual_next)."""
        return cls(
            path=path,
            rows=columns.num_rows,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            tokens=int(len(columns.input_ids)),
            masked_tokens=int(len(columns.masked_positions)),
            random_next=int(np.count_nonzero(columns.is_random_next)),
            **{k: int(v) for k, v in counts.items()},
        )


@dataclass(frozen=True)
class Manifest:
    shards: tuple[ShardEntry, ...]
    config: dict
    vocab_sha256: str
    vocab_size: int
    special_ids: dict
    counts: dict = field(default_factory=dict)  # documents read/dropped by reason, sentences, ...
    schema_name: str = SCHEMA_NAME
    schema_version: int = SCHEMA_VERSION
    manifest_format: int = MANIFEST_FORMAT
    created: dict = field(default_factory=dict)  # when and where; never inside shards

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_json(self) -> str:
        d = asdict(self)
        d["shards"] = [asdict(s) for s in self.shards]
        return json.dumps(d, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "manifest.json") -> Manifest:
        try:
            d = json.loads(text)
            d["shards"] = tuple(ShardEntry(**s) for s in d["shards"])
            return cls(**d)
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(
                f"{where}: not a valid manifest ({type(e).__name__}: {e}); rebuild the dataset "
                "with `make shards`"
            ) from None

    def write(self, directory: str) -> str:
        """Write atomically to a local directory: temporary file, fsync, rename."""
        return atomic_write_text(os.path.join(directory, MANIFEST_NAME), self.to_json())


def read_manifest(directory: str) -> Manifest:
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist: {directory} is not a finished shard set (the manifest is "
            "written last); run `make shards OUT={directory}` first"
        )
    with open(path, encoding="utf-8") as f:
        return Manifest.from_json(f.read(), where=path)


def atomic_write_text(path: str, text: str) -> str:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
