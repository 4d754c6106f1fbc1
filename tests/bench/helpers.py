"""Records written by hand, as the reference writes them, for the bench's tests: a minimal
protobuf writer (varints, Example features, TFRecord frames) and two reference rows."""

from __future__ import annotations

import struct

from bench import tfrecord


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64: ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def int64_feature(values, packed: bool = True) -> bytes:
    if packed:
        body = field(1, b"".join(varint(v) for v in values))
    else:
        body = b"".join(varint(1 << 3 | 0) + varint(v) for v in values)
    return field(3, body)


def float_feature(values) -> bytes:
    return field(2, field(1, struct.pack(f"<{len(values)}f", *values)))


def bytes_feature(values) -> bytes:
    return field(1, b"".join(field(1, v) for v in values))


def example(features: dict[str, bytes]) -> bytes:
    entries = b"".join(field(1, field(1, k.encode()) + field(2, v)) for k, v in features.items())
    return field(1, entries)


def frame(record: bytes) -> bytes:
    header = struct.pack("<Q", len(record))
    return (
        header
        + struct.pack("<I", tfrecord.masked_crc32c(header))
        + record
        + struct.pack("<I", tfrecord.masked_crc32c(record))
    )


def reference_record(ids, segment_b_start, positions, labels, random_next, seq=16, preds=4):
    """One record as the reference writes it: padded to seq and preds, weights 1.0 then 0.0."""
    n, k = len(ids), len(positions)
    return example(
        {
            "input_ids": int64_feature(list(ids) + [0] * (seq - n)),
            "input_mask": int64_feature([1] * n + [0] * (seq - n)),
            "segment_ids": int64_feature(
                [0] * segment_b_start + [1] * (n - segment_b_start) + [0] * (seq - n)
            ),
            "masked_lm_positions": int64_feature(list(positions) + [0] * (preds - k)),
            "masked_lm_ids": int64_feature(list(labels) + [0] * (preds - k)),
            "masked_lm_weights": float_feature([1.0] * k + [0.0] * (preds - k)),
            "next_sentence_labels": int64_feature([int(random_next)]),
        }
    )


REF_ROWS = [
    # ids: [CLS]=2 A [SEP]=3 B [SEP]; [MASK]=4; row 0 masks pos 1 ([MASK]) and 4 (kept)
    dict(
        ids=[2, 4, 11, 3, 13, 14, 3],
        segment_b_start=4,
        positions=[1, 4],
        labels=[10, 13],
        random_next=False,
    ),
    # row 1 masks pos 2 with another piece (20 for 12)
    dict(
        ids=[2, 11, 20, 3, 15, 3], segment_b_start=4, positions=[2], labels=[12], random_next=True
    ),
]


def write_reference(path, rows=REF_ROWS):
    path.write_bytes(b"".join(frame(reference_record(**r)) for r in rows))
    return str(path)
