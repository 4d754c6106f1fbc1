"""MDS, the format of MosaicML's `streaming` (`StreamingDataset(local=DEST)`), written without
`streaming` (which needs torch).

The bytes are those `streaming.MDSWriter` (version 2, no compression, no hashes) writes for the
same samples: shards `shard.00000.mds`, ... of at most `size_limit` bytes, each a sample count
(uint32), the samples' byte offsets (uint32, count + 1), the writer's config as JSON and the
samples; and `index.json` listing them. A sample holds the row unpadded, one column each:

    input_ids             ndarray:uint16|uint32   [CLS] A [SEP] B [SEP] after masking
    segment_ids           ndarray:uint8           0 for [CLS] A [SEP], 1 for B [SEP]
    masked_lm_positions   ndarray:uint16          ascending positions in the row
    masked_lm_ids         ndarray:uint16|uint32   the original ids at those positions
    next_sentence_labels  int                     1 when B is from another document

(ids keep the set's own id type). A sample starts with the byte sizes (uint32) of its
variable-size columns; an ndarray of one dimension is a byte `4 | shape type`, its length
(uint8 below 256, else uint16) and its values, little-endian.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from schemas.export.dest import Dest, RemoteDest, Written
from schemas.shard import ShardColumns

INDEX_NAME = "index.json"
DEFAULT_SIZE_LIMIT = 1 << 26  # MDSWriter's default: 64 MiB
MAX_SIZE_LIMIT = (1 << 32) - 1  # sample offsets are uint32
SAMPLE_EXTRA = 4  # MDSWriter counts one offset per sample against the limit


def encodings(id_dtype: str) -> dict[str, str]:
    """The columns and their MDS encodings, in MDSWriter's (sorted) order."""
    return {
        "input_ids": f"ndarray:{id_dtype}",
        "masked_lm_ids": f"ndarray:{id_dtype}",
        "masked_lm_positions": "ndarray:uint16",
        "next_sentence_labels": "int",
        "segment_ids": "ndarray:uint8",
    }


def _shape_prefix(length: int) -> bytes:
    """An NDArray's dtype-less header for one dimension of `length` (> 0)."""
    if length < 1 << 8:
        return bytes([1 << 2 | 0, length])
    return bytes([1 << 2 | 1]) + struct.pack("<H", length)


def max_sample_bytes(max_seq_length: int, max_predictions_per_seq: int, id_size: int = 4) -> int:
    """The largest sample a set of these widths can give."""
    heads = 4 * 4 + 8  # the variable columns' sizes, the label
    shapes = 4 * 3  # per array: a byte and a uint16 length
    seq, preds = max_seq_length * (id_size + 1), max_predictions_per_seq * (id_size + 2)
    return heads + shapes + seq + preds


class MDSWriter:
    """Rows into MDS shards of at most `size_limit` bytes, across the set's shards."""

    def __init__(
        self, dest: Dest | RemoteDest, id_dtype: str, size_limit: int = DEFAULT_SIZE_LIMIT
    ):
        self.dest = dest
        self.size_limit = size_limit
        columns = encodings(id_dtype)
        self.config = {
            "version": 2,
            "format": "mds",
            "compression": None,
            "hashes": [],
            "size_limit": size_limit,
            "column_names": list(columns),
            "column_encodings": list(columns.values()),
            "column_sizes": [8 if e == "int" else None for e in columns.values()],
        }
        self.config_data = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self.shards: list[dict] = []
        self.written: list[Written] = []
        self._reset()

    def _reset(self) -> None:
        self.samples: list[bytes] = []
        self.size = 4 + 4 + len(self.config_data)  # as MDSWriter counts a shard's extra bytes

    def add(self, columns: ShardColumns) -> None:
        """Append a block's rows."""
        for sample in _samples(columns):
            size = len(sample) + SAMPLE_EXTRA
            if self.size_limit < self.size + size:
                self._flush()
            self.samples.append(sample)
            self.size += size

    def _flush(self) -> None:
        name = f"shard.{len(self.shards):05d}.mds"
        samples = self.samples
        sizes = np.array([0] + [len(s) for s in samples], np.int64)
        offsets = np.cumsum(sizes) + 4 + 4 * len(sizes) + len(self.config_data)
        head = np.uint32(len(samples)).tobytes() + offsets.astype("<u4").tobytes()

        def write(f) -> None:
            f.write(head)
            f.write(self.config_data)
            f.writelines(samples)

        written = self.dest.publish(name, len(samples), write)
        self.written.append(written)
        entry = {
            "samples": len(samples),
            "raw_data": {"basename": name, "bytes": written.bytes, "hashes": {}},
            "zip_data": None,
        }
        self.shards.append(entry | self.config)
        self._reset()

    def finish(self) -> tuple[list[Written], Written]:
        """Flush the last shard and write `index.json`; the shards written and the index."""
        if self.samples:
            self._flush()
        text = json.dumps({"version": 2, "shards": self.shards}, sort_keys=True)
        index = self.dest.publish(INDEX_NAME, 0, lambda f: f.write(text.encode("utf-8")))
        return self.written, index


def _samples(c: ShardColumns) -> list[bytes]:
    """The block's rows as MDS samples, in the column order above."""
    n = c.num_rows
    lengths = np.diff(c.input_offsets)
    preds = np.diff(c.masked_offsets)
    ids = c.input_ids.astype(c.input_ids.dtype.newbyteorder("<"), copy=False)
    labels = c.masked_labels.astype(ids.dtype, copy=False)
    positions = c.masked_positions.astype("<u2", copy=False)
    within = np.arange(len(ids)) - np.repeat(c.input_offsets[:-1], lengths)
    segments = (within >= np.repeat(c.segment_b_start.astype(np.int64), lengths)).astype(np.uint8)
    prefix = [b""] + [_shape_prefix(k) for k in range(1, int(max(lengths.max(initial=0), 1)) + 1)]
    prefix_len = np.array([len(p) for p in prefix], np.int64)
    isz = ids.dtype.itemsize
    heads = np.stack(
        [
            prefix_len[lengths] + lengths * isz,  # input_ids
            prefix_len[preds] + preds * isz,  # masked_lm_ids
            prefix_len[preds] + preds * 2,  # masked_lm_positions
            prefix_len[lengths] + lengths,  # segment_ids
        ],
        axis=1,
    ).astype("<u4")
    heads_b = heads.tobytes()
    nsp = c.is_random_next.astype("<i8").tobytes()
    ids_b, labels_b = ids.tobytes(), labels.tobytes()
    pos_b, seg_b = positions.tobytes(), segments.tobytes()
    off = c.input_offsets.tolist()
    moff = c.masked_offsets.tolist()
    out = []
    for i in range(n):
        a, b, m, e = off[i], off[i + 1], moff[i], moff[i + 1]
        pl, pp = prefix[b - a], prefix[e - m]
        out.append(
            b"".join(
                (
                    heads_b[16 * i : 16 * i + 16],
                    pl,
                    ids_b[a * isz : b * isz],
                    pp,
                    labels_b[m * isz : e * isz],
                    pp,
                    pos_b[2 * m : 2 * e],
                    nsp[8 * i : 8 * i + 8],
                    pl,
                    seg_b[a:b],
                )
            )
        )
    return out
