"""A build killed at any point and started again with --resume ends with the same bytes, reusing
what was finished; a resume of another config, input or seed is refused, saying why."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT, SAMPLE_INPUT, build_in_a_process, build_shards, file_digests

ARGS = ["--num-shards", "4", "--workers", "2", "--progress-seconds", "0"]


def start(out: str, *extra: str) -> subprocess.Popen:
    """The build in a process group of its own. Its temporary folder is next to `out`: a build
    killed with SIGKILL leaves Beam's (empty) folder behind, and the suite leaves none in /tmp."""
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", SAMPLE_INPUT, "--out", out]
    tmp = os.path.join(os.path.dirname(out), "tmp")
    os.makedirs(tmp, exist_ok=True)
    return subprocess.Popen(
        cmd + ARGS + list(extra),
        cwd=ROOT,
        env={**os.environ, "TMPDIR": tmp},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the kill takes Beam's workers too
    )


def kill_when(proc: subprocess.Popen, pattern: str, timeout: float = 120) -> bool:
    """SIGKILL the build's whole process group once `pattern` matches a file; False when the
    build ended first."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if glob.glob(pattern):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.05)
    proc.communicate()
    return False


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
    proc = start(out, "--seed", "12345")
    killed = kill_when(proc, f"{building}/{stage}")
    if killed:
        assert not os.path.exists(f"{out}/manifest.json")
        # a finished bucket's shard, by its modification time: taken as it is by the resume
        kept = {
            os.stat(p[: -len("json")] + "arrow").st_mtime_ns
            for p in glob.glob(f"{building}/bucket-*.json")
        }
    build_in_a_process(out, "--num-shards", "4", "--resume")
    assert file_digests(out) == clean
    assert not os.path.exists(building)
    if killed and stage == "bucket-*.json":
        assert kept, "the killed build had finished a bucket"
        assert kept <= {os.stat(p).st_mtime_ns for p in glob.glob(f"{out}/shards/*.arrow")}


def test_a_resume_with_another_seed_or_config_is_refused(tmp_path, capsys):
    out = str(tmp_path / "out")
    proc = start(out)
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
