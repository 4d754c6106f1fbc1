"""The code that decides a build's bytes: a digest of the `pipeline` and `schemas` sources and
the versions of the libraries whose output the shards hold. A resume records it (a resume on
other code would put two versions' bytes into one set), a standing Dask cluster's workers are
asked for theirs before a build is sent there (`pipeline.shell.cluster`), and every worker that
reads the input checks its own sources against the command's (`same_sources`), so that a
worker pool of another release (the portable runner's, Flink's, Spark's) stops the build in one
line. Library versions are compared only where the command asks (a service's workers install
theirs within the package's bounds)."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
from pathlib import Path

# the libraries whose output the shards hold: the vocab trainer and tokenizer, the Arrow files,
# the random draws, Punkt
BYTES_LIBRARIES = ("tokenizers", "pyarrow", "numpy", "nltk")
PACKAGES = ("pipeline", "schemas")  # this project's code that a build runs
OWN = "sources_sha256"


@functools.lru_cache(maxsize=1)
def code_record() -> dict:
    """{`OWN`: the digest of `PACKAGES`' sources, library: version} of this process (5 ms)."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    versions = {name: importlib.metadata.version(name) for name in BYTES_LIBRARIES}
    return {OWN: digest.hexdigest(), **versions}


def same_sources(commands: str) -> None:
    """In a worker: ValueError unless this process runs the sources whose digest the command
    computed (`commands`, empty: not asked)."""
    mine = code_record()[OWN]
    if commands and mine != commands:
        raise ValueError(
            f"a worker runs other bert-shards code than the command (its sources' digest "
            f"{mine[:12]}..., the command's {commands[:12]}...), and a set made by two versions "
            "would be the bytes of neither; install the command's bert-shards on every worker"
        )


def code_changes(old: dict, new: dict) -> list[str]:
    """What differs from `old` to `new` (code records), said for people; empty when nothing."""
    changed = [
        f"{name} {old.get(name)} -> {new.get(name)}"
        for name in BYTES_LIBRARIES
        if old.get(name) != new.get(name)
    ]
    if old.get(OWN) != new.get(OWN):
        changed.insert(0, "bert-shards' own code")
    return changed
