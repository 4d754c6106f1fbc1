"""The spread check: masked positions are a uniform choice among each row's candidate positions.

Masks moved to the first k candidates of every row, with their count, their 80/10/10 draws and
the manifest kept, pass every other check; this one fails them. Sound sets (the pipeline's, and
synthetic ones of several sizes, with and without whole-word masking) pass it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from schemas.manifest import read_manifest
from schemas.row_batch import RowBatch, mask_spread
from schemas.shard import ShardColumns
from schemas.synthetic import SyntheticConfig, write_synthetic_set
from schemas.validate.run import validate
from tests.helpers import build_shards
from tests.schemas.helpers import make_columns, rules, sound_rows
from tests.schemas.shard_surgery import copy_set, rewrite_shard


def move_masks(c: ShardColumns, vocab_mask: int, where: str = "first") -> ShardColumns:
    """Each row's masks moved to its first (or last) k candidate positions: the count per row,
    each entry's [MASK] / kept / random draw and the row rules all as before."""
    ids, positions, labels = c.input_ids.copy(), c.masked_positions.copy(), c.masked_labels.copy()
    for r in range(c.num_rows):
        row = ids[c.input_offsets[r] : c.input_offsets[r + 1]]
        m = slice(c.masked_offsets[r], c.masked_offsets[r + 1])
        old, held = positions[m].astype(np.int64), row[positions[m]].copy()
        kept = held == labels[m]
        row[old] = labels[m]  # the original row
        b = int(c.segment_b_start[r])
        cand = np.r_[1 : b - 1, b : len(row) - 1]
        new = cand[: len(old)] if where == "first" else cand[len(cand) - len(old) :]
        original = row[new].copy()
        row[new] = np.where(held == vocab_mask, vocab_mask, np.where(kept, original, held))
        positions[m], labels[m] = new, original
    return dataclasses.replace(c, input_ids=ids, masked_positions=positions, masked_labels=labels)


def mask_id(directory: str) -> int:
    with open(f"{directory}/vocab.txt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f].index("[MASK]")


def damage(directory: str, shards: list[int], where: str = "first") -> None:
    mask = mask_id(directory)
    for index in shards:
        rewrite_shard(directory, index, lambda c: move_masks(c, mask, where))


def failed_checks(directory: str) -> dict[str, tuple[str, ...]]:
    return {c.key: c.failures for c in validate(directory).checks if not c.passed}


@pytest.fixture(scope="module")
def synthetic_sets(tmp_path_factory):
    """Sound synthetic sets of several sizes and kinds, made once."""
    made = {}

    def make(rows: int, whole_word: bool, google: bool = False) -> str:
        key = (rows, whole_word, google)
        if key not in made:
            out = str(tmp_path_factory.mktemp("spread") / "out")
            cfg = SyntheticConfig(
                rows=rows, shards=4, seed=rows, whole_word_mask=whole_word, google_layout=google
            )
            write_synthetic_set(out, cfg)
            made[key] = out
        return made[key]

    return make


@pytest.fixture(scope="module")
def whole_word_build(tmp_path_factory) -> str:
    """The sample corpus built by the pipeline with whole-word masking."""
    out = str(tmp_path_factory.mktemp("wwm") / "out")
    assert build_shards(out, "--num-shards", "3", "--whole-word-mask", "--dupe-factor", "10") == 0
    return out


def test_tenths_of_hand_checked_rows():
    # row 0: candidates 1-4 and 6-8 (ranks 0-6), masks at 2 and 7: ranks 1 and 5, tenths 1, 7;
    # row 1: candidates 1 and 3, the mask at 1: rank 0, tenth 0
    c = make_columns(sound_rows())
    seen, expected = mask_spread(RowBatch(c, rules()))
    assert seen.tolist() == [1, 1, 0, 0, 0, 0, 0, 1, 0, 0]
    row0, row1 = np.zeros(10), np.zeros(10)
    row0[[0, 1, 2, 4, 5, 7, 8]] = 2 / 7  # 2 masks over 7 candidates, tenth = rank * 10 // 7
    row1[[0, 5]] = 1 / 2
    assert np.allclose(expected, row0 + row1)


def test_whole_words_are_compared_with_words_of_their_length():
    # row 0's words: the fox (jump ##s) | over the dog; fox and the second "the" are taken, two
    # of its five one-piece words (ranks 0, 1, 4, 5, 6: tenths 0, 1, 5, 7, 8); the two-piece
    # word is not. Row 1: dog and over, dog taken.
    seen, expected = mask_spread(RowBatch(make_columns(sound_rows()), rules(whole_word_mask=True)))
    assert seen.tolist() == [1, 1, 0, 0, 0, 0, 0, 1, 0, 0]
    want = np.zeros(10)
    want[[0, 1, 5, 7, 8]] += 2 / 5
    want[[0, 5]] += 1 / 2
    assert np.allclose(expected, want)


def test_the_pipelines_sets_pass(sample_shards, whole_word_build):
    for directory in (sample_shards, whole_word_build):
        report = validate(directory)
        assert report.ok, report.failures
        assert report.check("spread").status == "pass"
        assert report.check("spread").figures["units"] > 1000


@pytest.mark.parametrize(
    "rows, whole_word, google",
    [
        (150, False, False),
        (4000, False, True),
        (60000, False, False),
        (4000, True, True),
        (60000, True, False),
    ],
)
def test_sound_synthetic_sets_pass(synthetic_sets, rows, whole_word, google):
    report = validate(synthetic_sets(rows, whole_word, google))
    assert report.ok, report.failures
    spread = report.check("spread")
    assert spread.status == "pass"
    assert sum(spread.figures["seen"]) == pytest.approx(sum(spread.figures["expected"]))


def test_masks_moved_to_the_front_fail_only_the_spread(copy_shards):
    out = copy_shards()
    damage(out, [0, 1, 2, 3])
    failed = failed_checks(out)
    assert list(failed) == ["spread"]
    lines = failed["spread"]
    assert lines[0].startswith("masks are not spread over the rows")
    assert "tenth 1 holds" in lines[0]
    shards = [entry.path for entry in read_manifest(out).shards]
    assert [line.split(": ")[0] for line in lines[1:]] == shards  # the set, then each shard


def test_masks_moved_to_the_end_fail(synthetic_sets, tmp_path):
    out = copy_set(synthetic_sets(4000, False, True), str(tmp_path / "end"))
    damage(out, [0, 1, 2, 3], where="last")
    failed = failed_checks(out)
    assert list(failed) == ["spread"]
    assert "tenth 10 holds" in failed["spread"][0]


def test_one_damaged_shard_is_named(synthetic_sets, tmp_path):
    out = copy_set(synthetic_sets(4000, False, True), str(tmp_path / "one"))
    damage(out, [2])
    failed = failed_checks(out)
    assert list(failed) == ["spread"]
    named = [line for line in failed["spread"] if line.startswith("shards/")]
    assert len(named) == 1 and named[0].startswith(read_manifest(out).shards[2].path + ": ")
