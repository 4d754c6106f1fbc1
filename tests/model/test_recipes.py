"""The recipe's knobs: --mask-prob (the re-masking rate), --no-nsp (masked-LM only) and --pack,
each recorded in the run, refused on a resume that changes it, and exported as what it is; and
packed pre-training, resumed, equal to an uninterrupted packed run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from model.cli import main
from model.config import TrainConfig
from model.data import LoaderConfig, PretrainingData, masking_rule, open_shards
from model.run_dir import load_checkpoint
from schemas.masking import mask_padded, num_to_predict
from tests.model.helpers import (
    REPO,
    cli_env,
    metrics,
    resumed_and_whole,
)


def _args(shards: str, run: str, *extra: str, steps: int = 4) -> list[str]:
    args = ["pretrain", "--shards", shards, "--run", run, "--steps", str(steps)]
    return [*args, "--batch-size", "8", "--log-every", "1", "--eval-batches", "2", *extra]


def test_mask_prob_sets_the_rate_and_scales_the_cap(shards_dir):
    shards = open_shards(shards_dir)
    base = masking_rule(shards)
    rule = masking_rule(shards, 0.3)
    assert (base.masked_lm_prob, base.max_predictions) == (0.15, 10)
    assert (rule.masked_lm_prob, rule.max_predictions) == (0.3, 20)
    data = PretrainingData(shards, [0], LoaderConfig(batch_size=32, remask=True, mask_prob=0.3))
    b = data.batch(0)
    lengths = b["attention_mask"].sum(1).numpy()
    per_row = np.bincount(b["mlm_positions"].numpy() // b["input_ids"].size(1), minlength=32)
    assert per_row.tolist() == num_to_predict(lengths, 0.3, 20).tolist()
    assert per_row.sum() / lengths.sum() > 0.25  # about 30% of the pieces, not 15%
    # 80/10/10 stays: most chosen positions read [MASK].
    masked = b["input_ids"].reshape(-1)[b["mlm_positions"]]
    assert 0.65 < (masked == shards.vocab.special_ids.mask).float().mean() < 0.95


def test_whole_word_masking_at_mask_prob(shards_dir):
    rule = replace(masking_rule(open_shards(shards_dir), 0.3), whole_word=True)
    rng = np.random.default_rng(0)
    vocab = len(rule.tokens.continuation)
    pieces = np.flatnonzero(~rule.tokens.continuation)[7:]  # words, no specials
    cont = np.flatnonzero(rule.tokens.continuation)  # ##s, ##ed, ...
    ids = rng.choice(pieces, (64, 60))
    ids[rng.random((64, 60)) < 0.4] = rng.choice(cont, 1)[0]
    ids[:, 0], ids[:, 30], ids[:, 59] = 2, 3, 3
    lengths, seg_b = np.full(64, 60), np.full(64, 31)
    out, labels = mask_padded(ids, lengths, seg_b, rule, rng)
    chosen = labels >= 0
    assert chosen.sum(1).max() <= 20 and 0.2 < chosen.sum() / (64 * 57) <= 0.34
    # A ## piece is chosen exactly when the piece before it is (words are taken whole; after
    # [CLS] or [SEP], at 1 and 31, a ## piece starts a word of its own).
    follows = np.isin(ids[:, 1:], cont) & ~np.isin(np.arange(1, 60), [1, 31])
    assert np.array_equal(chosen[:, 1:][follows], chosen[:, :-1][follows])
    assert vocab > 0 and (out[chosen] != ids[chosen]).any()


def test_mask_prob_implies_remask_and_is_checked():
    from model.cli import build_parser, train_config

    cfg = train_config(build_parser().parse_args(["pretrain", "--mask-prob", "0.3"]))
    assert cfg.remask and cfg.mask_prob == 0.3
    with pytest.raises(ValueError, match="--mask-prob is the rate of --remask"):
        TrainConfig(mask_prob=0.3)
    with pytest.raises(ValueError, match="--mask-prob must lie in"):
        TrainConfig(mask_prob=1.5, remask=True)
    with pytest.raises(ValueError, match=r"--mask-prob 0.0: give a share in \(0, 1\)"):
        train_config(build_parser().parse_args(["pretrain", "--mask-prob", "0"]))


def test_no_nsp_trains_masked_lm_only_and_exports_a_masked_lm(shards_dir, tmp_path, capsys):
    run = str(tmp_path / "mlm")
    assert main(_args(shards_dir, run, "--no-nsp", "--mask-prob", "0.3", "--pack")) == 0
    said = capsys.readouterr().out
    assert "held-out loss" in said and "nsp" not in said.split("held-out")[-1]  # as each step's
    records = metrics(run)
    assert all(r["nsp_loss"] == 0 and r["nsp_acc"] is None for r in records)
    assert all(r["loss"] == r["mlm_loss"] for r in records)
    with open(os.path.join(run, "train_config.json")) as f:
        recorded = json.load(f)
    assert (recorded["nsp"], recorded["mask_prob"], recorded["pack"]) == (False, 0.3, True)
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    assert not any(k.startswith("nsp.") for k in ckpt["model"])
    assert ckpt["model_config"]["next_sentence"] is False
    with open(os.path.join(run, "eval.json")) as f:
        assert json.load(f)["nsp_acc"] is None
    transformers = pytest.importorskip("transformers")
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(run, "last.pt"), "--out", out]) == 0
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["architectures"] == ["BertForMaskedLM"]
    from model.bert import BertForPreTraining
    from model.config import BertConfig

    ours = BertForPreTraining(BertConfig(**ckpt["model_config"])).eval()
    ours.load_state_dict(ckpt["model"])
    theirs, info = transformers.BertForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    batch = PretrainingData(open_shards(shards_dir), [0], LoaderConfig(batch_size=8)).batch(0)
    inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        mlm, nsp = ours(*inputs)
        got = theirs.eval()(input_ids=inputs[0], token_type_ids=inputs[1], attention_mask=inputs[2])
    assert nsp is None
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got.logits[real], mlm[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "change, refused",
    [
        (["--no-nsp"], "own recipe"),
        (["--remask", "--mask-prob", "0.3"], "own"),
        (["--pack"], r"own data settings \(pack=False\)"),
        (["--attention-dropout", "0"], r"own recipe: --attention-dropout 0.1"),
    ],
)
def test_a_resume_that_changes_the_recipe_is_refused(shards_dir, tmp_path, capsys, change, refused):
    run = str(tmp_path / "r")
    assert main(_args(shards_dir, run, "--remask", steps=2)) == 0
    capsys.readouterr()
    assert main(_args(shards_dir, run, "--remask", "--resume", *change, steps=4)) == 2
    err = capsys.readouterr().err
    assert "error:" in err and len(err.strip().splitlines()) == 1
    assert re.search(refused, err), err


def test_packed_resume_reproduces_an_uninterrupted_packed_run(shards_dir, tmp_path, monkeypatch):
    opts = dict(remask=True, accum=2, pack=True, batch_size=4)
    _, whole = resumed_and_whole(shards_dir, tmp_path, monkeypatch, **opts)
    # A packed step sees several rows per sequence: more rows per second than sequences.
    assert metrics(whole)[-1]["seq_per_s"] > 0


@pytest.mark.slow
def test_ddp_packed_masked_lm_only_on_gloo(shards_dir, tmp_path):
    """Two ranks, packed, without NSP: the frozen pooler leaves DDP nothing to wait for; with
    LAMB, whose trust ratios each rank computes alike from DDP's averaged gradients, in fp16
    with loss scaling (each rank's scaler sees the same averaged gradients), each layer
    recomputed in the backward pass (DDP's hooks fire on the recomputed layers' gradients)."""
    run = str(tmp_path / "ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    recipe = ("--pack", "--no-nsp", "--optimizer", "lamb", "--precision", "fp16")
    recipe += ("--checkpoint-activations",)
    cmd += ["-m", "model.cli", *_args(shards_dir, run, *recipe, steps=3)]
    cmd[cmd.index("--run")] = "--run-dir"
    done = subprocess.run(cmd, cwd=REPO, env=cli_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    records = metrics(run)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["mlm_loss"] == r["mlm_loss"] and r["nsp_acc"] is None for r in records)
    assert all(r["loss_scale"] == 2.0**16 for r in records)
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    assert ckpt["world_size"] == 2 and ckpt["train_config"]["optimizer"] == "lamb"
    assert ckpt["scaler"]["scale"] == 2.0**16 and ckpt["train_config"]["precision"] == "fp16"
    assert ckpt["train_config"]["checkpoint_activations"] is True


def test_berts_two_phases_export_then_init_on_longer_rows(shards_dir, tmp_path, make_shards):
    """Phase 1 on rows of up to 64 pieces, exported; phase 2 from that export on rows of up to
    128 (the same vocab): the weights carry over, the step count and the optimizer start anew,
    and the run records the second set."""
    phase1, export = str(tmp_path / "phase1"), str(tmp_path / "export")
    assert main(_args(shards_dir, phase1, steps=3)) == 0
    assert main(["export", "--ckpt", os.path.join(phase1, "last.pt"), "--out", export]) == 0
    longer = make_shards(str(tmp_path / "longer"), num_shards=2, max_len=128)
    phase2 = str(tmp_path / "phase2")
    assert main(_args(longer, phase2, "--init", export, "--lr", "1e-10", steps=2)) == 0
    first, second = (load_checkpoint(os.path.join(r, "last.pt")) for r in (phase1, phase2))
    assert second["step"] == 2 and second["loader_position"] == 2
    assert second["shard_set"]["directory"] == longer
    for name in ("bert.embeddings.word.weight", "bert.layers.1.ffn_out.weight", "nsp.weight"):
        torch.testing.assert_close(second["model"][name], first["model"][name], atol=1e-6, rtol=0)
    assert open_shards(longer).shard_config.max_seq_length == 128


def test_a_model_of_its_own_shape_trains_exports_and_keeps_its_shape(shards_dir, tmp_path, capsys):
    """--model mini --layers 3 --hidden 192: a model of 3 layers, hidden 192, 3 heads (one per
    64) and a feed-forward of 768, at mini's learning rate; exported in that shape, which
    transformers loads; a resume with another shape is refused naming the run's."""
    run = str(tmp_path / "shaped")
    shape = ("--model", "mini", "--layers", "3", "--hidden", "192")
    assert main(_args(shards_dir, run, *shape, steps=2)) == 0
    ckpt = load_checkpoint(os.path.join(run, "last.pt"))
    m = ckpt["model_config"]
    assert (m["num_layers"], m["hidden_size"], m["num_heads"], m["intermediate_size"]) == (
        3,
        192,
        3,
        768,
    )
    assert ckpt["train_config"]["lr"] == 5e-4  # mini's
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(run, "last.pt"), "--out", out]) == 0
    transformers = pytest.importorskip("transformers")
    config = transformers.BertForPreTraining.from_pretrained(out).config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (3, 192, 3)
    capsys.readouterr()
    again = _args(shards_dir, run, "--model", "mini", "--layers", "4", "--hidden", "192", steps=4)
    assert main([*again, "--resume"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "a 'mini' model of 3 layers, hidden 192, 3 heads, these flags make one of 4 layers, "
            "hidden 192, 3 heads; resume with --model mini (make: MODEL=mini) --layers 3 --hidden "
            "192 --heads 3"
        )
    )
