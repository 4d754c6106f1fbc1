"""Open a finished shard set: manifest, vocab and memory-mapped shards.

This is the one way other packages read shards (the model's loader, the validator). A set may
live on a local disk or in an object store (`gs://bucket/prefix`, through `schemas.storage`):
the manifest and vocab are read from there, and a shard is read whole into memory, or through
the `read_table` hook (the model's bounded cache of local copies).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from schemas import storage
from schemas.config import ShardConfig, config_version_problem
from schemas.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    missing_manifest,
    read_manifest_text,
    shard_path,
)
from schemas.shard import read_shard, schema_problem
from schemas.vocab import Vocab

VOCAB_NAME = "vocab.txt"
TOKENIZER_NAME = "tokenizer.json"


def load_manifest(directory: str) -> Manifest:
    """`read_manifest` for a set on a local disk or in an object store, with the same bounds
    and the same one-line errors."""
    text, path = load_manifest_text(directory)
    return Manifest.from_json(text, where=path)


def load_manifest_text(directory: str) -> tuple[str, str]:
    """The manifest's text and where it is (one read), with `load_manifest`'s refusals."""
    if not storage.is_remote(directory):
        return read_manifest_text(directory)
    path = storage.join(directory, MANIFEST_NAME)
    try:
        size = storage.size(path)
    except FileNotFoundError:
        # an object store's prefix is not listed: a set's parent may hold many objects
        raise FileNotFoundError(missing_manifest(directory, path, [])) from None
    if size > MAX_MANIFEST_BYTES:
        raise ValueError(
            f"{path}: {size:,} bytes, more than a manifest may hold ({MAX_MANIFEST_BYTES:,}); "
            "it is not one this package wrote: rebuild the set"
        )
    try:
        text = storage.read_text(path)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e}); rebuild the set") from None
    return text, path


def load_vocab(path: str) -> Vocab:
    """`Vocab.load` for a local path or an object's URL."""
    if not storage.is_remote(path):
        return Vocab.load(path)
    try:
        return Vocab.from_text(storage.read_text(path))
    except ValueError as e:  # a UnicodeDecodeError too, as in `Vocab.load`
        raise ValueError(f"{path}: {e}") from None


def check_set_directory(directory: str) -> None:
    """Refuse, in one line, a local path that cannot hold a shard set: missing
    (FileNotFoundError), or a file (ValueError: the path is the mistake, and `make shards`
    refuses a file as OUT too, so building there is no advice). An object store's prefix is no
    folder to test: its store must take a connection (else OSError), and its manifest is looked
    for by what reads the set. A URL of another store (`s3://`) is refused (ValueError)."""
    scheme = storage.other_store(directory)
    if scheme:
        raise ValueError(
            f"{directory}: {scheme}:// is not a store this reads; shard sets are read from local "
            "folders and gs:// URLs, so copy the set to one of them"
        )
    if storage.is_remote(directory):
        storage.reach(directory)
        return
    if os.path.isdir(directory):
        return
    if os.path.exists(directory):
        raise ValueError(
            f"{directory} is a file, not a shard set directory; give the folder that holds "
            f"{MANIFEST_NAME}"
        )
    raise FileNotFoundError(
        f"{directory}: no such directory; build shards there with "
        f"`make shards OUT={shlex.quote(directory)}`"
    )


@dataclass
class ShardSet:
    directory: str
    manifest: Manifest
    vocab: Vocab
    # How shard i's table is read on this machine, when not from `paths[i]` itself: the model's
    # bounded cache of a set in an object store sets it. None: a local shard is memory-mapped,
    # a remote one read whole into memory.
    read_table: Callable[[int], pa.Table] | None = None

    @classmethod
    def open(cls, directory: str) -> ShardSet:
        check_set_directory(directory)
        manifest = load_manifest(directory)
        schema = schema_problem(manifest.schema_name, manifest.schema_version)
        problem = schema or config_version_problem(manifest.config_version)
        if problem:
            raise ValueError(
                f"{directory}/manifest.json: {problem}; rebuild the shards with this version or "
                "use the matching release"
            )
        for i, entry in enumerate(manifest.shards):  # refuse any path out of OUT/shards/
            shard_path(directory, i, entry.path)
        vocab = load_vocab(storage.join(directory, VOCAB_NAME))
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
        if self.read_table is not None:
            return self.read_table(i)
        path = self.paths[i]
        if storage.is_remote(path):
            return read_remote_shard(path)
        return read_shard(path)

    @property
    def is_remote(self) -> bool:
        return storage.is_remote(self.directory)

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


def read_remote_shard(url: str) -> pa.Table:
    """A shard in an object store, read whole into memory (one request)."""
    data = storage.read_bytes(url)
    try:
        return pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"{url}: not a readable Arrow IPC file ({e}); the shard is truncated or corrupt, "
            "rebuild it with `make shards`"
        ) from None
