"""Stable hashing and seeding: every random draw derives from the user seed and stable keys."""

from __future__ import annotations

import hashlib
import random

import numpy as np


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of the parts' text, the same in every process and on every machine."""
    text = "\x1f".join(map(str, parts)).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def generator(*parts: object) -> np.random.Generator:
    """A numpy generator seeded from stable keys, e.g. (seed, "instances", pass, doc id)."""
    text = "\x1f".join(map(str, parts)).encode("utf-8")
    words = np.frombuffer(hashlib.blake2b(text, digest_size=16).digest(), dtype=np.uint32)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))


def scalar_generator(*parts: object) -> random.Random:
    """A `random.Random` seeded from stable keys: for long runs of dependent scalar draws."""
    text = "\x1f".join(map(str, parts)).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "little"))
