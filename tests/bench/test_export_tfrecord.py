"""The TFRecord export read back without TensorFlow, by the bench's pure-Python reader
(`bench/tfrecord.py`, which reads the reference's records too): both checksums of every frame
checked against a table CRC-32C, every Example equal to its Arrow row; and the oracle that
`make bench` holds TensorFlow's own reading against (`bench/export_bench.py`, run in the bench's
environment) equals those records. The expected rows are tests/helpers.py's `expected_rows`."""

from __future__ import annotations

import os

import numpy as np
import pytest

from bench import tfrecord as tfr
from schemas.export.run import ExportOptions, export
from schemas.reader import ShardSet


@pytest.fixture(scope="module")
def exported(export_source, tmp_path_factory) -> str:
    """The source exported to TFRecord once: its DEST."""
    out, _ = export_source
    dest = str(tmp_path_factory.mktemp("export") / "tfrecord")
    export(out, dest, ExportOptions("tfrecord"))
    return dest


def tfrecord_files(dest: str) -> list[str]:
    return sorted(os.path.join(dest, f) for f in os.listdir(dest) if f.endswith(".tfrecord"))


def test_tfrecord_examples_equal_the_rows_and_every_checksum_holds(export_source, exported):
    out, rows = export_source
    seq = ShardSet.open(out).shard_config.max_seq_length
    records = [r for p in tfrecord_files(exported) for r in tfr.iter_records(p, True)]
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


def test_tfrecord_fast_reader_agrees(export_source, exported):
    _, rows = export_source
    got = tfr.read_reference(tfrecord_files(exported))
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


def test_the_benchs_expected_rows_are_the_exported_records(export_source, exported, tmp_path):
    """`make bench` compares TensorFlow's reading with `export_bench.expected`: that oracle
    equals the records as the project's reader reads them (dtypes as TF hands them over)."""
    from bench import export_bench

    out, _ = export_source
    want = export_bench.expected(out)
    got = tfr.read_reference(tfrecord_files(exported))
    for name, values in want.items():
        assert np.array_equal(got[name].astype(values.dtype), values), name
    row = export_bench.tf_parity(out, exported, str(tmp_path), str(tmp_path / "no-env"))
    assert row["value"] == "not run" and str(tmp_path / "no-env") in row["note"]
