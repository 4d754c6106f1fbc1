"""Open a finished shard set: manifest, vocab and memory-mapped shards.

This is the one way other packages read shards (the model's loader, the validator).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa

from schemas.config import ShardConfig, config_version_problem
from schemas.manifest import MANIFEST_NAME, Manifest, read_manifest, shard_path
from schemas.shard import read_shard, schema_problem
from schemas.vocab import Vocab

VOCAB_NAME = "vocab.txt"
TOKENIZER_NAME = "tokenizer.json"


@dataclass
class ShardSet:
    directory: str
    manifest: Manifest
    vocab: Vocab

    @classmethod
    def open(cls, directory: str) -> ShardSet:
        if not os.path.isdir(directory):
            raise FileNotFoundError(
                f"{directory}: no such directory; build shards there with "
                f"`make shards OUT={directory}`"
            )
        manifest = read_manifest(directory)
        schema = schema_problem(manifest.schema_name, manifest.schema_version)
        problem = schema or config_version_problem(manifest.config_version)
        if problem:
            raise ValueError(
                f"{directory}/manifest.json: {problem}; rebuild the shards with this version or "
                "use the matching release"
            )
        for i, entry in enumerate(manifest.shards):  # refuse any path out of OUT/shards/
            shard_path(directory, i, entry.path)
        vocab = Vocab.load(os.path.join(directory, VOCAB_NAME))
        return cls(directory, manifest, vocab)

    @property
    def paths(self) -> list[str]:
        """The shards' paths, each checked by `shard_path` (also when the set was built by hand
        rather than by `open`)."""
        return [shard_path(self.directory, i, s.path) for i, s in enumerate(self.manifest.shards)]

    def __len__(self) -> int:
        return len(self.manifest.shards)

    @property
    def num_rows(self) -> int:
        return self.manifest.rows

    def table(self, i: int) -> pa.Table:
        return read_shard(self.paths[i])

    @property
    def config(self) -> dict:
        """The build config as recorded (every key the pipeline wrote)."""
        return self.manifest.config

    @property
    def shard_config(self) -> ShardConfig:
        """The build config parsed (`schemas.config`); ValueError when it is unusable."""
        try:
            return ShardConfig.parse(self.manifest.config)
        except ValueError as e:
            raise ValueError(
                f"{os.path.join(self.directory, MANIFEST_NAME)}: config {e}; run "
                "`make validate` and rebuild the set"
            ) from None
