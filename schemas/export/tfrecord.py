"""TFRecord files of `tf.train.Example`s, as Google's `run_pretraining.py` reads them, without
TensorFlow.

A TFRecord file is a run of frames: the record's length (uint64, little-endian), the masked
CRC-32C of those 8 bytes, the record, the masked CRC-32C of the record. Each record here is an
Example with the seven features of `run_pretraining.py`'s `input_fn`, every one fixed length:

    Example  { features = 1: Features }
    Features { feature  = 1: map<string, Feature> }     (entries: key = 1, value = 2)
    Feature  { float_list = 2: FloatList | int64_list = 3: Int64List }
    Int64List / FloatList { value = 1, packed }

The varints of a block's values are encoded at once with numpy; per row only a few cached
headers and slices are joined. One file per shard of the set, `training-00000-of-00004.tfrecord`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import BinaryIO

import google_crc32c
import numpy as np

from schemas.export.rows import FEATURES, Padded

SUFFIX = ".tfrecord"
FLOAT_FEATURES = {"masked_lm_weights"}
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    """One non-negative integer as a protobuf varint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Non-negative int values (rows x width) as packed varints: the bytes of every row laid end
    to end, and each row's byte count."""
    v = values.astype(np.uint64).reshape(len(values), -1)
    nbytes = np.ones(v.shape, np.int64)
    for k in range(1, 10):
        nbytes += v >= (np.uint64(1) << np.uint64(7 * k))
    width = int(nbytes.max()) if v.size else 1
    shifts = (np.arange(width, dtype=np.uint64) * np.uint64(7))[None, None, :]
    groups = ((v[:, :, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    k = np.arange(width)[None, None, :]
    groups |= np.where(k < nbytes[:, :, None] - 1, 0x80, 0).astype(np.uint8)
    keep = k < nbytes[:, :, None]
    return groups[keep].tobytes(), nbytes.sum(axis=1)


class _Feature:
    """The bytes of one feature's map entry in front of its packed values, cached by the
    values' byte count (few distinct counts in a set)."""

    def __init__(self, name: str):
        self.key = b"\x0a" + varint(len(name)) + name.encode()
        self.kind = b"\x12" if name in FLOAT_FEATURES else b"\x1a"  # float_list=2, int64_list=3
        self.cache: dict[int, bytes] = {}

    def head(self, payload: int) -> bytes:
        head = self.cache.get(payload)
        if head is None:
            values = b"\x0a" + varint(payload)  # the list's packed `value` field
            feature = self.kind + varint(len(values) + payload)
            inner = len(feature) + len(values) + payload
            head = b"\x0a" + varint(len(self.key) + 1 + len(varint(inner)) + inner)
            head += self.key + b"\x12" + varint(inner) + feature + values
            self.cache[payload] = head
        return head


class TFRecordWriter:
    """One TFRecord file per shard of the set."""

    format = "tfrecord"
    padded = True

    def __init__(self):
        self.features = {name: _Feature(name) for name in FEATURES}

    def file_name(self, index: int, total: int) -> str:
        return f"training-{index:05d}-of-{total:05d}{SUFFIX}"

    def write_shard(self, f: BinaryIO, rows: int, blocks: Iterable[Padded]) -> None:
        for block in blocks:
            self.write_block(f, block)

    def write_block(self, f: BinaryIO, block: Padded) -> None:
        """Frame and write a block's rows as Examples."""
        columns = []  # per feature, each row's entry: its head and its packed values
        for name in FEATURES:
            values = getattr(block, name)
            if name in FLOAT_FEATURES:
                data = values.astype("<f4").tobytes()
                sizes = np.full(len(values), 4 * values.shape[1], np.int64)
            else:
                data, sizes = varints(values)
            ends = np.cumsum(sizes)
            head = self.features[name].head
            columns.append(
                [
                    head(n) + data[e - n : e]
                    for n, e in zip(sizes.tolist(), ends.tolist(), strict=True)
                ]
            )
        pack, crc = struct.pack, masked_crc32c
        out = []
        for entries in zip(*columns, strict=True):
            body = b"".join(entries)
            record = b"\x0a" + varint(len(body)) + body
            header = pack("<Q", len(record))
            out.append(header + pack("<I", crc(header)) + record + pack("<I", crc(record)))
        f.write(b"".join(out))
