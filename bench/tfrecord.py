"""The reference's TFRecords read without TensorFlow.

A TFRecord file is a sequence of frames (uint64 length, masked CRC-32C of the length, the bytes,
masked CRC-32C of the bytes), each frame a serialized `tf.train.Example` protobuf, parsed here
from the wire format. The reference pads every row to `max_seq_length` and every prediction list
to `max_predictions_per_seq`, so `read_reference` returns each feature as one 2-D array.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import numpy as np

from schemas.export.rows import FEATURES

# --- CRC-32C (Castagnoli), as TFRecord frames use it -------------------------------------------


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- TFRecord framing ---------------------------------------------------------------------------


def iter_records(path: str, check_crc: bool = False) -> Iterator[bytes]:
    """The records of one TFRecord file; `check_crc` verifies both checksums (slow: pure Python)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError(f"{path}: truncated frame header at byte {pos}")
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        end = pos + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{path}: truncated record at byte {pos}")
        record = data[pos + 12 : end]
        if check_crc:
            (len_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
            (data_crc,) = struct.unpack("<I", data[end : end + 4])
            if len_crc != masked_crc32c(header) or data_crc != masked_crc32c(record):
                raise ValueError(f"{path}: CRC mismatch in the record at byte {pos}")
        yield record
        pos = end + 4


# --- protobuf wire format: tf.train.Example ----------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a message: ints for varint/fixed, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ValueError("truncated field")
        yield field, wire, value


def example_features(record: bytes) -> dict[str, tuple[str, bytes]]:
    """Feature name -> (kind, the serialized list message) of one Example, not yet decoded.

    Example{features=1: Features{feature=1: map<string, Feature>}},
    Feature{bytes_list=1 | float_list=2 | int64_list=3}.
    """
    kinds = {1: "bytes", 2: "float", 3: "int64"}
    out = {}
    for field, wire, features in _fields(record):
        if field != 1 or wire != 2:
            continue
        for f2, w2, entry in _fields(features):
            if f2 != 1 or w2 != 2:
                continue
            name, value = "", b""
            for f3, _, v in _fields(entry):
                if f3 == 1:
                    name = v.decode("utf-8")
                elif f3 == 2:
                    value = v
            kind, payload = "int64", b""
            for f4, _, v in _fields(value):
                kind, payload = kinds.get(f4, "unknown"), v
            out[name] = (kind, payload)
    return out


def decode_varints(buf: bytes) -> np.ndarray:
    """All varints packed in `buf`, as int64 (10-byte negatives wrap as protobuf's int64 does)."""
    b = np.frombuffer(buf, np.uint8)
    if not len(b):
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(b < 0x80)
    if not len(ends) or ends[-1] != len(b) - 1:
        raise ValueError("truncated varint")
    starts = np.concatenate(([0], ends[:-1] + 1))
    within = np.arange(len(b)) - np.repeat(starts, ends - starts + 1)
    with np.errstate(over="ignore"):
        parts = (b & 0x7F).astype(np.uint64) << (7 * within).astype(np.uint64)
    return np.add.reduceat(parts, starts).view(np.int64)


def decode_list(kind: str, payload: bytes) -> np.ndarray | list[bytes]:
    """The values of an Int64List, FloatList or BytesList message (packed or not)."""
    if kind == "bytes":
        return [v for f, _, v in _fields(payload) if f == 1]
    dtype = np.int64 if kind == "int64" else np.float32
    values = [np.zeros(0, dtype)]
    for field, wire, v in _fields(payload):
        if field != 1:
            continue
        if kind == "int64" and wire == 2:
            values.append(decode_varints(v))
        elif kind == "int64":
            values.append(np.array([v - (1 << 64) if v >= 1 << 63 else v], np.int64))
        else:
            values.append(np.frombuffer(v, "<f4").astype(np.float32))
    return np.concatenate(values)


def parse_example(record: bytes) -> dict[str, np.ndarray | list[bytes]]:
    """One Example as name -> values."""
    return {k: decode_list(kind, p) for k, (kind, p) in example_features(record).items()}


# The reference's features are the ones the TFRecord export writes: one list, in schemas.
REFERENCE_FEATURES = FEATURES


def read_reference(paths: Sequence[str], limit: int = 0) -> dict[str, np.ndarray]:
    """The reference's features as 2-D arrays (rows x width), from its TFRecord files.

    Int64 lists are decoded in one vectorised pass per feature (the fast path: each list one
    packed field, as TensorFlow writes them); `limit` > 0 reads that many records (the
    reference shuffles its instances before writing, so the first ones are a random sample).
    """
    raw: dict[str, list[bytes]] = {k: [] for k in REFERENCE_FEATURES}
    n = 0
    for path in paths:
        for record in iter_records(path):
            feats = example_features(record)
            for k in REFERENCE_FEATURES:
                raw[k].append(feats[k][1])
            n += 1
            if limit and n >= limit:
                break
        if limit and n >= limit:
            break
    out = {}
    for k, payloads in raw.items():
        kind = "float" if k == "masked_lm_weights" else "int64"
        out[k] = _decode_rows(kind, payloads)
    return out


def _decode_rows(kind: str, payloads: list[bytes]) -> np.ndarray:
    """Equal-width lists of many records as one 2-D array."""
    if not payloads:
        return np.zeros((0, 0), np.int64 if kind == "int64" else np.float32)
    fast = all(p[:1] == b"\x0a" for p in payloads)
    if fast:
        bodies = []
        for p in payloads:
            size, pos = _varint(p, 1)
            if pos + size != len(p):
                fast = False
                break
            bodies.append(p[pos:])
    if fast:
        joined = b"".join(bodies)
        values = decode_varints(joined) if kind == "int64" else np.frombuffer(joined, "<f4")
    else:
        values = np.concatenate([decode_list(kind, p) for p in payloads])
    if len(values) % len(payloads):
        raise ValueError("records hold lists of different lengths")
    return values.reshape(len(payloads), -1)
