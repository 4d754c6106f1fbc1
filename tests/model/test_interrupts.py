"""Pre-training stopped by Ctrl-C or SIGTERM, with DataLoader workers: one line that says how to go
on (from the run's checkpoint), the shell's exit code, no traceback, no worker left, the run's
lock free; and a signal that lands while the workers are forked stops it too, and a worker
killed (the OOM killer) ends it in one line. An interrupted
export or fine-tuning says to run the same command again, and that command works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from model.cli import main
from model.run_dir import load_checkpoint
from model.run_lock import RunLock
from tests.helpers import (
    alive,
    children,
    ctrl_c_at_fork,
    left_in_session,
    signal_after,
    signal_at_fork,
)
from tests.model.helpers import REPO, cli_env, finetune_args, metrics, results, write_sst2

# Each test pre-trains in a fresh process and interrupts it.
pytestmark = pytest.mark.slow

PRETRAIN = ["pretrain", "--batch-size", "8", "--log-every", "1", "--eval-batches", "1"]
PRETRAIN += ["--workers", "2"]


def resume_line(run: str) -> str:
    return (
        "interrupted; run the same command with --resume (make: ARGS=--resume) to continue "
        f"from {run}/last.pt, written every --ckpt-every steps\n"
    )


def training_past_a_checkpoint(cmd: list[str], run: str, env: dict, stdout, stderr):
    """`cmd` (a pre-training of `run`, a checkpoint every 2 steps) started in a process group of
    its own, as a terminal's foreground job, and returned once 4 steps are logged."""
    p = subprocess.Popen(
        cmd, cwd=REPO, env=env, text=True, stdout=stdout, stderr=stderr, start_new_session=True
    )
    deadline, path = time.monotonic() + 120, os.path.join(run, "metrics.jsonl")
    while time.monotonic() < deadline and p.poll() is None:
        if os.path.exists(path) and len(metrics(run)) >= 4:
            break
        time.sleep(0.02)
    return p


def loading_past_a_checkpoint(shards_dir: str, tmp_path) -> tuple[subprocess.Popen, str, list]:
    """A pre-training run with two DataLoader workers, past its first checkpoint: (its process,
    its run directory, its loader's worker pids)."""
    run = str(tmp_path / "run")
    args = [*PRETRAIN, "--shards", shards_dir, "--run", run, "--steps", "100000"]
    cmd = [sys.executable, "-m", "model.cli", *args, "--ckpt-every", "2"]
    p = training_past_a_checkpoint(cmd, run, cli_env(), subprocess.DEVNULL, subprocess.PIPE)
    workers = children(p.pid)
    assert len(workers) >= 2, "the run never started its loader's workers"
    return p, run, workers


def test_ctrl_c_while_training_ends_in_one_line_naming_the_checkpoint(shards_dir, tmp_path):
    """Ctrl-C in a terminal: SIGINT to the whole process group, the loader's workers too."""
    p, run, workers = loading_past_a_checkpoint(shards_dir, tmp_path)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert (p.returncode, err) == (130, resume_line(run))
    assert not [w for w in workers if alive(w)]
    with RunLock(run):  # free at once
        pass


