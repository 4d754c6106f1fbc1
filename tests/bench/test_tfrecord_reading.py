"""The bench's pure-Python TFRecord and Example reading (`bench/tfrecord.py`), on records
written here by hand: the frames' checksums, varints, every kind of feature packed and not, and
the reference's records read as shard columns. Nothing is installed and nothing is fetched."""

from __future__ import annotations

import pytest

from bench import tfrecord
from bench.reference import fidelity as fid
from tests.bench.helpers import (
    REF_ROWS,
    bytes_feature,
    example,
    float_feature,
    frame,
    int64_feature,
    varint,
    write_reference,
)

# --- TFRecord framing and the Example wire format ---------------------------------------------


def test_crc32c_known_value():
    assert tfrecord.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert tfrecord.crc32c(b"") == 0


def test_records_round_trip_with_checksums(tmp_path):
    path = tmp_path / "r.tfrecord"
    path.write_bytes(frame(b"first") + frame(b"") + frame(b"\x00" * 300))
    assert list(tfrecord.iter_records(str(path), check_crc=True)) == [b"first", b"", b"\x00" * 300]


def test_corrupt_and_truncated_records_are_refused(tmp_path):
    data = bytearray(frame(b"payload"))
    data[14] ^= 1  # a bit of the record flipped: its checksum no longer matches
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="CRC"):
        list(tfrecord.iter_records(str(path), check_crc=True))
    path.write_bytes(frame(b"payload")[:-6])
    with pytest.raises(ValueError, match="truncated"):
        list(tfrecord.iter_records(str(path)))


def test_varints_by_hand():
    assert varint(300) == b"\xac\x02"
    assert tfrecord.decode_varints(b"\x00\x01\xac\x02\x7f").tolist() == [0, 1, 300, 127]
    ten = b"\xff" * 9 + b"\x01"  # -1 as protobuf's int64
    assert tfrecord.decode_varints(ten + b"\x05").tolist() == [-1, 5]
    assert tfrecord.decode_varints(varint(2**62 + 3)).tolist() == [2**62 + 3]
    with pytest.raises(ValueError, match="truncated"):
        tfrecord.decode_varints(b"\x80")


def test_example_hand_built_bytes():
    # Example{features{feature{key:"n" value{int64_list{value:[1, 300]}}}}}, written out.
    record = bytes.fromhex("0a0e0a0c0a016e12071a050a0301ac02")
    assert {k: v.tolist() for k, v in tfrecord.parse_example(record).items()} == {"n": [1, 300]}


def test_example_all_kinds_packed_and_not():
    record = example(
        {
            "packed": int64_feature([3, -2, 2**40]),
            "unpacked": int64_feature([7, -1], packed=False),
            "f": float_feature([0.5, -1.25]),
            "b": bytes_feature([b"x", b""]),
            "empty": int64_feature([]),
        }
    )
    got = tfrecord.parse_example(record)
    assert got["packed"].tolist() == [3, -2, 2**40]
    assert got["unpacked"].tolist() == [7, -1]
    assert got["f"].tolist() == [0.5, -1.25]
    assert got["b"] == [b"x", b""]
    assert got["empty"].tolist() == []


def test_reference_records_become_shard_columns(tmp_path):
    path = write_reference(tmp_path / "ref.tfrecord")
    features = tfrecord.read_reference([path])
    assert features["input_ids"].shape == (2, 16)
    assert features["masked_lm_weights"].shape == (2, 4)
    cols = fid.reference_columns(features)
    assert cols.num_rows == 2
    assert cols.input_offsets.tolist() == [0, 7, 13]
    assert cols.input_ids.tolist() == REF_ROWS[0]["ids"] + REF_ROWS[1]["ids"]
    assert cols.segment_b_start.tolist() == [4, 4]
    assert cols.masked_positions.tolist() == [1, 4, 2]
    assert cols.masked_labels.tolist() == [10, 13, 12]
    assert cols.masked_offsets.tolist() == [0, 2, 3]
    assert cols.is_random_next.tolist() == [False, True]
    assert tfrecord.read_reference([path], limit=1)["input_ids"].shape == (1, 16)
