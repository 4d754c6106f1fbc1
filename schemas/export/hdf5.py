"""HDF5 files as NVIDIA DeepLearningExamples' PyTorch BERT reads them (`pretraining_dataset` in
its `run_pretraining.py`).

Each file holds six datasets, one row per instance, with the dtypes of DeepLearningExamples' own
`create_pretraining_data.py` and gzip compression: `input_ids`, `input_mask`, `segment_ids`
(rows x max_seq_length), `masked_lm_positions`, `masked_lm_ids` (rows x max_predictions_per_seq,
0 after the last prediction: the reader takes the first 0 position as the end) and
`next_sentence_labels` (rows). The trainer lists `--input_dir` and reads every file whose name
contains `training`, a whole file at a time: one file per shard of the set,
`training-00000-of-00004.hdf5`. Chunks are a block of rows, written whole, and no timestamps are
stored, so the same set gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

import numpy as np

from schemas.export.rows import SEQ_FEATURES, Padded

SUFFIX = ".hdf5"
# DeepLearningExamples writes gzip at h5py's default level (4) without HDF5's byte shuffle; with
# the shuffle, level 1 writes files faster and still smaller (measured on kernel-docs shards:
# docs/benchmarks.md, "Export"). Both are HDF5's built-in filters: every h5py reads them.
GZIP_LEVEL = 1
# name -> dtype, as DeepLearningExamples writes them; True when the dataset is 2-D.
DATASETS = {
    "input_ids": ("i4", True),
    "input_mask": ("i1", True),
    "segment_ids": ("i1", True),
    "masked_lm_positions": ("i4", True),
    "masked_lm_ids": ("i4", True),
    "next_sentence_labels": ("i1", False),
}


def h5py_module():
    """h5py, the one library HDF5 needs (the `export` extra; Beam's workers never install it)."""
    try:
        import h5py
    except ImportError:
        raise ImportError(
            "--format hdf5 needs h5py, which is not installed; install it with "
            "pip install 'bert-shards[export]' (or pip install h5py)"
        ) from None
    return h5py


def fields(max_seq_length: int, max_predictions_per_seq: int) -> dict[str, str]:
    """Each dataset's type and shape."""
    out = {}
    for name, (dtype, two_d) in DATASETS.items():
        width = max_seq_length if name in SEQ_FEATURES else max_predictions_per_seq
        out[name] = f"{np.dtype(dtype).name}[rows{f', {width}' if two_d else ''}]"
    return out


class HDF5Writer:
    """One HDF5 file per shard of the set."""

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, block_rows: int):
        self.widths = {
            name: max_seq_length if name in SEQ_FEATURES else max_predictions_per_seq
            for name, (_, two_d) in DATASETS.items()
            if two_d
        }
        self.block_rows = block_rows

    def file_name(self, index: int, total: int) -> str:
        return f"training-{index:05d}-of-{total:05d}{SUFFIX}"

    def write_shard(self, f: BinaryIO, rows: int, blocks: Iterable[Padded]) -> None:
        with h5py_module().File(f, "w") as h5:
            chunk = min(rows, self.block_rows)
            datasets = {}
            for name, (dtype, two_d) in DATASETS.items():
                shape = (rows, self.widths[name]) if two_d else (rows,)
                datasets[name] = h5.create_dataset(
                    name,
                    shape=shape,
                    dtype=dtype,
                    chunks=(chunk, *shape[1:]),
                    compression="gzip",
                    compression_opts=GZIP_LEVEL,
                    shuffle=True,
                    track_times=False,
                )
            at = 0
            for block in blocks:
                end = at + block.num_rows
                for name, ds in datasets.items():
                    ds[at:end] = getattr(block, name)
                at = end
            if at != rows:
                raise ValueError(f"{rows} rows listed, {at} read")
