"""Hostile manifests (issue 9): shard paths out of the set, deep nesting, huge shard lists, an
empty set. Each is refused with one line, by `validate` and by every reader."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

import pytest

import schemas.manifest as manifest_module
from schemas.cli import main
from schemas.manifest import (
    MAX_SHARDS,
    Manifest,
    read_manifest,
    shard_path,
    shard_path_problem,
)
from schemas.reader import ShardSet
from schemas.validate.run import validate
from schemas.validate.state import ValidateOptions
from tests.schemas.shard_surgery import copy_set, edit_manifest


def _set_path(directory: str, index: int, path: str) -> None:
    def change(m: Manifest) -> Manifest:
        shards = list(m.shards)
        shards[index] = dataclasses.replace(shards[index], path=path)
        return dataclasses.replace(m, shards=tuple(shards))

    edit_manifest(directory, change)


def _write_manifest_text(directory: str, text: str) -> None:
    with open(os.path.join(directory, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(text)


@pytest.mark.parametrize(
    "path, why",
    [
        ("shards/train-00000-of-00004.arrow", ""),
        ("shards/sub/x.arrow", ""),
        ("/etc/passwd", "absolute"),
        ("../other/shards/train-00000-of-00004.arrow", "'..'"),
        ("shards/../../other/x.arrow", "'..'"),
        ("shards/./x.arrow", "shards/NAME"),
        ("x.arrow", "shards/NAME"),
        ("shards/", "shards/NAME"),
        ("shards\\..\\x.arrow", "backslash"),
        ("", "non-empty string"),
        (3, "non-empty string"),
    ],
)
def test_shard_path_problem(path, why):
    problem = shard_path_problem(path)
    assert (why in problem) if why else problem == ""


@pytest.mark.parametrize("path", ["/etc/passwd", "../other/shards/train-00000-of-00004.arrow"])
def test_validate_refuses_a_shard_path_out_of_the_set(synthetic_shards, tmp_path, capsys, path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    copy_set(synthetic_shards, str(tmp_path / "other"))  # ../other/... is a sound shard
    _set_path(work, 0, path)
    report = validate(work)
    assert not report.ok
    failures = report.check("files").failures
    line = next(f for f in failures if "shard entry 0" in f)
    assert path in line and "\n" not in line and "inside shards/" in line
    assert main(["validate", work]) == 1
    out = capsys.readouterr().out
    assert "passwd" not in out.replace(line, "")  # never its size nor its sha256
    with pytest.raises(ValueError, match=r"shard entry 0 .*inside shards/"):
        ShardSet.open(work)
    assert main(["inspect", work]) == 1


def test_validate_refuses_a_symlink_out_of_the_set(synthetic_shards, tmp_path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    other = copy_set(synthetic_shards, str(tmp_path / "other"))
    rel = read_manifest(work).shards[1].path
    os.unlink(os.path.join(work, rel))
    os.symlink(os.path.join(other, rel), os.path.join(work, rel))
    report = validate(work)
    assert not report.ok
    assert any("shard entry 1" in f and "symlink" in f for f in report.check("files").failures)
    with pytest.raises(ValueError, match="symlink out of the set"):
        ShardSet.open(work)


def test_a_symlink_inside_the_shards_folder_is_fine(synthetic_shards, tmp_path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    rel = read_manifest(work).shards[0].path
    moved = os.path.join(work, "shards", "real.bin")
    shutil.move(os.path.join(work, rel), moved)
    os.symlink("real.bin", os.path.join(work, rel))
    assert shard_path(work, 0, rel) == os.path.join(work, rel)


def test_a_symlinked_shards_folder_is_fine(synthetic_shards, tmp_path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    elsewhere = str(tmp_path / "disk2" / "shards")
    shutil.move(os.path.join(work, "shards"), elsewhere)  # a set whose shards sit on another disk
    os.symlink(elsewhere, os.path.join(work, "shards"))
    assert validate(work).ok
    assert len(ShardSet.open(work)) == len(read_manifest(work).shards)


def test_a_deeply_nested_manifest_is_one_line(synthetic_shards, tmp_path, capsys):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    depth = 200_000
    _write_manifest_text(work, '{"shards": ' + "[" * depth + "]" * depth + "}")
    report = validate(work)
    assert not report.ok
    (line,) = report.check("manifest").failures
    assert "nested deeper than" in line and "\n" not in line
    with pytest.raises(ValueError, match="nested deeper than"):
        ShardSet.open(work)
    assert main(["inspect", work]) == 1
    assert "nested deeper" in capsys.readouterr().err


def test_a_moderately_nested_manifest_is_refused(synthetic_shards, tmp_path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    d = json.loads(open(os.path.join(work, "manifest.json")).read())
    deep: dict = {}
    for _ in range(200):  # below the parser's recursion limit, above the bound
        deep = {"x": deep}
    d["config"]["deep"] = deep
    _write_manifest_text(work, json.dumps(d))
    with pytest.raises(ValueError, match="nested deeper than"):
        read_manifest(work)


def test_too_many_shards_are_refused_quickly(synthetic_shards, tmp_path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    d = json.loads(open(os.path.join(work, "manifest.json")).read())
    entry = d["shards"][0]
    d["shards"] = [dict(entry, path=f"shards/x-{i}.arrow") for i in range(MAX_SHARDS + 1)]
    _write_manifest_text(work, json.dumps(d))
    start = time.perf_counter()
    report = validate(work)
    assert time.perf_counter() - start < 30
    (line,) = report.check("manifest").failures
    assert f"{MAX_SHARDS + 1:,} shards" in line


def test_an_oversized_manifest_is_refused(synthetic_shards, tmp_path, monkeypatch):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(ValueError, match="more than a manifest may hold"):
        read_manifest(work)
    with pytest.raises(ValueError, match="more than a manifest may hold"):
        Manifest.from_json(" " * 101)


def test_many_listed_shards_are_checked_in_linear_time(synthetic_shards, tmp_path):
    """60,000 entries (all missing, one listed twice): the quadratic checks took far longer
    than the bound below (docs/benchmarks.md, "Figures moved from other pages and from code
    comments")."""
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    d = json.loads(open(os.path.join(work, "manifest.json")).read())
    entry = d["shards"][0]
    n = 60_000
    d["shards"] = [dict(entry, path=f"shards/x-{i}.arrow") for i in range(n)] + [entry, entry]
    _write_manifest_text(work, json.dumps(d))
    start = time.perf_counter()
    report = validate(work, ValidateOptions(hashes=False))
    assert time.perf_counter() - start < 15
    failures = report.check("files").failures
    assert sum("missing" in f for f in failures) == n
    assert any("listed 2 times" in f for f in failures)


def test_an_empty_set_fails(synthetic_shards, tmp_path):
    work = copy_set(synthetic_shards, str(tmp_path / "work"))
    for entry in read_manifest(work).shards:
        os.unlink(os.path.join(work, entry.path))
    edit_manifest(work, lambda m: dataclasses.replace(m, shards=(), counts={}))
    report = validate(work)
    assert not report.ok
    assert any("lists no shards" in f for f in report.check("files").failures)


def test_a_folder_no_build_wrote_is_not_offered_a_build_into_it(tmp_path):
    """A build refuses an OUT holding other files, so a run folder given as a set is told to
    give a finished build's folder; an unfinished build's folder is told to build."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("last.pt", "eval.json", "vocab.txt"):  # vocab.txt: a build writes one too
        (run / name).write_text("x")
    with pytest.raises(FileNotFoundError) as e:
        ShardSet.open(str(run))
    assert str(e.value) == (
        f"{run}/manifest.json does not exist, and {run} holds files no build writes (eval.json, "
        "last.pt): it is no shard set; give the folder a finished build wrote (its --out)"
    )
    unfinished = tmp_path / "unfinished"
    (unfinished / "shards").mkdir(parents=True)
    (unfinished / "vocab.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"is not a finished shard set .*make shards OUT="):
        ShardSet.open(str(unfinished))
