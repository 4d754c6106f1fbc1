"""A sound set passes; each way of breaking it fails with its own exact message.

Every test runs on two good sets: a synthetic one and the one the pipeline builds from the
bundled sample corpus. Each copies its set before breaking it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil

import numpy as np
import pytest

from schemas.manifest import read_manifest
from schemas.validate.run import validate
from schemas.vocab import Vocab
from tests.schemas.shard_surgery import (
    columns,
    copy_set,
    delete_token,
    edit_manifest,
    ids_buffer_offset,
    rewrite_shard,
    shard_file,
)

ROW = 5  # the row broken in row-level corruptions
SHARD = 1  # the shard broken


@pytest.fixture
def broken(good_shards, tmp_path) -> str:
    return copy_set(good_shards, str(tmp_path / "set"))


def failures(directory: str, key: str) -> list[str]:
    report = validate(directory)
    assert not report.ok
    check = report.check(key)
    assert check.status == "FAIL", report.to_text()
    return list(check.failures)


def test_untouched_set_passes(good_shards):
    report = validate(good_shards)
    assert report.ok, report.to_text()
    assert report.failures == []
    assert {c.status for c in report.checks} == {"pass"}
    assert report.rows == read_manifest(good_shards).rows


def test_truncated_shard(broken):
    entry = read_manifest(broken).shards[SHARD]
    path = shard_file(broken, SHARD)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    report = validate(broken)
    assert (
        f"{entry.path}: {size // 2:,} bytes, the manifest says {size:,}; the file was "
        "truncated or changed after the build" in report.check("integrity").failures
    )
    (line,) = report.check("arrow").failures
    assert line.startswith(f"{entry.path}: not a readable Arrow IPC file (")
    assert line.endswith(
        "the shard is truncated or corrupt: rebuild it (the other shards are still checked)"
    )
    # The other shards were still checked, row by row.
    assert report.rows == read_manifest(broken).rows - entry.rows
    assert report.check("cls_first").status == "pass"


def test_flipped_bytes_inside_a_buffer(broken):
    entry = read_manifest(broken).shards[SHARD]
    path = shard_file(broken, SHARD)
    at = ids_buffer_offset(path) + 3 * 2  # row 0, position 3 (uint16 ids)
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(2)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in old))
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert failures(broken, "integrity") == [
        f"{entry.path}: sha256 {digest[:12]}... differs from the manifest's "
        f"{entry.sha256[:12]}...; the file changed after it was written"
    ]
    flipped = int.from_bytes(old, "little") ^ 0xFFFF
    size = len(Vocab.load(os.path.join(broken, "vocab.txt")))
    assert (
        f"{entry.path} row 0: id {flipped} at position 3 is outside the vocab "
        f"({size:,} pieces)" in failures(broken, "ids_in_vocab")
    )


def test_deleted_shard(broken):
    entry = read_manifest(broken).shards[SHARD]
    os.remove(shard_file(broken, SHARD))
    assert failures(broken, "files") == [
        f"{entry.path}: listed in the manifest but missing; the set is incomplete: rebuild it"
    ]


def test_extra_shard(broken):
    shutil.copy(shard_file(broken, 0), os.path.join(broken, "shards", "train-00099-of-00099.arrow"))
    assert failures(broken, "files") == [
        "shards/train-00099-of-00099.arrow: not listed in the manifest; a leftover of another "
        "build? remove it or rebuild the set"
    ]


def test_manifest_row_count_off_by_one(broken):
    def off_by_one(m):
        shards = list(m.shards)
        shards[SHARD] = dataclasses.replace(shards[SHARD], rows=shards[SHARD].rows + 1)
        return dataclasses.replace(m, shards=tuple(shards))

    entry = edit_manifest(broken, off_by_one).shards[SHARD]
    assert failures(broken, "counts") == [
        f"{entry.path}: holds {entry.rows - 1:,} rows, the manifest says {entry.rows:,}"
    ]


def test_wrong_schema_version(broken):
    edit_manifest(broken, lambda m: dataclasses.replace(m, schema_version=2))
    assert failures(broken, "schema") == [
        "manifest.json: schema 'bert-pretraining-instances' version 2 is not the one this code "
        "reads ('bert-pretraining-instances' version 1); rebuild the shards with this version "
        "or validate them with the matching release"
    ]


def test_vocab_swapped_for_another(broken):
    path = os.path.join(broken, "vocab.txt")
    vocab = Vocab.load(path)
    ordinary = [i for i, s in enumerate(vocab.special_mask()) if not s]
    pieces = list(vocab.pieces)
    for i, j in zip(ordinary, reversed(ordinary), strict=True):  # same specials, other pieces
        pieces[i] = vocab.pieces[j]
    other = Vocab(tuple(pieces))
    with open(path, "w", encoding="utf-8") as f:
        f.write(other.to_text())
    lines = failures(broken, "vocab")
    assert lines[0] == (
        f"vocab.txt: sha256 {other.sha256[:12]}... differs from the manifest's "
        f"{vocab.sha256[:12]}...; the vocab was replaced after the build: restore the vocab "
        "the shards were built with"
    )


def test_masked_label_changed(broken):
    c = columns(broken, SHARD)
    m0 = int(c.masked_offsets[ROW])
    position = int(c.masked_positions[m0])
    mask = Vocab.load(os.path.join(broken, "vocab.txt")).special_ids.mask

    def change(c):
        c.masked_labels[m0] = mask  # the label taken after masking: a classic writer bug
        return c

    rewrite_shard(broken, SHARD, change)
    rel = read_manifest(broken).shards[SHARD].path
    assert failures(broken, "labels") == [
        f"{rel} row {ROW}: label [MASK] of masked position {position} is a special piece"
    ]


def test_sep_removed(broken):
    c = columns(broken, SHARD)
    lengths = np.diff(c.input_offsets)
    b_start = c.segment_b_start.astype(int)
    row = next(r for r in range(ROW, c.num_rows) if lengths[r] - b_start[r] - 1 >= 2)
    n, sbs = int(lengths[row]), int(b_start[row])
    rewrite_shard(broken, SHARD, lambda c: delete_token(c, row, sbs - 1))
    rel = read_manifest(broken).shards[SHARD].path
    assert (
        f"{rel} row {row}: holds 1 [SEP] at positions [{n - 2}]; expected exactly two, at "
        f"segment_b_start - 1 = {sbs - 1} and at the end ({n - 2})"
    ) in failures(broken, "two_sep")


def test_masks_on_cls(broken):
    def mask_cls(c):
        c.masked_positions[c.masked_offsets[ROW]] = 0
        return c

    rewrite_shard(broken, SHARD, mask_cls)
    rel = read_manifest(broken).shards[SHARD].path
    assert failures(broken, "positions") == [f"{rel} row {ROW}: masked position 0 is the [CLS]"]


def test_all_random_next_shard(broken):
    def all_random(c):
        c.is_random_next[:] = True
        return c

    rewrite_shard(broken, SHARD, all_random)
    entry = read_manifest(broken).shards[SHARD]
    coin_rows = entry.rows - entry.forced_random_next - entry.forced_actual_next
    lines = failures(broken, "random_next")
    (line,) = [x for x in lines if x.startswith(entry.path)]  # and the set's share, if it moved
    assert line.startswith(
        f"{entry.path}: random-next share 1.000 of the {coin_rows:,} rows whose label the coin "
        "drew is outside ["
    )
