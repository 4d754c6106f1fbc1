"""Row rules on hand-checked rows, the count formula, and set checks beyond the issue's list."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.manifest import read_manifest
from schemas.masking import num_to_predict
from schemas.rows import ROW_RULE_NAMES, describe_row, row_findings
from schemas.shard import ShardColumns
from schemas.storage import HASH_BUFFER
from schemas.synthetic import SyntheticConfig, write_synthetic_set
from schemas.validate.files import sha256_file
from schemas.validate.run import validate
from schemas.vocab import Vocab
from tests.schemas.helpers import make_columns, rules, sound_rows
from tests.schemas.shard_surgery import (
    columns,
    copy_set,
    edit_manifest,
    rewrite_shard,
    shard_file,
)


def findings(rows, **config) -> dict[str, list[int]]:
    bad, _ = row_findings(make_columns(rows), rules(**config))
    return {k: np.flatnonzero(v).tolist() for k, v in bad.items() if v.any()}


def test_sound_rows_pass_and_are_counted():
    bad, stats = row_findings(make_columns(sound_rows()), rules())
    assert not any(v.any() for v in bad.values())
    assert set(bad) == set(ROW_RULE_NAMES) - {"whole_words"}
    assert (stats.rows, stats.tokens, stats.masked, stats.expected_masked) == (2, 15, 3, 3)
    assert (stats.units, stats.as_mask, stats.as_keep, stats.as_random) == (3, 1, 1, 1)


def broken(change) -> list[dict]:
    rows = sound_rows()
    change(rows[0])
    return rows


def message(rows, key, **config) -> str:
    return describe_row(key, make_columns(rows), 0, rules(**config))


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        (lambda r: r["ids"].__setitem__(0, 5), "cls_first", "starts with id 5, not [CLS]"),
        (
            lambda r: r["ids"].__setitem__(3, 2),
            "cls_first",
            "holds [CLS] at positions [0, 3]; only position 0 may",
        ),
        (
            lambda r: r.__setitem__("b", 5),
            "two_sep",
            "holds 2 [SEP] at positions [5, 9]; expected exactly two, at segment_b_start - 1 = 4 "
            "and at the end (9)",
        ),
        (
            lambda r: r.__setitem__("b", 9),
            "two_sep",
            "segment_b_start 9 leaves segment A or B empty (row length 10)",
        ),
        (
            lambda r: r["ids"].__setitem__(3, 0),
            "no_pad",
            "holds [PAD] at positions [3]; shards store no padding",
        ),
        (
            lambda r: r["ids"].__setitem__(3, 11),
            "ids_in_vocab",
            "id 11 at position 3 is outside the vocab (11 pieces)",
        ),
        (
            lambda r: r["lab"].__setitem__(1, 40),
            "ids_in_vocab",
            "label 40 of masked position 7 is outside the vocab (11 pieces)",
        ),
        (
            lambda r: r.update(pos=[7, 2], lab=[5, 6]),
            "positions",
            "masked positions [7, 2] are not strictly ascending",
        ),
        (
            lambda r: r.update(pos=[2, 2], lab=[6, 6]),
            "positions",
            "masked positions [2, 2] are not strictly ascending",
        ),
        (
            lambda r: r.update(pos=[2, 9], lab=[6, 3]),
            "positions",
            "masked position 9 is the final [SEP]",
        ),
        (
            lambda r: r.update(pos=[2, 5], lab=[6, 3]),
            "positions",
            "masked position 5 is the first [SEP]",
        ),
        (
            lambda r: r.update(pos=[2, 12]),
            "positions",
            "masked position 12 lies outside the row (length 10)",
        ),
        (
            lambda r: r["ids"].__setitem__(7, 3),
            "mask_tokens",
            "masked position 7 holds [SEP], a special piece, instead of [MASK], its label or an "
            "ordinary piece",
        ),
        (
            lambda r: r["ids"].__setitem__(3, 4),
            "mask_tokens",
            "[MASK] at position 3, which is not a masked position",
        ),
        (
            lambda r: r.update(pos=[2], lab=[6]),
            "mask_count",
            "1 masked positions; the formula gives min(3, max(1, round(10 * 0.15))) = 2",
        ),
        (
            lambda r: r["lab"].__setitem__(1, 3),
            "labels",
            "label [SEP] of masked position 7 is a special piece",
        ),
        (
            lambda r: r["lab"].__setitem__(1, 4),
            "labels",
            "label [MASK] of masked position 7 is a special piece",
        ),
    ],
)
def test_each_broken_row_fails_its_rule_with_its_message(change, key, expected):
    rows = broken(change)
    found = findings(rows)
    assert found[key] == [0]
    assert message(rows, key) == expected


def test_length_bound_comes_from_the_config():
    assert findings(sound_rows(), max_seq_length=8) == {"length": [0]}
    assert message(sound_rows(), "length", max_seq_length=8) == "length 10 is outside [5, 8]"


def test_unk_may_be_a_label():
    rows = broken(lambda r: r["lab"].__setitem__(1, 1))  # [UNK] selected, replaced by "dog"
    assert findings(rows) == {}


def test_masks_on_cls_flag_the_row():
    rows = broken(lambda r: r.update(pos=[0, 7], lab=[2, 5]))
    found = findings(rows)
    assert found["positions"] == [0]
    assert message(rows, "positions") == "masked position 0 is the [CLS]"


@given(
    length=st.integers(5, 1024),
    prob=st.floats(0.01, 0.99),
    cap=st.integers(1, 200),
)
def test_count_formula_is_the_reference(length, prob, cap):
    reference = min(cap, max(1, int(round(length * prob))))  # create_pretraining_data.py
    assert num_to_predict(np.array([length]), prob, cap)[0] == min(reference, length - 3)


def test_count_formula_rounds_half_to_even():
    # 10 * 0.15 = 1.5 -> 2; 30 * 0.15 = 4.5 -> 4 (banker's rounding, as Python's round)
    assert num_to_predict(np.array([10, 30, 128, 512]), 0.15, 80).tolist() == [
        round(10 * 0.15),
        round(30 * 0.15),
        19,
        77,
    ]


def test_whole_word_set_with_google_specials_passes(synthetic_wwm_shards):
    report = validate(synthetic_wwm_shards)
    assert report.ok, report.to_text()
    assert report.check("whole_words").status == "pass"
    assert "words" in report.check("split").summary
    assert read_manifest(synthetic_wwm_shards).special_ids["cls"] == 101


def test_a_word_masked_in_part_fails(synthetic_wwm_shards, tmp_path):
    d = copy_set(synthetic_wwm_shards, str(tmp_path / "set"))
    c = columns(d, 0)
    vocab = Vocab.load(os.path.join(d, "vocab.txt"))
    cont = vocab.continuation_mask()
    for r in range(c.num_rows):  # a masked word of two or more pieces
        m0, m1 = c.masked_offsets[r], c.masked_offsets[r + 1]
        pos, lab = c.masked_positions[m0:m1], c.masked_labels[m0:m1]
        k = next((k for k in range(1, len(pos)) if cont[lab[k]] and pos[k] == pos[k - 1] + 1), 0)
        if k:
            break
    entry, p = int(m0 + k), int(pos[k])

    def unmask_piece(c):
        c.input_ids[c.input_offsets[r] + p] = c.masked_labels[entry]
        keep = np.ones(len(c.masked_positions), bool)
        keep[entry] = False
        offsets = c.masked_offsets.copy()
        offsets[r + 1 :] -= 1
        return dataclasses.replace(
            c,
            masked_positions=c.masked_positions[keep],
            masked_labels=c.masked_labels[keep],
            masked_offsets=offsets,
        )

    rewrite_shard(d, 0, unmask_piece)
    rel = read_manifest(d).shards[0].path
    report = validate(d)
    assert (
        f"{rel} row {r}: positions {p - 1} and {p} belong to one word but only position "
        f"{p - 1} is masked"
    ) in report.check("whole_words").failures


def test_json_report(synthetic_shards):
    d = json.loads(validate(synthetic_shards).to_json())
    assert d["ok"] is True
    assert d["rows"] == read_manifest(synthetic_shards).rows
    split = next(c for c in d["checks"] if c["key"] == "split")
    assert split["status"] == "pass"
    assert set(split["figures"]) == {"[MASK]", "kept", "random"}
    assert split["figures"]["[MASK]"]["lo"] < 0.8 < split["figures"]["[MASK]"]["hi"]


def test_no_manifest_is_one_clear_failure(tmp_path):
    report = validate(str(tmp_path))
    assert not report.ok
    assert (
        report.check("manifest").failures[0].startswith(f"{tmp_path}/manifest.json does not exist")
    )
    assert {c.status for c in report.checks if c.key != "manifest"} == {"skip"}


def test_missing_tokenizer_json(synthetic_shards, tmp_path):
    d = copy_set(synthetic_shards, str(tmp_path / "set"))
    os.remove(os.path.join(d, "tokenizer.json"))
    assert validate(d).check("vocab").failures == (
        "tokenizer.json: missing; it belongs beside vocab.txt: rebuild the set",
    )


def test_shard_built_with_another_config(synthetic_shards, tmp_path):
    d = copy_set(synthetic_shards, str(tmp_path / "set"))
    edit_manifest(d, lambda m: dataclasses.replace(m, config={**m.config, "seed": 99}))
    failures = validate(d).check("config").failures
    rels = [e.path for e in read_manifest(d).shards]
    assert failures == tuple(
        f"{rel}: build config differs from the manifest's in seed" for rel in rels
    )


def test_short_rows_not_recorded(synthetic_shards, tmp_path):
    d = copy_set(synthetic_shards, str(tmp_path / "set"))

    def no_short(m):
        return dataclasses.replace(
            m, shards=tuple(dataclasses.replace(e, short_rows=0) for e in m.shards)
        )

    edit_manifest(d, no_short)
    (line,) = validate(d).check("short_rows").failures
    assert line.startswith("short-row share 0.0000 is below ")
    assert line.endswith("are short_rows recorded?")


def test_structurally_broken_buffer_stops_that_shard_only(synthetic_shards, tmp_path):
    d = copy_set(synthetic_shards, str(tmp_path / "set"))
    import pyarrow as pa

    path = shard_file(d, 0)
    mm = pa.memory_map(path)
    whole = mm.read_buffer()
    offsets = pa.ipc.open_file(mm).get_batch(0).column(0).buffers()[1]
    at = offsets.address - whole.address + 4 * 3  # int32 offset of row 3
    del mm, whole, offsets
    with open(path, "r+b") as f:
        f.seek(at)
        f.write((2**30).to_bytes(4, "little"))
    report = validate(d)
    rel = read_manifest(d).shards[0].path
    (line,) = report.check("arrow").failures
    assert line.startswith(f"{rel} record batch 0 (from row 0): invalid Arrow data (")
    assert report.rows == read_manifest(d).rows - read_manifest(d).shards[0].rows


def no_rows(c: ShardColumns) -> ShardColumns:
    """The shard's columns with every row cut (the offsets keep their leading 0)."""
    return ShardColumns(
        *(
            a[:0] if a.dtype != np.int64 else a[:1]
            for a in (
                c.input_ids,
                c.input_offsets,
                c.segment_b_start,
                c.masked_positions,
                c.masked_labels,
                c.masked_offsets,
                c.is_random_next,
            )
        )
    )


