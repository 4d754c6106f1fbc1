"""Exports read back by each trainer's own reader equal the Arrow rows, row by row.

- HDF5: the reader of NVIDIA DeepLearningExamples' PyTorch BERT (`pretraining_dataset` in its
  `run_pretraining.py`), mirrored here on h5py: the files of `--input_dir` whose name holds
  `training`, sorted; every dataset read whole; the masked labels scattered up to the first 0
  position.
- TFRecord: tests/bench/test_export_tfrecord.py, read by the bench's pure-Python reader (the
  one that reads the reference's records); TensorFlow's own reader runs in `make bench`.
- MDS: `streaming.StreamingDataset(local=DEST)` iterated whole, and the bytes `streaming`'s own
  `MDSWriter` writes for the same samples.

The expected rows come from the Arrow shards through `to_pylist`, a plain loop per row, not
through the export's code (tests/helpers.py's `expected_rows`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types

import numpy as np
import pytest

from schemas.export.run import ExportOptions, export
from schemas.reader import ShardSet


@pytest.fixture(scope="module")
def exported(export_source, tmp_path_factory):
    """The source exported to HDF5 and MDS once: format -> DEST."""
    out, _ = export_source
    root = tmp_path_factory.mktemp("export")
    dests = {}
    for fmt in ("hdf5", "mds"):
        dests[fmt] = str(root / fmt)
        export(out, dests[fmt], ExportOptions(fmt, mds_size_limit=300_000))
    return dests


# --- HDF5: DeepLearningExamples' pretraining_dataset -----------------------------------------

DLE_KEYS = [
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "next_sentence_labels",
]


def dle_items(input_dir: str, max_pred_length: int):
    """What `pretraining_dataset.__getitem__` returns for every index of every file the trainer
    reads, in file order: input_ids, segment_ids, input_mask, masked_lm_labels, next_sentence_labels
    (numpy here where the trainer makes torch tensors of the same int64 values)."""
    import h5py

    files = sorted(
        os.path.join(input_dir, f)
        for f in os.listdir(input_dir)
        if os.path.isfile(os.path.join(input_dir, f)) and "training" in f
    )
    for path in files:
        f = h5py.File(path, "r")
        inputs = [np.asarray(f[key][:]) for key in DLE_KEYS]
        f.close()
        for index in range(len(inputs[0])):
            input_ids, input_mask, segment_ids, positions, ids, nsp = (
                np.asarray(x[index].astype(np.int64)) for x in inputs
            )
            masked_lm_labels = np.ones(input_ids.shape, dtype=np.int64) * -1
            end = max_pred_length
            padded = np.flatnonzero(positions == 0)
            if len(padded) != 0:
                end = padded[0]
            masked_lm_labels[positions[:end]] = ids[:end]
            yield input_ids, segment_ids, input_mask, masked_lm_labels, nsp


def test_hdf5_read_by_the_dle_reader_equals_the_rows(export_source, exported):
    out, rows = export_source
    preds = ShardSet.open(out).shard_config.max_predictions_per_seq
    items = list(dle_items(exported["hdf5"], preds))
    assert len(items) == len(rows)
    for (input_ids, segment_ids, input_mask, labels, nsp), row in zip(items, rows, strict=True):
        assert input_ids.tolist() == row["input_ids"]
        assert segment_ids.tolist() == row["segment_ids"]
        assert input_mask.tolist() == row["input_mask"]
        want = [-1] * len(row["input_ids"])
        for p, label in zip(row["positions"], row["labels"], strict=True):
            want[p] = label
        assert labels.tolist() == want
        assert int(nsp) == row["nsp"]


def test_hdf5_datasets_have_dles_types_and_compression(exported):
    import h5py

    dtypes = {"input_ids": "i4", "input_mask": "i1", "segment_ids": "i1"}
    dtypes |= {"masked_lm_positions": "i4", "masked_lm_ids": "i4", "next_sentence_labels": "i1"}
    first = sorted(n for n in os.listdir(exported["hdf5"]) if n.endswith(".hdf5"))[0]
    with h5py.File(os.path.join(exported["hdf5"], first), "r") as f:
        assert sorted(f.keys()) == sorted(dtypes)
        for name, dtype in dtypes.items():
            assert f[name].dtype == np.dtype(dtype), name
            assert f[name].compression == "gzip"


# --- MDS: MosaicML streaming ---------------------------------------------------------------


def import_streaming():
    """`streaming`, its package importing its vision datasets (torchvision) on the way in. No
    CPU build of torchvision for this torch is on PyPI, so an empty `streaming.vision` stands in;
    the reader under test (`streaming.base`) does not use it."""
    if "streaming" not in sys.modules:
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import streaming

    return streaming


def test_mds_read_by_streaming_dataset_equals_the_rows(
    export_source, exported, tmp_path, monkeypatch
):
    streaming = import_streaming()
    # the dataset's lock files go to the temporary folder and outlive it: tmp_path, not /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _, rows = export_source
    # predownload: how far the reader's thread may run ahead of the iteration (8 samples by
    # default, then it sleeps 7 ms; the whole set iterates much faster: docs/benchmarks.md,
    # "Figures moved from other pages and from code comments")
    ds = streaming.StreamingDataset(
        local=exported["mds"],
        shuffle=False,
        batch_size=1,
        replication=None,
        predownload=len(rows),
    )
    assert len(ds) == len(rows)
    samples = [ds[i] for i in range(len(ds))]
    iterated = list(ds)
    assert len(iterated) == len(rows)
    key = lambda s: (s["input_ids"].tobytes(), s["masked_lm_positions"].tobytes())  # noqa: E731
    assert sorted(map(key, iterated)) == sorted(map(key, samples))
    for sample, row in zip(samples, rows, strict=True):
        assert sample["input_ids"].tolist() == row["ids"]
        b = row["segment_b_start"]
        assert sample["segment_ids"].tolist() == [0] * b + [1] * (len(row["ids"]) - b)
        assert sample["masked_lm_positions"].tolist() == row["positions"]
        assert sample["masked_lm_ids"].tolist() == row["labels"]
        assert sample["next_sentence_labels"] == row["nsp"]


def test_mds_bytes_are_those_of_streamings_mdswriter(export_source, exported, tmp_path):
    streaming = import_streaming()
    out, rows = export_source
    with open(os.path.join(exported["mds"], "index.json")) as f:
        first = json.load(f)["shards"][0]
    columns = dict(zip(first["column_names"], first["column_encodings"], strict=True))
    id_type = columns["input_ids"].split(":")[1]
    assert id_type == str(ShardSet.open(out).table(0).column("input_ids").type.value_type)
    theirs = str(tmp_path / "mdswriter")
    with streaming.MDSWriter(out=theirs, columns=columns, size_limit=300_000) as w:
        for row in rows:
            b, n = row["segment_b_start"], len(row["ids"])
            w.write(
                {
                    "input_ids": np.array(row["ids"], id_type),
                    "segment_ids": np.array([0] * b + [1] * (n - b), np.uint8),
                    "masked_lm_positions": np.array(row["positions"], np.uint16),
                    "masked_lm_ids": np.array(row["labels"], id_type),
                    "next_sentence_labels": row["nsp"],
                }
            )
    names = sorted(os.listdir(theirs))
    assert "index.json" in names and len(names) >= 2
    assert len(names) > 2 or len(rows) < 1000  # the larger sets fill several 300 kB shards
    for name in names:
        with open(os.path.join(theirs, name), "rb") as a:
            with open(os.path.join(exported["mds"], name), "rb") as b:
                assert a.read() == b.read(), name
