"""A block of a shard's rows in the fixed-length layout Google's BERT scripts made standard.

Google's `create_pretraining_data.py` pads every row to `max_seq_length` with 0 (`input_ids`,
`input_mask`, `segment_ids`) and every prediction list to `max_predictions_per_seq` with 0
(`masked_lm_positions`, `masked_lm_ids`; `masked_lm_weights` 1.0 for a real prediction, 0.0 for
padding). Position 0 is `[CLS]`, never masked, so a 0 after the last position marks padding (the
rule DeepLearningExamples' HDF5 reader relies on). The HDF5 and TFRecord writers both take this
block; the MDS writer reads the unpadded rows (`ShardColumns`) instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schemas.shard import ShardColumns

# The fixed-length features, in the order of Google's run_pretraining.py input_fn.
FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)
SEQ_FEATURES = ("input_ids", "input_mask", "segment_ids")  # max_seq_length wide


@dataclass(frozen=True)
class Padded:
    """Rows padded to fixed widths: 2-D arrays (rows x width), int32 unless said otherwise."""

    input_ids: np.ndarray  # (n, max_seq_length), 0 after the row
    input_mask: np.ndarray  # (n, max_seq_length) int8, 1 on the row, 0 after it
    segment_ids: np.ndarray  # (n, max_seq_length) int8, 0 for [CLS] A [SEP], 1 for B [SEP], 0 after
    masked_lm_positions: np.ndarray  # (n, max_predictions_per_seq), 0 after the last
    masked_lm_ids: np.ndarray  # (n, max_predictions_per_seq), 0 after the last
    masked_lm_weights: np.ndarray  # (n, max_predictions_per_seq) float32, 1.0 then 0.0
    next_sentence_labels: np.ndarray  # (n,) int8, 1 when B is from another document
    lengths: np.ndarray  # (n,) int64, the row lengths (not a feature)
    predictions: np.ndarray  # (n,) int64, masked positions per row (not a feature)

    @property
    def num_rows(self) -> int:
        return len(self.lengths)


def _spread(values: np.ndarray, cells: np.ndarray, dtype) -> np.ndarray:
    """Rows of a flat list column in a zero-filled array shaped as `cells`, the cells each row
    fills: taken in row-major order, they are the values laid end to end."""
    out = np.zeros(cells.shape, dtype=dtype)
    out[cells] = values
    return out


def pad(columns: ShardColumns, max_seq_length: int, max_predictions_per_seq: int) -> Padded:
    """`columns`' rows padded to the set's widths; ValueError (one line) when a row is longer
    than `max_seq_length` or has more predictions than `max_predictions_per_seq` (a set that
    passed validation never has)."""
    lengths = np.diff(columns.input_offsets)
    predictions = np.diff(columns.masked_offsets)
    if len(lengths) and (lengths.max() > max_seq_length):
        raise ValueError(f"a row of {lengths.max()} pieces is longer than max_seq_length")
    if len(predictions) and predictions.max() > max_predictions_per_seq:
        raise ValueError(
            f"a row of {predictions.max()} predictions has more than max_predictions_per_seq"
        )
    on_row = np.arange(max_seq_length)[None, :] < lengths[:, None]
    segment_b = np.arange(max_seq_length)[None, :] >= columns.segment_b_start[:, None]
    predicted = np.arange(max_predictions_per_seq)[None, :] < predictions[:, None]
    return Padded(
        input_ids=_spread(columns.input_ids, on_row, np.int32),
        input_mask=on_row.astype(np.int8),
        segment_ids=(on_row & segment_b).astype(np.int8),
        masked_lm_positions=_spread(columns.masked_positions, predicted, np.int32),
        masked_lm_ids=_spread(columns.masked_labels, predicted, np.int32),
        masked_lm_weights=predicted.astype(np.float32),
        next_sentence_labels=columns.is_random_next.astype(np.int8),
        lengths=lengths,
        predictions=predictions,
    )