def test_a_loader_worker_killed_ends_in_one_line_naming_it_and_the_checkpoint(shards_dir, tmp_path):
    """A DataLoader worker killed as the kernel's out-of-memory killer kills (SIGKILL): one
    line naming it, what sends SIGKILL and the checkpoint to go on from, not torch's
    traceback; the rest of the run's processes end."""
    p, run, workers = loading_past_a_checkpoint(shards_dir, tmp_path)
    os.kill(workers[0], signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1
    # torch says the worker was killed by its signal, or, when it saw the worker gone before
    # the signal, that it exited unexpectedly: a line either way
    lost = (
        "was killed by SIGKILL, which the kernel's out-of-memory killer sends when memory runs "
        "out (`dmesg` says; fewer --workers hold less)",
        "ended unexpectedly (the kernel's out-of-memory killer ends one when memory runs out: "
        "`dmesg` says; fewer --workers hold less)",
    )
    then = (
        "; run the same command with --resume (make: ARGS=--resume) to continue from "
        f"{run}/last.pt, written every --ckpt-every steps\n"
    )
    said = f"bert-model pretrain: error: a DataLoader worker (pid {workers[0]}) "
    assert err in [said + how + then for how in lost], err
    assert not [w for w in workers if alive(w)]


def test_ctrl_c_under_torchrun_is_said_once_and_leaves_a_checkpoint_of_both_ranks(
    make_shards, tmp_path
):
    """Ctrl-C in a terminal under torchrun: SIGINT to the whole group, the launcher and both
    ranks. Rank 0 alone says the line (and the one-shard set's note, once); the launcher then
    ends with its own status and its own traceback of the signal (torch's, not ours); the
    checkpoint the line names holds both ranks' state; no process of the run is left."""
    shards = make_shards(str(tmp_path / "shards"), num_shards=1)
    run = str(tmp_path / "run")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "model.cli", *PRETRAIN[:-2], "--shards", shards, "--run-dir", run]
    cmd += ["--steps", "100000", "--ckpt-every", "2"]
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:  # files: no pipe held open
        p = training_past_a_checkpoint(cmd, run, cli_env(tmp_path), stdout, stderr)
        assert p.poll() is None, err.read_text()[-2000:]
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=120)
    said = err.read_text()
    assert p.returncode != 0 and said.count(resume_line(run)) == 1, said[-3000:]
    assert out.read_text().count("note: 1 shard(s), too few to hold 1 out") == 1
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    assert ckpt["world_size"] == 2 and len(ckpt["rng"]) == 2 and ckpt["step"] >= 2
    assert left_in_session(p.pid) == []  # the ranks end with the launcher
    with RunLock(run):  # free
        pass


@pytest.mark.parametrize(
    "script, code",
    [(signal_at_fork, 143), (ctrl_c_at_fork, 130)],
    ids=["sigterm-in-the-parents-hook", "ctrl-c-in-the-new-workers-hook"],
)
def test_a_signal_that_lands_in_a_loader_fork_still_stops_training(
    shards_dir, tmp_path, script, code
):
    """SIGTERM from the run's own at-fork hook: raised inside the interpreter's at-fork hooks,
    the interrupt was dropped and the run trained to its last step; now the signal waits for
    the fork. One Ctrl-C that lands while the loader forks its first worker: SIGINT to the whole
    group from that worker's hook, before it has set its own handlers, so the run and the new
    worker both receive it. Either way the run says its line once and nothing else."""
    run = str(tmp_path / "run")
    args = [*PRETRAIN, "--shards", shards_dir, "--run", run, "--steps", "20"]
    r = subprocess.run(
        [sys.executable, "-c", script("model.cli"), *args, "--ckpt-every", "100"],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,  # the group a Ctrl-C reaches is the run's alone
    )
    line = "interrupted before the run's first checkpoint; run the same command again\n"
    assert (r.returncode, r.stderr) == (code, line)
    assert not os.path.exists(os.path.join(run, "last.pt"))


AGAIN = "interrupted; run the same command again\n"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_export_can_be_run_again(pretrained_run, tmp_path, capsys, sig, code):
    """Stopped once its weights are written to their temporary name: nothing of them is left,
    so the same command, as the line says, exports into the same --out."""
    import model.export

    out = str(tmp_path / "export")
    args = ["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]
    with pytest.MonkeyPatch.context() as patch:
        signal_after(patch, model.export, "save_file", sig)
        assert main(args) == code
    assert capsys.readouterr().err == AGAIN
    assert os.listdir(out) == []
    open(os.path.join(out, "model.safetensors.tmp"), "w").close()  # as a SIGKILL leaves it
    assert main(args) == 0
    assert sorted(os.listdir(out)) == sorted(model.export.EXPORT_FILES)


def test_an_interrupted_fine_tuning_can_be_run_again(pretrained_run, tmp_path, capsys):
    import model.finetune.loop

    data = write_sst2(str(tmp_path / "sst2"), np.random.default_rng(0))
    args = finetune_args("sst2", data, pretrained_run, str(tmp_path / "run"), "--epochs", "1")
    with pytest.MonkeyPatch.context() as patch:  # after the first evaluation kept a best.pt
        signal_after(patch, model.finetune.loop, "_keep_best", signal.SIGTERM)
        assert main(args) == 143
    assert capsys.readouterr().err == AGAIN
    assert main(args) == 0
    assert "accuracy" in results(str(tmp_path / "run"))
