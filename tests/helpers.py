"""Helpers shared by several test files: the sample corpus, a build of it, the digests that
say two shard sets hold the same bytes, and Google's vocab layout. Fixtures live in
conftest.py; test files import from here, never from each other."""

from __future__ import annotations

import glob
import hashlib
import json
import os

from schemas.vocab import SPECIAL_TOKENS, Vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "sample")
SAMPLE_INPUT = f"books:{SAMPLE}/books,text:{SAMPLE}/text"
BUILD_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def build_shards(out: str, *extra: str, inputs: str = SAMPLE_INPUT) -> int:
    from pipeline.shell.cli import main

    return main(["build", "--input", inputs, "--out", out, "--workers", "1", *extra])


def file_digests(out: str) -> dict[str, str]:
    """sha256 of each shard and of vocab.txt, by path relative to `out`."""
    return {
        os.path.relpath(p, out): hashlib.sha256(open(p, "rb").read()).hexdigest()
        for p in sorted(glob.glob(f"{out}/shards/*.arrow")) + [f"{out}/vocab.txt"]
    }


def read(path: str) -> bytes:
    """A local or gs:// file's bytes."""
    from pipeline.files.fsio import read_bytes

    return read_bytes(path)


def shard_set(out: str) -> dict:
    """What decides a set's bytes, local or on gs://: its shards, vocab and tokenizer files, and
    the manifest without its `created` note (time, host, OUT)."""
    manifest = json.loads(read(f"{out}/manifest.json"))
    manifest.pop("created")
    files = {e["path"]: read(f"{out}/{e['path']}") for e in manifest["shards"]}
    files.update({name: read(f"{out}/{name}") for name in BUILD_FILES})
    return {"manifest": manifest, **files}


def google_layout(vocab: Vocab) -> Vocab:
    """Google's released layout: [PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103, more [unusedN], then the pieces."""
    rest = [p for p in vocab.pieces if p not in SPECIAL_TOKENS]
    head = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return Vocab(tuple(head + [f"[unused{i}]" for i in range(99, 120)] + rest))
