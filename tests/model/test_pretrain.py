"""Pre-training: a short CPU run, exact resume, SIGKILL resume, DDP on gloo, refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import model.config as config_module
import model.training as training
from model.cli import main
from model.pretrain import pretrain
from model.run_dir import load_checkpoint
from model.training import SCHEDULES, WarmupCosine, WarmupLinear, micro_batch_size
from schemas.vocab import Vocab
from tests.model.helpers import (
    REPO,
    cli_env,
    config,
    metrics,
    pretrain_interrupted,
    resumed_and_whole,
    without_timing,
)


def test_short_run_writes_metrics_checkpoint_and_eval(pretrained_run):
    records = metrics(pretrained_run)
    assert [r["step"] for r in records] == [10, 20, 30, 40, 50, 60]
    keys = {"step", "loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "seq_per_s"}
    assert keys | {"tokens_per_s"} <= set(records[0])
    for r in records:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"])
        assert 0 <= r["mlm_acc"] <= 1 and 0 <= r["nsp_acc"] <= 1 and r["seq_per_s"] > 0
    assert records[-1]["mlm_loss"] < records[0]["mlm_loss"] - 0.3  # it learns
    ckpt = load_checkpoint(os.path.join(pretrained_run, "last.pt"))
    assert ckpt["step"] == 60 and ckpt["loader_position"] == 60
    assert ckpt["vocab"]["size"] == len(Vocab.load(os.path.join(pretrained_run, "vocab.txt")))
    with open(os.path.join(pretrained_run, "eval.json")) as f:
        held_out = json.load(f)
    assert held_out["held_out"] == ["shards/train-00002-of-00003.arrow[0:96]"]
    assert held_out["sequences"] == 80 and held_out["mlm_acc"] > 1 / 66  # better than chance


def test_learning_rate_warms_up_then_decays():
    f = WarmupLinear(warmup=4, total=10)
    assert [round(f(s), 4) for s in range(10)] == [
        0.25,
        0.5,
        0.75,
        1.0,
        1.0,
        0.8333,
        0.6667,
        0.5,
        0.3333,
        0.1667,
    ]


def test_a_cosine_schedule_warms_up_then_decays_and_resumes_on_it(
    shards_dir, tmp_path, monkeypatch
):
    f = WarmupCosine(warmup=2, total=6)
    assert [round(f(s), 4) for s in range(7)] == [0.5, 1.0, 1.0, 0.8536, 0.5, 0.1464, 0.0]
    assert set(SCHEDULES) == set(config_module.SCHEDULES)  # the flag's choices, the schedules
    split, _ = resumed_and_whole(shards_dir, tmp_path, monkeypatch, schedule="cosine", warmup=2)
    lrs = [r["lr"] for r in metrics(split)]  # the rate each step took: resumed on the cosine
    want = [2e-3 * WarmupCosine(2, 8)(s) for s in range(8)]
    assert lrs == pytest.approx(want)


def test_resume_reproduces_an_uninterrupted_run(shards_dir, tmp_path, monkeypatch):
    whole = config(shards_dir, str(tmp_path / "whole"), remask=True, accum=2)
    pretrain(whole)
    split = config(shards_dir, str(tmp_path / "split"), remask=True, accum=2)
    pretrain_interrupted(split, monkeypatch, 6)  # checkpoint at 4: steps 5-6 are lost
    assert len(metrics(split.run)) == 6
    pretrain(config(shards_dir, split.run, remask=True, accum=2, resume=True))
    assert without_timing(metrics(split.run)) == without_timing(metrics(whole.run))
    a = load_checkpoint(os.path.join(whole.run, "last.pt"))
    b = load_checkpoint(os.path.join(split.run, "last.pt"))
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_from_its_checkpoint(shards_dir, tmp_path):
    args = ["pretrain", "--shards", shards_dir, "--steps", "50", "--batch-size", "8"]
    args += ["--log-every", "1", "--ckpt-every", "5", "--eval-batches", "1"]
    killed = str(tmp_path / "killed")
    proc = subprocess.Popen(
        [sys.executable, "-m", "model.cli", *args, "--run", killed],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
    )
    path, deadline = os.path.join(killed, "metrics.jsonl"), time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(path) and len(metrics(killed)) >= 12:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    step = load_checkpoint(os.path.join(killed, "last.pt"))["step"]
    assert 10 <= step < 50
    assert main([*args, "--run", killed, "--resume"]) == 0
    assert main([*args, "--run", str(tmp_path / "whole")]) == 0
    resumed, whole = metrics(killed), metrics(str(tmp_path / "whole"))
    assert [r["step"] for r in resumed] == list(range(1, 51))
    for r, w in zip(without_timing(resumed), without_timing(whole), strict=True):
        assert r == pytest.approx(w, rel=1e-6)


@pytest.mark.slow
def test_ddp_on_gloo_with_two_processes(shards_dir, tmp_path):
    run = str(tmp_path / "ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "model.cli", "pretrain", "--shards", shards_dir, "--run-dir", run]
    cmd += ["--steps", "4", "--batch-size", "8", "--log-every", "1", "--ckpt-every", "2"]
    cmd += ["--eval-batches", "20", "--eval-every", "2", "--tensorboard", "--keep-every", "2"]
    done = subprocess.run(cmd, cwd=REPO, env=cli_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    records = metrics(run)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["loss"] == r["loss"] for r in records)  # finite, not NaN
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    assert ckpt["world_size"] == 2 and len(ckpt["rng"]) == 2
    assert not torch.equal(ckpt["rng"][0]["cpu"], ckpt["rng"][1]["cpu"])  # own dropout streams
    assert ckpt["loader_position"] == 4
    with open(os.path.join(run, "eval.json")) as f:
        final = json.load(f)
    assert final["sequences"] == 96  # both ranks' halves of the held-out shard
    # every second step evaluated by both ranks, summed; the last is eval.json
    assert [r["held_out"]["sequences"] for r in records if "held_out" in r] == [96, 96]
    assert records[-1]["held_out"] == {k: v for k, v in final.items() if k != "held_out"}
    assert len(os.listdir(os.path.join(run, "tensorboard"))) == 1  # rank 0's events alone
    kept = sorted(n for n in os.listdir(run) if n.startswith("step-"))
    assert kept == ["step-00000002.pt", "step-00000004.pt"]  # kept once, by rank 0
    assert load_checkpoint(os.path.join(run, kept[0]))["world_size"] == 2


def test_refuses_a_batch_that_does_not_split(shards_dir, tmp_path, capsys):
    with pytest.raises(ValueError, match="does not divide by the world size 3 x --accum 1"):
        micro_batch_size(10, world=3, accum=1)
    assert micro_batch_size(12, world=3, accum=2) == 2
    args = ["pretrain", "--shards", shards_dir, "--run", str(tmp_path / "r"), "--steps", "1"]
    assert main([*args, "--batch-size", "7", "--accum", "2"]) == 2
    assert "--batch-size 7 does not divide" in capsys.readouterr().err


def test_refuses_to_overwrite_or_resume_onto_other_data(shards_dir, tmp_path, make_shards):
    run = str(tmp_path / "run")
    pretrain(config(shards_dir, run, steps=2, ckpt_every=2))
    with pytest.raises(ValueError, match="exists: pass --resume"):
        pretrain(config(shards_dir, run, steps=4))
    with pytest.raises(ValueError, match=r"resume with the run's own data settings \(seed=0\)"):
        pretrain(config(shards_dir, run, steps=4, seed=1, resume=True))
    vocab = Vocab.load(os.path.join(shards_dir, "vocab.txt"))
    bigger = make_shards(str(tmp_path / "bigger"), vocab=Vocab((*vocab.pieces, "extra")))
    with pytest.raises(
        ValueError, match=f"vocab of {len(vocab)} pieces, but .* has {len(vocab) + 1}"
    ):
        pretrain(config(bigger, run, steps=4, resume=True))


def test_cli_reports_an_empty_shard_directory(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["pretrain", "--shards", str(empty), "--run", str(tmp_path / "r")])
    assert code == 2
    assert f"{empty} is empty" in capsys.readouterr().err


def test_cli_help_names_every_option(capsys):
    for command in ("pretrain", "finetune", "export"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
    out = capsys.readouterr().out
    for flag in ("--shards", "--run", "--model", "--steps", "--device", "--resume", "--remask"):
        assert flag in out
    for flag in ("--task", "--data", "--ckpt", "--out"):
        assert flag in out


def test_a_single_shard_holds_out_its_last_tenth(tmp_path, make_shards):
    one = make_shards(str(tmp_path / "one"), num_shards=1, rows=100)
    result = pretrain(config(one, str(tmp_path / "run"), steps=2, ckpt_every=2, eval_batches=10))
    assert result["eval"]["held_out"] == ["shards/train-00000-of-00001.arrow[90:100]"]
    assert result["eval"]["sequences"] == 10


def test_device_names_are_checked():
    with pytest.raises(ValueError, match="unknown --device 'tpu'"):
        training.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            training.resolve_device("cuda")


def test_a_vocab_beyond_uint16_ids_trains_and_exports(wide_shards, tmp_path):
    """A set of 70,000 pieces, whose shards hold uint32 ids, ids past 65,535 among them:
    pre-trained, and exported with every piece."""
    from safetensors.torch import load_file

    from model.export import export
    from schemas.reader import ShardSet
    from schemas.shard import ShardColumns

    shards = ShardSet.open(wide_shards)
    assert shards.table(0).schema.field("input_ids").type.value_type.bit_width == 32
    assert ShardColumns.from_table(shards.table(0)).input_ids.max() > 65_535
    run = str(tmp_path / "run")
    result = pretrain(config(wide_shards, run, steps=1, warmup=1, ckpt_every=1, eval_batches=1))
    assert result["eval"]["sequences"] > 0
    out = export(os.path.join(run, "last.pt"), str(tmp_path / "export"))
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["vocab_size"] == 70_000
    weights = load_file(os.path.join(out, "model.safetensors"))
    assert weights["bert.embeddings.word_embeddings.weight"].shape[0] == 70_000
    assert len(Vocab.load(os.path.join(out, "vocab.txt"))) == 70_000
