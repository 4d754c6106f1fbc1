"""Exports read back by each trainer's own reader equal the Arrow rows, row by row.

- HDF5: the reader of NVIDIA DeepLearningExamples' PyTorch BERT (`pretraining_dataset` in its
  `run_pretraining.py`), mirrored here on h5py: the files of `--input_dir` whose name holds
  `training`, sorted; every dataset read whole; the masked labels scattered up to the first 0
  position.
- TFRecord: the project's pure-Python reader (`bench/tfrecord.py`), both checksums of every frame
  checked against a table CRC-32C; TensorFlow's own reader runs in `make bench`
  (`bench/export_bench.py`), in the bench's environment.
- MDS: `streaming.StreamingDataset(local=DEST)` iterated whole, and the bytes `streaming`'s own
  `MDSWriter` writes for the same samples.

The expected rows come from the Arrow shards through `to_pylist`, a plain loop per row, not
through the export's code.
"""

from __future__ import annotations

import json
import os
import sys
import types

import numpy as np
import pytest

from bench import tfrecord as tfr
from schemas.export.run import ExportOptions, export
from schemas.reader import ShardSet


def expected_rows(out: str) -> list[dict]:
    """Every row of the set, in shard order, in the fixed-length layout of Google's BERT."""
    ss = ShardSet.open(out)
    seq, preds = ss.shard_config.max_seq_length, ss.shard_config.max_predictions_per_seq
    rows = []
    for i in range(len(ss)):
        for r in ss.table(i).to_pylist():
            n, k, b = len(r["input_ids"]), len(r["masked_positions"]), r["segment_b_start"]
            rows.append(
                {
                    "ids": r["input_ids"],
                    "segment_b_start": b,
                    "positions": r["masked_positions"],
                    "labels": r["masked_labels"],
                    "nsp": int(r["is_random_next"]),
                    "input_ids": r["input_ids"] + [0] * (seq - n),
                    "input_mask": [1] * n + [0] * (seq - n),
                    "segment_ids": [0] * b + [1] * (n - b) + [0] * (seq - n),
                    "masked_lm_positions": r["masked_positions"] + [0] * (preds - k),
                    "masked_lm_ids": r["masked_labels"] + [0] * (preds - k),
                    "masked_lm_weights": [1.0] * k + [0.0] * (preds - k),
                }
            )
    return rows


@pytest.fixture(scope="module")
def wide_shards(tmp_path_factory) -> str:
    """A small synthetic set whose vocab needs uint32 ids (and 3-byte varints)."""
    from schemas.synthetic import SyntheticConfig, write_synthetic_set

    out = str(tmp_path_factory.mktemp("wide") / "out")
    write_synthetic_set(out, SyntheticConfig(rows=400, shards=2, vocab_size=70_000, seed=3))
    return out


@pytest.fixture(scope="module", params=["synthetic", "pipeline", "wide"])
def source(request) -> tuple[str, list[dict]]:
    name = {"pipeline": "sample_shards", "synthetic": "synthetic_shards", "wide": "wide_shards"}
    out = request.getfixturevalue(name[request.param])
    return out, expected_rows(out)


@pytest.fixture(scope="module")
def exported(source, tmp_path_factory):
    """The source exported to each format once: format -> DEST."""
    out, _ = source
    root = tmp_path_factory.mktemp("export")
    dests = {}
    for fmt in ("hdf5", "tfrecord", "mds"):
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


def test_hdf5_read_by_the_dle_reader_equals_the_rows(source, exported):
    out, rows = source
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


# --- TFRecord: framing and Examples, checked without TensorFlow ------------------------------


def tfrecord_files(dest: str) -> list[str]:
    return sorted(os.path.join(dest, f) for f in os.listdir(dest) if f.endswith(".tfrecord"))


def test_tfrecord_examples_equal_the_rows_and_every_checksum_holds(source, exported):
    out, rows = source
    seq = ShardSet.open(out).shard_config.max_seq_length
    records = [r for p in tfrecord_files(exported["tfrecord"]) for r in tfr.iter_records(p, True)]
    assert len(records) == len(rows)
    for record, row in zip(records, rows, strict=True):
        ex = tfr.parse_example(record)
        assert set(ex) == set(tfr.REFERENCE_FEATURES)
        for name in ("input_ids", "input_mask", "segment_ids"):
            assert ex[name].tolist() == row[name], name
            assert len(ex[name]) == seq
        for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
            assert ex[name].tolist() == row[name], name
        assert ex["next_sentence_labels"].tolist() == [row["nsp"]]


def test_tfrecord_fast_reader_agrees(source, exported):
    _, rows = source
    got = tfr.read_reference(tfrecord_files(exported["tfrecord"]))
    assert got["input_ids"].tolist() == [r["input_ids"] for r in rows]
    assert got["masked_lm_weights"].tolist() == [r["masked_lm_weights"] for r in rows]


def test_masked_crc32c_is_the_table_crc():
    from schemas.export.tfrecord import masked_crc32c, varint, varints

    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 100, 4097):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert masked_crc32c(data) == tfr.masked_crc32c(data)
    values = np.array([[0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**28, 2**32 - 1]])
    data, sizes = varints(values)
    assert data == b"".join(varint(int(v)) for v in values[0])
    assert sizes.tolist() == [len(data)]
    assert tfr.decode_varints(data).tolist() == values[0].tolist()


# --- MDS: MosaicML streaming ---------------------------------------------------------------


def import_streaming():
    """`streaming`, its package importing its vision datasets (torchvision) on the way in. No
    CPU build of torchvision for this torch is on PyPI, so an empty `streaming.vision` stands in;
    the reader under test (`streaming.base`) does not use it."""
    if "streaming" not in sys.modules:
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import streaming

    return streaming


def test_mds_read_by_streaming_dataset_equals_the_rows(source, exported, tmp_path):
    streaming = import_streaming()
    _, rows = source
    ds = streaming.StreamingDataset(
        local=exported["mds"], shuffle=False, batch_size=1, replication=None
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


def test_mds_bytes_are_those_of_streamings_mdswriter(source, exported, tmp_path):
    streaming = import_streaming()
    out, rows = source
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


# --- the bench's side of TensorFlow's check ---------------------------------------------------


def test_the_benchs_expected_rows_are_the_exported_records(source, exported, tmp_path):
    """`make bench` compares TensorFlow's reading with `export_bench.expected`: that oracle
    equals the records as the project's reader reads them (dtypes as TF hands them over)."""
    from bench import export_bench

    out, _ = source
    want = export_bench.expected(out)
    got = tfr.read_reference(tfrecord_files(exported["tfrecord"]))
    for name, values in want.items():
        assert np.array_equal(got[name].astype(values.dtype), values), name
    row = export_bench.tf_parity(str(tmp_path / "no-data"), out, exported["tfrecord"], "")
    assert row["value"] == "not run" and "bench-env" in row["note"]
