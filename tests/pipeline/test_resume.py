"""A build killed at any point and started again with --resume ends with the same bytes, reusing
what was finished; a resume of another config, input or seed is refused, saying why."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.files.code import code_record
from tests.helpers import (
    build_in_a_process,
    build_process,
    build_shards,
    file_digests,
    finished_bucket_times,
    kill_when,
    shard_times,
)

ARGS = ["--num-shards", "4", "--workers", "2", "--progress-seconds", "0"]


@pytest.fixture(scope="module")
def clean(sample_shards) -> dict:
    """The uninterrupted build's bytes: `sample_shards` (4 shards, seed 12345), which a build
    with ARGS' 2 workers equals byte for byte (test_build's identical-bytes test)."""
    return file_digests(sample_shards)


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage",
    ["tmp/documents/*.arrow", "tmp/units/*.arrow", "bucket-*.json"],
    ids=["while-reading", "while-tokenizing", "after-a-bucket"],
)
def test_a_killed_build_resumes_to_the_same_bytes(clean, tmp_path, stage):
    out = str(tmp_path / "out")
    building = f"{out}/shards/.building"
    proc = build_process(out, *ARGS, "--seed", "12345")
    killed = kill_when(proc, f"{building}/{stage}")
    if killed:
        assert not os.path.exists(f"{out}/manifest.json")
        kept = finished_bucket_times(out)  # taken as they are by the resume
    build_in_a_process(out, "--num-shards", "4", "--resume")
    assert file_digests(out) == clean
    assert not os.path.exists(building)
    if killed and stage == "bucket-*.json":
        assert kept, "the killed build had finished a bucket"
        assert kept <= shard_times(out)


def test_a_resume_with_another_seed_or_config_is_refused(tmp_path, capsys):
    out = str(tmp_path / "out")
    proc = build_process(out, *ARGS)
    assert kill_when(proc, f"{out}/shards/.building/build.json")
    with pytest.raises(SystemExit) as e:
        build_shards(out, *ARGS, "--resume", "--seed", "7")
    assert "--resume refused" in str(e.value) and "seed 12345 -> 7" in str(e.value)
    with pytest.raises(SystemExit) as e:
        build_shards(out, *ARGS, "--resume", "--dupe-factor", "2")
    assert "dupe_factor 5 -> 2" in str(e.value)


def test_a_resume_with_nothing_to_resume_says_so(tmp_path):
    with pytest.raises(SystemExit) as e:
        build_shards(str(tmp_path / "out"), *ARGS, "--resume")
    assert "no interrupted build" in str(e.value) and "without --resume" in str(e.value)


def test_a_resume_on_other_code_is_refused_naming_what_changed(tmp_path):
    """An upgrade between the interrupted build and its resume (the package's sources, or a
    library whose output the shards hold) would mix two versions' bytes in one set."""
    out = str(tmp_path / "out")
    proc = build_process(out, *ARGS)
    record = f"{out}/shards/.building/build.json"
    assert kill_when(proc, record)
    with open(record) as f:
        written = json.load(f)
    assert written["code"] == code_record() and len(written["code"]["sources_sha256"]) == 64
    older = {**written["code"], "sources_sha256": "0" * 64, "tokenizers": "0.0.1"}
    with open(record, "w") as f:
        json.dump({**written, "code": older}, f)
    with pytest.raises(SystemExit) as e:
        build_shards(out, *ARGS, "--resume")
    assert str(e.value) == (
        "error: --resume refused: the interrupted build ran on other code (bert-shards' own "
        f"code, tokenizers 0.0.1 -> {written['code']['tokenizers']}), and a set made by two "
        "versions would be the bytes of neither; run the same command as before, or build "
        "afresh without --resume (make: leave ARGS=--resume out)"
    )
    del written["code"]  # a record of a version from before the code was recorded
    with open(record, "w") as f:
        json.dump(written, f)
    with pytest.raises(SystemExit, match="the interrupted build ran on other code"):
        build_shards(out, *ARGS, "--resume")
