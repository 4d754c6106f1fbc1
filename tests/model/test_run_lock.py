"""One run directory, one pre-training run: a second run into it is refused at once, naming the
first (pid, host); a killed run leaves no stale lock. A resume keeps the run's shard set: on
another set (same vocab) it is refused naming both, unless --allow-other-shards says so."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

from model.cli import main
from model.run_dir import load_checkpoint
from model.run_lock import LOCK_NAME, RunLock
from model.run_shards import KEY, check_shard_set, manifest_sha256
from tests.helpers import ROOT

TINY = ["--steps", "2", "--batch-size", "8", "--eval-batches", "1", "--ckpt-every", "2"]


def test_a_second_run_into_one_run_directory_is_refused_naming_the_first(
    shards_dir, tmp_path, capsys
):
    run = str(tmp_path / "run")
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "model.cli",
            "pretrain",
            "--shards",
            shards_dir,
            "--run",
            run,
            "--steps",
            "100000",
            "--batch-size",
            "8",
            "--log-every",
            "100000",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock, deadline = os.path.join(run, LOCK_NAME), time.monotonic() + 120
        while time.monotonic() < deadline and first.poll() is None:
            if os.path.exists(lock) and f"pid {first.pid} " in open(lock).read():
                break
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read()
        assert main(["pretrain", "--shards", shards_dir, "--run", run, *TINY]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"bert-model pretrain: error: {run}: pretrain pid {first.pid} on {platform.node()} "
            "(since "
        )
        assert err.rstrip().endswith(
            "is training into it now; wait for it to finish, or choose another --run DIR "
            "(make: RUN=DIR)"
        )
        assert err.count("\n") == 1
    finally:
        first.kill()
        first.wait()
    with RunLock(run):  # the kernel released the killed run's lock
        pass


def test_the_lock_is_released_when_a_run_ends(shards_dir, tmp_path):
    run = str(tmp_path / "run")
    assert main(["pretrain", "--shards", shards_dir, "--run", run, *TINY]) == 0
    with RunLock(run):
        pass
    assert main(["pretrain", "--shards", shards_dir, "--run", run, *TINY, "--resume"]) == 0


def test_a_resume_on_another_shard_set_is_refused_unless_meant(
    shards_dir, make_shards, tmp_path, capsys
):
    other = make_shards(str(tmp_path / "other"), seed=7)  # same vocab, other rows
    assert manifest_sha256(other) != manifest_sha256(shards_dir)
    run = str(tmp_path / "run")
    assert main(["pretrain", "--shards", shards_dir, "--run", run, *TINY]) == 0
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    assert ckpt[KEY] == {"directory": shards_dir, "manifest_sha256": manifest_sha256(shards_dir)}
    capsys.readouterr()
    more = ["--steps", "4", "--batch-size", "8", "--eval-batches", "1", "--resume"]
    assert main(["pretrain", "--shards", other, "--run", run, *more]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"bert-model pretrain: error: {run}/last.pt: the run trained on {shards_dir} (manifest "
        f"sha256 {manifest_sha256(shards_dir)[:12]}), but --shards {other} is another set "
        f"(manifest sha256 {manifest_sha256(other)[:12]}); resume on the set the run started "
        "with, or pass --allow-other-shards (make: ARGS=--allow-other-shards) if the change is "
        "meant\n"
    )
    assert load_checkpoint(os.path.join(run, "last.pt"))["step"] == 2  # nothing ran
    assert main(["pretrain", "--shards", other, "--run", run, *more, "--allow-other-shards"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "another set" in line]
    assert len(notes) == 1 and notes[0].endswith("; resuming on it (--allow-other-shards)")
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    assert ckpt["step"] == 4 and ckpt[KEY]["manifest_sha256"] == manifest_sha256(other)
    # on its new set the run resumes again without a word
    more[1] = "6"
    assert main(["pretrain", "--shards", other, "--run", run, *more]) == 0
    assert "another set" not in capsys.readouterr().out


def test_a_checkpoint_from_before_the_digest_is_not_checked(shards_dir):
    assert check_shard_set("old.pt", {"step": 3}, None, allow_other=False, main=True) is None


def test_a_second_fine_tuning_into_one_run_folder_is_refused_naming_the_first(
    pretrained_run, tmp_path, capsys
):
    """Two fine-tuning runs into one --run both trained, each replacing the other's files;
    the second is now refused before it writes, naming the first. Fine-tuning's lock file is
    its own (`.run.lock` tells a pre-training run's folder)."""
    import numpy as np

    from model.run_lock import FINETUNE_LOCK_NAME
    from tests.model.helpers import finetune_args, write_sst2

    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(4))
    run = str(tmp_path / "run")
    args = finetune_args("sst2", data, pretrained_run, run, "--epochs", "1")
    with RunLock(run, command="finetune"):  # as a first run holds it
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bert-model finetune: error: {run}: finetune pid {os.getpid()} on ")
        assert err.endswith(
            "is training into it now; wait for it to finish, or choose another --run DIR "
            "(make: ARGS='--run DIR')\n"
        )
        assert os.listdir(run) == [FINETUNE_LOCK_NAME]
    assert main(args) == 0  # once it is released
