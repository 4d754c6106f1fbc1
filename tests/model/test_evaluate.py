"""`bert-model evaluate`: a run's checkpoint evaluated as the run evaluated it at its end, a
Hugging Face directory of the same weights the same, a masked-LM-only model on the masked LM,
and refusals."""

from __future__ import annotations

import json
import os

import pytest

import model.evaluate as evaluate_module
from model.cli import main
from schemas.vocab import Vocab
from tests.helpers import calls_to
from tests.model.helpers import one_line_error

transformers = pytest.importorskip("transformers")


def _evaluate(ckpt: str, shards: str, out: str, *extra: str) -> dict:
    assert main(["evaluate", "--ckpt", ckpt, "--shards", shards, "--out", out, *extra]) == 0
    with open(out) as f:
        return json.load(f)


def test_a_run_and_its_export_evaluate_as_the_run_did(pretrained_run, shards_dir, tmp_path, capsys):
    """The run held out the last shard and evaluated 5 batches of 16 rows; evaluate with the
    same settings gives its eval.json, from last.pt and from the export of it alike, and the
    export saved as a masked-LM model gives the masked-LM figures alone."""
    with open(os.path.join(pretrained_run, "eval.json")) as f:
        run = json.load(f)
    same = ("--batch-size", "16", "--eval-batches", "5")
    ckpt = os.path.join(pretrained_run, "last.pt")
    ours = _evaluate(ckpt, shards_dir, str(tmp_path / "ours.json"), *same)
    assert {k: v for k, v in ours.items() if k not in ("model", "precision")} == run
    assert ours["model"] == ckpt and ours["precision"] == "fp32"
    said = capsys.readouterr().out.strip().splitlines()[-1]
    assert said.startswith(f"{ckpt} on {shards_dir}: loss ") and "sequences 80" in said
    export = str(tmp_path / "hf")
    assert main(["export", "--ckpt", ckpt, "--out", export]) == 0
    theirs = _evaluate(export, shards_dir, str(tmp_path / "hf.json"), *same)
    for key in ("loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "sequences"):
        assert theirs[key] == pytest.approx(run[key], abs=1e-6), key
    masked_lm = str(tmp_path / "mlm")
    transformers.BertForMaskedLM.from_pretrained(export).save_pretrained(masked_lm)
    for name in ("vocab.txt", "tokenizer_config.json"):
        os.link(os.path.join(export, name), os.path.join(masked_lm, name))
    alone = _evaluate(masked_lm, shards_dir, str(tmp_path / "mlm.json"), *same)
    assert alone["nsp_acc"] is None and alone["mlm_loss"] == pytest.approx(run["mlm_loss"], 1e-6)
    every = _evaluate(ckpt, shards_dir, str(tmp_path / "all.json"), "--all-rows")
    assert every["sequences"] == 3 * 96 and len(every["held_out"]) == 3


def test_what_cannot_be_evaluated_is_refused_in_one_line(
    pretrained_run, shards_dir, tmp_path, capsys, make_shards
):
    ckpt = os.path.join(pretrained_run, "last.pt")
    vocab = Vocab.load(os.path.join(shards_dir, "vocab.txt"))
    other = make_shards(str(tmp_path / "other"), vocab=Vocab((*vocab.pieces, "extra")))
    cased = make_shards(str(tmp_path / "cased"), lowercase=False)  # the same vocab, kept case
    encoder = str(tmp_path / "encoder")
    export = str(tmp_path / "hf")
    assert main(["export", "--ckpt", ckpt, "--out", export]) == 0
    transformers.BertModel.from_pretrained(export).save_pretrained(encoder)
    os.link(os.path.join(export, "vocab.txt"), os.path.join(encoder, "vocab.txt"))
    capsys.readouterr()
    base = ["evaluate", "--ckpt", ckpt, "--shards", shards_dir]
    cases = [
        (["evaluate", "--ckpt", ckpt, "--shards", other], "was trained with another vocab"),
        (["evaluate", "--ckpt", encoder, "--shards", shards_dir], "has no masked-LM head"),
        (["evaluate", "--ckpt", ckpt, "--shards", cased], "were built with --cased; build"),
        ([*base, "--all-rows", "--holdout", "2"], "--all-rows evaluates every row of the set"),
        ([*base, "--holdout", "0"], "--holdout must be at least 1 (got 0)"),
        ([*base, "--eval-batches", "-1"], "--eval-batches must be 0 (every held-out row) or"),
        (["evaluate", "--ckpt", "gs://b/last.pt", "--shards", shards_dir], "a URL, but --ckpt"),
    ]
    for args, says in cases:
        assert main(args) == 2, args
        assert says in one_line_error(capsys), args


def test_several_models_are_evaluated_in_turn_each_checked_first(
    pretrained_run, shards_dir, tmp_path, capsys, monkeypatch
):
    """A run's checkpoint and its export in one command: a line and a JSON line each, the same
    figures; a model of another vocab among them stops the command before the first runs."""
    ckpt = os.path.join(pretrained_run, "last.pt")
    export = str(tmp_path / "hf")
    assert main(["export", "--ckpt", ckpt, "--out", export]) == 0
    out = str(tmp_path / "both.jsonl")
    args = ["evaluate", "--shards", shards_dir, "--eval-batches", "2", "--out", out]
    assert main([*args, "--ckpt", ckpt, export]) == 0
    with open(out) as f:
        ours, theirs = (json.loads(line) for line in f)
    assert (ours["model"], theirs["model"]) == (ckpt, export)
    assert theirs["mlm_loss"] == pytest.approx(ours["mlm_loss"], abs=1e-6)
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(" on ")[0] for line in lines[-2:]] == [ckpt, export]
    made = calls_to(monkeypatch, evaluate_module, "BertForPreTraining")
    again = str(tmp_path / "again.jsonl")
    args_again = [*args[:-2], "--out", again, "--ckpt", ckpt, export, ckpt]
    assert main(args_again) == 0
    with open(again) as f:  # a run's checkpoints share a model, made once, weights in turn
        assert [json.loads(line) for line in f][::2] == [ours, {**ours, "model": ckpt}]
    assert len(made) == 1
    vocab = Vocab.load(os.path.join(shards_dir, "vocab.txt"))
    other = str(tmp_path / "other")
    os.makedirs(other)
    transformers.BertForPreTraining(
        transformers.BertConfig(
            vocab_size=len(vocab) + 1,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=1,
            intermediate_size=64,
        )
    ).save_pretrained(other)
    with open(os.path.join(other, "vocab.txt"), "w") as f:
        f.write("\n".join((*vocab.pieces, "extra")) + "\n")
    capsys.readouterr()  # transformers' saving says its progress
    assert main([*args, "--ckpt", ckpt, other]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing evaluated, the first checkpoint neither
    assert captured.err.count("\n") == 1 and captured.err.strip().endswith(
        f"build the shards with its vocab (make shards VOCAB={other}/vocab.txt)"
    )  # no --init-map-vocab, which is pre-training's