def test_empty_shard_fails_the_balance_check(tmp_path):
    d = str(tmp_path / "set")
    write_synthetic_set(d, SyntheticConfig(rows=600, shards=2, seed=3))
    rewrite_shard(d, 1, no_rows)
    rel = read_manifest(d).shards[1].path
    failures = validate(d).check("balance").failures
    assert failures == (f"{rel}: holds no rows; an empty bucket should not become a shard",)


def test_shards_that_hold_no_rows_at_all_fail_counts(tmp_path):
    d = str(tmp_path / "set")
    write_synthetic_set(d, SyntheticConfig(rows=600, shards=2, seed=3))
    made = read_manifest(d).counts["total"]["instances"]
    for index in (0, 1):
        rewrite_shard(d, index, no_rows)
    report = validate(d)
    assert not report.ok and report.rows == 0
    assert report.check("counts").failures == (
        f"manifest.json: counts say {made} instances were made, the shards hold 0 rows",
        "2 shard(s) read, and they hold no rows; an empty set has nothing to train on: check "
        "the input and rebuild it",
    )


def test_manifest_field_of_the_wrong_form(synthetic_shards, tmp_path):
    d = copy_set(synthetic_shards, str(tmp_path / "set"))
    path = os.path.join(d, "manifest.json")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    manifest["shards"][0]["rows"] = "many"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    report = validate(d)
    (line,) = report.check("manifest").failures
    assert line == (
        "manifest.json: shard entry 0: rows 'many' is a string, not an integer; rebuild the set "
        "with `make shards`"
    )
    assert not report.ok


def test_vocab_missing_leaves_whole_word_rule_unchecked(synthetic_wwm_shards, tmp_path):
    d = copy_set(synthetic_wwm_shards, str(tmp_path / "set"))
    os.remove(os.path.join(d, "vocab.txt"))
    report = validate(d)
    assert report.check("vocab").failures[0].startswith("vocab.txt: missing;")
    assert report.check("whole_words").status == "skip"
    assert report.check("cls_first").status == "pass"  # specials from the manifest


@pytest.mark.parametrize("size", [0, 1, HASH_BUFFER - 1, HASH_BUFFER, 2 * HASH_BUFFER + 12345])
def test_a_files_sha256_read_in_pieces_is_hashlibs_over_its_bytes(tmp_path, size):
    """`sha256_file` reads a file in pieces of one buffer: empty, under, at and past a piece."""
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "shard.arrow"
    path.write_bytes(data)
    assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
