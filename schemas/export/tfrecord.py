"""TFRecord files of `tf.train.Example`s, as Google's `run_pretraining.py` reads them, without
TensorFlow.

A TFRecord file is a run of frames: the record's length (uint64, little-endian), the masked
CRC-32C of those 8 bytes, the record, the masked CRC-32C of the record. Each record here is an
Example with the seven features of `run_pretraining.py`'s `input_fn`, every one fixed length:

    Example  { features = 1: Features }
    Features { feature  = 1: map<string, Feature> }     (entries: key = 1, value = 2)
    Feature  { float_list = 2: FloatList | int64_list = 3: Int64List }
    Int64List / FloatList { value = 1, packed }

A block of rows is encoded at once with numpy: every row's frame is a row of byte slots (the
varints of each value, each feature's entry head looked up by its payload's size, the frame's
length), and one boolean selection keeps the slots that hold bytes; per row only the two
checksums are Python calls. One file per shard of the set,
`training-00000-of-00004.tfrecord`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

import google_crc32c
import numpy as np

from schemas.export.rows import FEATURES, SEQ_FEATURES, Padded

SUFFIX = ".tfrecord"
FLOAT_FEATURES = {"masked_lm_weights"}
_MASK_DELTA = 0xA282EAD8


def fields(max_seq_length: int, max_predictions_per_seq: int) -> dict[str, str]:
    """Each feature's type and length, as run_pretraining.py's `name_to_features` has them."""
    out = {}
    for name in FEATURES:
        width = max_seq_length if name in SEQ_FEATURES else max_predictions_per_seq
        width = 1 if name == "next_sentence_labels" else width
        out[name] = f"{'float32' if name in FLOAT_FEATURES else 'int64'}[{width}]"
    return out


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


def _varint_slots(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Non-negative int values (rows x width, below 2**63) as packed varints, in slots: a
    (rows x width * k) byte array, k the most bytes a value needs, the slots a value uses marked
    in the second array (None when every slot is used), and each row's byte count."""
    v = values.reshape(len(values), -1)
    n, w = v.shape
    top = int(v.max()) if v.size else 0
    if top < 0x80:  # one byte each: the values themselves (masks, segments, labels)
        return v.astype(np.uint8), None, np.full(n, w, np.int64)
    v = v.astype(np.uint64 if top >> 32 else np.uint32)
    width = (top.bit_length() + 6) // 7
    nbytes = np.ones(v.shape, np.uint8)
    for k in range(1, width):
        nbytes += v >= (1 << (7 * k))
    groups = np.empty((n, w, width), np.uint8)
    for k in range(width):
        more = (nbytes > k + 1).astype(np.uint8) << 7
        groups[..., k] = ((v >> (7 * k)) & 0x7F).astype(np.uint8) | more
    keep = np.arange(width)[None, None, :] < nbytes[:, :, None]
    return groups.reshape(n, -1), keep.reshape(n, -1), nbytes.sum(axis=1, dtype=np.int64)


def varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Non-negative int values (rows x width) as packed varints: the bytes of every row laid end
    to end, and each row's byte count."""
    slots, keep, sizes = _varint_slots(values)
    return (slots if keep is None else slots[keep]).tobytes(), sizes


def _head(kind: bytes, key: bytes, payload: int) -> bytes:
    """A feature's map entry up to its packed values, for values of `payload` bytes."""
    values = b"\x0a" + varint(payload)  # the list's packed `value` field
    feature = kind + varint(len(values) + payload)
    inner = len(feature) + len(values) + payload
    head = b"\x0a" + varint(len(key) + 1 + len(varint(inner)) + inner)
    return head + key + b"\x12" + varint(inner) + feature + values


class _Slots:
    """A block's frames as byte slots, one row of slots per record: each piece appended is a
    (rows x k) byte array and which of its slots hold bytes; `bytes()` keeps those, row by row,
    piece by piece (one boolean selection for the block)."""

    def __init__(self, rows: int):
        self.rows = rows
        self.slots: list[np.ndarray] = []
        self.keep: list[np.ndarray] = []
        self.sizes = np.zeros(rows, np.int64)  # bytes per row so far

    def add(self, slots: np.ndarray, keep: np.ndarray | None, sizes: np.ndarray | int) -> None:
        slots = np.broadcast_to(slots, (self.rows, slots.shape[-1]))
        self.slots.append(slots)
        self.keep.append(np.ones(slots.shape, bool) if keep is None else keep)
        self.sizes = self.sizes + sizes

    def array(self) -> np.ndarray:
        return np.concatenate(self.slots, axis=1)[np.concatenate(self.keep, axis=1)]


