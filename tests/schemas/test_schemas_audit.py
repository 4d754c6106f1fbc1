"""Damage an audit found passing, crashing or misreported: each is now one failure line naming
the shard (or file) and row, and the other shards are still checked."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pyarrow as pa
import pytest

from schemas.cli import main
from schemas.manifest import ShardEntry, read_manifest
from schemas.shard import shard_to_bytes
from schemas.stats import bonferroni_z, log_normal_tail, normal_tail
from schemas.validate.run import validate
from schemas.validate.state import ValidateOptions
from tests.schemas.shard_surgery import copy_set, edit_manifest, shard_file

SHARD = 1


@pytest.fixture
def broken(synthetic_shards, tmp_path) -> str:
    return copy_set(synthetic_shards, str(tmp_path / "set"))


@pytest.fixture
def broken_pipeline(sample_shards, tmp_path) -> str:
    return copy_set(sample_shards, str(tmp_path / "set"))


def _write_table(directory: str, index: int, table: pa.Table) -> None:
    """Write shard `index` and list its new size and sha256, as a buggy writer would."""
    data = shard_to_bytes(table)
    path = shard_file(directory, index)
    with open(path, "wb") as f:
        f.write(data)

    def change(m):
        shards = list(m.shards)
        old = shards[index]
        new = ShardEntry.describe(old.path, data, _cols_of(old), **_writer_counts(old))
        shards[index] = dataclasses.replace(old, bytes=new.bytes, sha256=new.sha256)
        return dataclasses.replace(m, shards=tuple(shards))

    edit_manifest(directory, change)


def _cols_of(entry):
    class _C:  # only what `describe` reads
        num_rows = entry.rows
        input_ids = masked_positions = np.zeros(0)
        is_random_next = np.zeros(0, bool)

    return _C


def _writer_counts(e) -> dict:
    return {k: getattr(e, k) for k in ("short_rows", "forced_random_next", "forced_actual_next")}


def _shift_one_label(directory: str, row: int) -> None:
    """Row `row` loses a label to row `row + 1`: totals unchanged, pairs shifted."""
    path = shard_file(directory, SHARD)
    table = pa.ipc.open_file(pa.memory_map(path)).read_all().combine_chunks()
    labels = table.column("masked_labels").chunk(0)
    offsets = labels.offsets.to_numpy().copy()
    offsets[row + 1] -= 1
    shifted = pa.ListArray.from_arrays(pa.array(offsets), labels.values)
    i = table.schema.get_field_index("masked_labels")
    _write_table(directory, SHARD, table.set_column(i, table.schema.field(i), shifted))


def test_labels_not_paired_with_positions_fail_and_inspect_says_so(broken, capsys):
    _shift_one_label(broken, 92)
    report = validate(broken)
    assert not report.ok
    rel = read_manifest(broken).shards[SHARD].path
    lines = report.check("arrow").failures
    assert any(line.startswith(f"{rel} row 92: ") and "masked labels" in line for line in lines)
    assert any(line.startswith(f"{rel} row 93: ") for line in lines)
    assert report.check("cls_first").status == "pass"  # the other shards were checked
    assert main(["inspect", broken, "--shard", str(SHARD), "--row", "92", "--no-summary"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 92 has" in err and "validate" in err


def test_a_null_inside_a_list_is_that_shards_failure(broken):
    path = shard_file(broken, SHARD)
    table = pa.ipc.open_file(pa.memory_map(path)).read_all().combine_chunks()
    ids = table.column("input_ids").chunk(0)
    values = ids.values.to_pylist()
    values[3] = None
    nulled = pa.ListArray.from_arrays(ids.offsets, pa.array(values, ids.values.type))
    _write_table(broken, SHARD, table.set_column(0, table.schema.field(0), nulled))
    report = validate(broken)
    rel = read_manifest(broken).shards[SHARD].path
    assert report.check("manifest").status == "pass"
    assert any(f.startswith(rel) and "null" in f for f in report.check("arrow").failures)
    assert report.rows == read_manifest(broken).rows - read_manifest(broken).shards[SHARD].rows


def _set_metadata(directory: str, key: bytes, value: bytes) -> None:
    path = shard_file(directory, SHARD)
    table = pa.ipc.open_file(pa.memory_map(path)).read_all()
    md = dict(table.schema.metadata)
    md[key] = value
    _write_table(directory, SHARD, table.replace_schema_metadata(md))


def test_metadata_that_is_not_json_is_that_shards_failure(broken):
    _set_metadata(broken, b"build.config", b"{not json")
    report = validate(broken)
    rel = read_manifest(broken).shards[SHARD].path
    assert report.check("manifest").status == "pass", report.to_text()
    (line,) = report.check("arrow").failures
    assert line.startswith(f"{rel}: could not be checked (JSONDecodeError")
    assert report.rows == read_manifest(broken).rows - read_manifest(broken).shards[SHARD].rows


def test_a_dropped_column_fails_validate_and_inspect_says_one_line(broken, capsys):
    path = shard_file(broken, SHARD)
    table = pa.ipc.open_file(pa.memory_map(path)).read_all()
    _write_table(broken, SHARD, table.drop_columns(["is_random_next"]))
    assert not validate(broken).ok
    assert main(["inspect", broken, "--n", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"shard {SHARD} (" in err and "validate" in err


def _edit_json(path: str, change) -> None:
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    change(d)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f)


def _entry(field, value):
    def change(d):
        if value is _MISSING:
            del d["shards"][SHARD][field]
        else:
            d["shards"][SHARD][field] = value

    return change


_MISSING = object()


@pytest.mark.parametrize(
    "change, words",
    [
        (_entry("forced_actual_next", -3), "forced_actual_next -3 is negative"),
        (_entry("forced_actual_next", 0.5), "forced_actual_next 0.5 is a number with a fraction"),
        (_entry("forced_actual_next", _MISSING), "forced_actual_next is missing"),
        (_entry("short_rows", 261.5), "short_rows 261.5"),
        (_entry("rows", 755.0), "rows 755.0 is a number with a fraction"),
        (lambda d: d["special_ids"].update(unk=True), "special_ids.unk True is a boolean"),
        (lambda d: d.update(schema_version=1.0), "schema_version 1.0"),
        (lambda d: d.update(manifest_format=2), "manifest_format 2 is unknown"),
        (lambda d: d.update(manifest_format="1"), "manifest_format '1' is a string"),
    ],
)
def test_manifest_fields_of_the_wrong_form_fail(broken, change, words):
    _edit_json(os.path.join(broken, "manifest.json"), change)
    report = validate(broken)
    assert not report.ok
    lines = report.check("manifest").failures
    assert any(words in line for line in lines), lines


def test_a_whole_word_mask_of_0_is_not_a_boolean(broken):
    _edit_json(
        os.path.join(broken, "manifest.json"), lambda d: d["config"].update(whole_word_mask=0)
    )
    report = validate(broken)
    assert any("whole_word_mask=0 is not true or false" in f for f in report.failures)


def test_a_string_schema_version_says_its_type(broken):
    _edit_json(os.path.join(broken, "manifest.json"), lambda d: d.update(schema_version="1"))
    report = validate(broken)
    assert any("'1' is a string, not an integer" in f for f in report.failures), report.failures


@pytest.mark.parametrize(
    "text, words",
    [
        ('"rows": NaN', "NaN is not a JSON value: line"),
        ('"rows": 1, "rows": 1', "key 'rows' given twice in one object: line"),
    ],
)
def test_json_errors_say_what_and_where(broken, text, words):
    path = os.path.join(broken, "manifest.json")
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    rows = read_manifest(broken).shards[0].rows
    with open(path, "w", encoding="utf-8") as f:
        f.write(raw.replace(f'"rows": {rows}', text, 1))
    (line,) = validate(broken).check("manifest").failures
    assert words in line


@pytest.mark.parametrize(
    "name, change, words",
    [
        (
            "tokenizer.json",
            lambda d: d["model"].update(vocab=list(d["model"]["vocab"])),
            "model.vocab is list",
        ),
        (
            "tokenizer.json",
            lambda d: d["normalizer"].update(lowercase=False),
            "normalizer.lowercase is false",
        ),
        ("tokenizer.json", lambda d: d["added_tokens"][4].update(content="[MASKED]"), "[MASK]"),
        (
            "tokenizer_config.json",
            lambda d: d.update(do_lower_case=False),
            "do_lower_case is false",
        ),
        ("special_tokens_map.json", lambda d: d.update(mask_token="[M]"), "mask_token is '[M]'"),
    ],
)
def test_tokenizer_files_disagreeing_with_the_set_fail(broken_pipeline, name, change, words):
    _edit_json(os.path.join(broken_pipeline, name), change)
    report = validate(broken_pipeline, ValidateOptions(hashes=False))
    assert report.check("manifest").status == "pass"
    lines = report.check("vocab").failures
    assert any(line.startswith(name) and words in line for line in lines), lines


def test_a_repeated_vocab_line_is_named(broken):
    path = os.path.join(broken, "vocab.txt")
    with open(path, encoding="utf-8") as f:
        pieces = f.read().split("\n")
    pieces[10] = pieces[7]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(pieces))
    lines = validate(broken).check("vocab").failures
    assert f"vocab.txt: line 11 repeats piece {pieces[7]!r} of line 8" in " ".join(lines)


def test_json_report_when_out_is_refused(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "missing"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and len(report["failures"]) == 1


def test_a_large_z_works(synthetic_shards):
    assert log_normal_tail(40.0) < log_normal_tail(38.0) < 0
    assert abs(log_normal_tail(30.0) - np.log(normal_tail(30.0))) < 1e-9
    assert bonferroni_z(40.0, 10) > 40.0
    assert validate(synthetic_shards, ValidateOptions(z=40.0, hashes=False)).ok


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "X", "--z", "1e9"],
        ["inspect", "X", "--batch-size", "100000000000000000000"],
    ],
)
def test_absurd_values_are_refused_up_front(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_name_with_a_newline_stays_on_one_line(broken, capsys):
    evil = os.path.join(broken, "shards", "evil\nFAIL nothing: all good.arrow")
    with open(evil, "wb") as f:
        f.write(b"x")
    assert main(["validate", broken, "--no-hash"]) == 1
    out = capsys.readouterr().out
    assert "\nFAIL nothing" not in out
    assert "evil\\nFAIL nothing: all good.arrow: not listed" in out
