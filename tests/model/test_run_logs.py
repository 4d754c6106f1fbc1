"""A run's records beyond metrics.jsonl's training figures: the held-out evaluation every
`--eval-every` steps, TensorBoard's event files (`--tensorboard`), each step once after a
resume, read back with TensorBoard's own reader, and the checkpoints `--keep-every` keeps."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from model.board import FOLDER
from model.cli import main
from model.pretrain import pretrain
from model.run_dir import kept_checkpoint, load_checkpoint
from tests.model.helpers import (
    config,
    finetune_args,
    metrics,
    one_line_error,
    pretrain_interrupted,
    resumed_and_whole,
    without_timing,
    write_sst2,
)


def board(run: str):
    """The run's TensorBoard events as TensorBoard loads them (a resumed run's purge applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(run, FOLDER))
    events.Reload()
    return events


def series(events, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def eval_json(run: str) -> dict:
    with open(os.path.join(run, "eval.json")) as f:
        return json.load(f)


def test_evaluating_while_training_leaves_the_training_as_it_was(shards_dir, tmp_path):
    """Every fourth step of eight evaluated: the same weights and training figures as a run
    that evaluates at the end only, whose eval.json is the last step's evaluation."""
    plain = config(shards_dir, str(tmp_path / "plain"))
    pretrain(plain)
    evaluated = config(shards_dir, str(tmp_path / "evaluated"), eval_every=4)
    pretrain(evaluated)
    records = metrics(evaluated.run)
    assert [r["step"] for r in records if "held_out" in r] == [4, 8]
    training_only = [{k: v for k, v in r.items() if k != "held_out"} for r in records]
    assert without_timing(training_only) == without_timing(metrics(plain.run))
    a = load_checkpoint(os.path.join(plain.run, "last.pt"))["model"]
    b = load_checkpoint(os.path.join(evaluated.run, "last.pt"))["model"]
    assert all(torch.equal(t, b[k]) for k, t in a.items())
    final = eval_json(plain.run)
    assert eval_json(evaluated.run) == final  # the last step's evaluation, not a second one
    assert records[-1]["held_out"] == {k: v for k, v in final.items() if k != "held_out"}
    first = records[3]["held_out"]
    assert first["sequences"] == final["sequences"] and first["mlm_loss"] != final["mlm_loss"]


def test_a_resumed_run_logs_and_shows_each_step_once(shards_dir, tmp_path, monkeypatch):
    """Stopped as step 7 starts (checkpoint at 4) and resumed: metrics.jsonl, held-out figures
    included, is the uninterrupted run's, and TensorBoard shows steps 5 and 6 once, from the
    resumed run, the final evaluation at step 8 beside the periodic ones."""
    split, whole = resumed_and_whole(
        shards_dir, tmp_path, monkeypatch, eval_every=3, tensorboard=True
    )
    records = metrics(split)
    assert [r["step"] for r in records if "held_out" in r] == [3, 6]
    assert len(os.listdir(os.path.join(split, FOLDER))) == 2  # one events file per process run
    for run in (split, whole):
        events = board(run)
        loss = series(events, "train/loss")
        assert [s for s, _ in loss] == list(range(1, 9))
        assert [v for _, v in loss] == pytest.approx([r["loss"] for r in records], rel=1e-6)
        lr = [v for _, v in series(events, "train/lr")]
        assert lr == pytest.approx([r["lr"] for r in records], rel=1e-6)
        held = series(events, "held_out/mlm_loss")
        want = [r["held_out"]["mlm_loss"] for r in records if "held_out" in r]
        assert [s for s, _ in held] == [3, 6, 8]
        assert [v for _, v in held] == pytest.approx([*want, eval_json(run)["mlm_loss"]], rel=1e-6)
        assert "held_out/sequences" in events.Tags()["scalars"]


def test_an_mlm_only_run_shows_no_next_sentence_figures(shards_dir, tmp_path):
    run = config(shards_dir, str(tmp_path / "mlm"), steps=2, nsp=False, tensorboard=True)
    pretrain(run)
    tags = set(board(run.run).Tags()["scalars"])
    assert {"train/loss", "train/mlm_acc", "held_out/mlm_acc"} <= tags
    assert "train/nsp_acc" not in tags and "held_out/nsp_acc" not in tags


def test_tensorboard_without_its_package_is_refused_before_the_run(
    shards_dir, pretrained_run, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    run = tmp_path / "run"
    pretraining = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "1"]
    sst2 = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    finetuning = finetune_args("sst2", sst2, pretrained_run, str(run))
    for args in (pretraining, finetuning):
        assert main([*args, "--tensorboard"]) == 2
        assert one_line_error(capsys) == (
            f"bert-model {args[0]}: error: --tensorboard writes TensorBoard's event files, which "
            "needs the tensorboard package: pip install tensorboard (or the "
            "bert-shards[tensorboard] extra), or drop --tensorboard"
        )
        assert not run.exists()


def test_kept_checkpoints_are_the_run_at_their_steps(shards_dir, tmp_path, monkeypatch):
    """--keep-every 3 over 8 steps keeps steps 3 and 6 beside last.pt; a run stopped as step 7
    starts, its step-6 copy lost (as if killed between writing and keeping it), keeps it again
    when resumed, and both runs keep the same weights."""
    whole = config(shards_dir, str(tmp_path / "whole"), keep_every=3)
    pretrain(whole)
    split = config(shards_dir, str(tmp_path / "split"), keep_every=3)
    pretrain_interrupted(split, monkeypatch, 6)
    os.remove(kept_checkpoint(split.run, 6))
    pretrain(replace(split, resume=True))
    last = load_checkpoint(os.path.join(whole.run, "last.pt"))["model"]
    for run in (whole.run, split.run):
        assert sorted(n for n in os.listdir(run) if n.startswith("step-")) == [
            "step-00000003.pt",
            "step-00000006.pt",
        ]
    for step in (3, 6):
        a, b = (load_checkpoint(kept_checkpoint(r, step)) for r in (whole.run, split.run))
        assert a["step"] == b["step"] == step
        assert all(torch.equal(t, b["model"][k]) for k, t in a["model"].items())
        assert not torch.equal(a["model"]["nsp.weight"], last["nsp.weight"])  # not last.pt's
