"""Which shard set a pre-training run trains on, and the resume check that keeps it.

A checkpoint records its set's directory and the sha256 of its `manifest.json` (which lists
every shard's sha256, the vocab's and the build config, so it stands for the set's bytes). A
resume on a set with another manifest is refused, naming both, unless `--allow-other-shards`
says the change is meant (say, continuing on a larger build of the same corpus); the vocab, the
model and the data order are checked as before either way. A checkpoint written before the
digest was recorded is resumed without this check.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from model.config import flag_hint
from schemas import storage
from schemas.manifest import MANIFEST_NAME
from schemas.reader import ShardSet

KEY = "shard_set"  # the checkpoint's entry


@lru_cache(maxsize=8)
def manifest_sha256(directory: str) -> str:
    return hashlib.sha256(storage.read_bytes(storage.join(directory, MANIFEST_NAME))).hexdigest()


def shard_set_record(shards: ShardSet) -> dict:
    return {"directory": shards.directory, "manifest_sha256": manifest_sha256(shards.directory)}


def shard_set_entry(shards: ShardSet) -> dict:
    """What a checkpoint records of its set: {KEY: its directory and manifest digest}."""
    return {KEY: shard_set_record(shards)}


def check_shard_set(path: str, ckpt: dict, shards: ShardSet, allow_other: bool, main: bool) -> None:
    """Refuse resuming the checkpoint at `path` on another set than its own, unless allowed."""
    was = ckpt.get(KEY)
    if not was:
        return
    here = shard_set_record(shards)
    if was["manifest_sha256"] == here["manifest_sha256"]:
        return
    said = (
        f"{path}: the run trained on {was['directory']} (manifest sha256 "
        f"{was['manifest_sha256'][:12]}), but --shards {here['directory']} is another set "
        f"(manifest sha256 {here['manifest_sha256'][:12]})"
    )
    if not allow_other:
        raise ValueError(
            f"{said}; resume on the set the run started with, or pass "
            f"{flag_hint('--allow-other-shards')} if the change is meant"
        )
    if main:
        print(f"note: {said}; resuming on it (--allow-other-shards)", flush=True)