class TFRecordWriter:
    """One TFRecord file per shard of the set."""

    def __init__(self):
        self.keys = {name: b"\x0a" + varint(len(name)) + name.encode() for name in FEATURES}
        self.heads: dict[tuple[str, int], bytes] = {}

    def file_name(self, index: int, total: int) -> str:
        return f"training-{index:05d}-of-{total:05d}{SUFFIX}"

    def write_shard(self, f: BinaryIO, rows: int, blocks: Iterable[Padded]) -> None:
        for block in blocks:
            f.write(self.encode_block(block))

    def _head_slots(self, name: str, sizes: np.ndarray):
        """Each row's entry head for `name` (it depends on the payload's size), as slots."""
        kind = b"\x12" if name in FLOAT_FEATURES else b"\x1a"  # float_list=2, int64_list=3
        distinct, which = np.unique(sizes, return_inverse=True)
        heads = []
        for size in distinct.tolist():
            head = self.heads.get((name, size))
            if head is None:
                head = self.heads[(name, size)] = _head(kind, self.keys[name], size)
            heads.append(head)
        lengths = np.array([len(h) for h in heads], np.int64)
        table = np.zeros((len(heads), int(lengths.max())), np.uint8)
        for i, h in enumerate(heads):
            table[i, : len(h)] = np.frombuffer(h, np.uint8)
        keep = np.arange(table.shape[1])[None, :] < lengths[which][:, None]
        return table[which], keep, lengths[which]

    def encode_block(self, block: Padded) -> bytes:
        """A block's rows as framed Examples."""
        n = block.num_rows
        body = _Slots(n)
        for name in FEATURES:
            values = getattr(block, name)
            if name in FLOAT_FEATURES:
                payload = np.ascontiguousarray(values, "<f4").view(np.uint8).reshape(n, -1)
                slots, keep, sizes = payload, None, np.full(n, payload.shape[1], np.int64)
            else:
                slots, keep, sizes = _varint_slots(values)
            body.add(*self._head_slots(name, sizes))
            body.add(slots, keep, sizes)
        prefix, prefix_keep, prefix_sizes = _varint_slots(body.sizes[:, None])
        record_lengths = 1 + prefix_sizes + body.sizes
        frame = _Slots(n)
        frame.add(record_lengths.astype("<u8").view(np.uint8).reshape(n, 8), None, 8)
        frame.add(np.zeros((1, 4), np.uint8), None, 4)  # the length's CRC, set below
        frame.add(np.full((1, 1), 0x0A, np.uint8), None, 1)  # Example.features
        frame.add(prefix, prefix_keep, prefix_sizes)
        frame.slots += body.slots
        frame.keep += body.keep
        frame.add(np.zeros((1, 4), np.uint8), None, 4)  # the record's CRC, set below
        out = frame.array()
        _set_checksums(out, record_lengths)
        return out.tobytes()


def _set_checksums(frames: np.ndarray, record_lengths: np.ndarray) -> None:
    """Fill in both masked CRC-32Cs of each frame laid end to end in `frames` (bytes)."""
    n = len(record_lengths)
    starts = np.cumsum(record_lengths + 16) - (record_lengths + 16)
    data = frames.tobytes()
    value = google_crc32c.value
    header_crcs, cache = [], {}
    for s, length in zip(starts.tolist(), record_lengths.tolist(), strict=True):
        crc = cache.get(length)
        if crc is None:
            crc = cache[length] = value(data[s : s + 8])
        header_crcs.append(crc)
    record_crcs = [
        value(data[s + 12 : s + 12 + k])
        for s, k in zip(starts.tolist(), record_lengths.tolist(), strict=True)
    ]
    crcs = _mask(np.array([header_crcs, record_crcs], np.uint64)).astype("<u4")
    four = np.arange(4)[None, :]
    frames[(starts + 8)[:, None] + four] = crcs[0].view(np.uint8).reshape(n, 4)
    frames[(starts + 12 + record_lengths)[:, None] + four] = crcs[1].view(np.uint8).reshape(n, 4)


def _mask(crc: np.ndarray) -> np.ndarray:
    """`masked_crc32c`'s rotation and offset over an array of CRCs (uint64 holding uint32)."""
    rotated = ((crc >> np.uint64(15)) | (crc << np.uint64(17))) & np.uint64(0xFFFFFFFF)
    return (rotated + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)
