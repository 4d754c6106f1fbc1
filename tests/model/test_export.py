"""Export: transformers.BertForPreTraining.from_pretrained loads the directory and gives the
same outputs, and its tokenizer the same ids."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from model.bert import BertForPreTraining
from model.cli import main
from model.config import BertConfig
from model.data import LoaderConfig, PretrainingData, open_shards
from model.export import hf_state_dict
from model.finetune.features import load_tokenizer
from model.run_dir import load_checkpoint

transformers = pytest.importorskip("transformers")


def test_transformers_loads_the_export_with_the_same_outputs(pretrained_run, shards_dir, tmp_path):
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 0
    ckpt = load_checkpoint(os.path.join(pretrained_run, "last.pt"))
    ours = BertForPreTraining(BertConfig(**ckpt["model_config"]))
    ours.load_state_dict(ckpt["model"])
    # The weights are a safetensors file (no pickle to run code), the tensors those of the run.
    assert os.path.exists(os.path.join(out, "model.safetensors"))
    assert not os.path.exists(os.path.join(out, "pytorch_model.bin"))
    written = load_file(os.path.join(out, "model.safetensors"))
    want = hf_state_dict(ckpt["model"], BertConfig(**ckpt["model_config"]))
    assert written.keys() == want.keys()
    assert all(torch.equal(written[k], want[k]) for k in want)
    theirs = transformers.BertForPreTraining.from_pretrained(out)
    ours.eval(), theirs.eval()
    batch = PretrainingData(open_shards(shards_dir), [0], LoaderConfig(batch_size=8)).batch(0)
    assert batch["attention_mask"].eq(0).any()  # padding is part of the comparison
    inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        mlm, nsp = ours(*inputs)
        got = theirs(input_ids=inputs[0], token_type_ids=inputs[1], attention_mask=inputs[2])
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got.prediction_logits[real], mlm[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(got.seq_relationship_logits, nsp, atol=1e-5, rtol=0)


def test_the_fill_mask_pipeline_predicts_what_the_run_does(pretrained_run, tmp_path):
    """transformers' `pipeline("fill-mask", model=DIR)`, the usual first look at a pre-trained
    BERT, on the export: the pieces the run's own model ranks first at the mask, in order."""
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 0
    text = "The river runs through the old [MASK] and into the sea."
    got = [p["token"] for p in transformers.pipeline("fill-mask", model=out, top_k=5)(text)]
    ckpt = load_checkpoint(os.path.join(pretrained_run, "last.pt"))
    ours = BertForPreTraining(BertConfig(**ckpt["model_config"])).eval()
    ours.load_state_dict(ckpt["model"])
    tokenizer = load_tokenizer(os.path.join(pretrained_run, "vocab.txt"), lowercase=True)
    ids = torch.tensor([tokenizer.encode(text).ids])
    with torch.no_grad():
        mlm, _ = ours(ids, torch.zeros_like(ids), torch.ones_like(ids))
    at = ids[0].tolist().index(tokenizer.token_to_id("[MASK]"))
    assert len(set(got)) == 5 and got == mlm[0, at].topk(5).indices.tolist()


def test_exported_tokenizer_gives_the_same_ids(pretrained_run, tmp_path):
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 0
    theirs = transformers.BertTokenizer.from_pretrained(out)
    ours = load_tokenizer(os.path.join(pretrained_run, "vocab.txt"), lowercase=True)
    text = "John visited the old River in Paris, and Mary works at Google."
    assert theirs(text)["input_ids"] == ours.encode(text).ids


def test_export_refuses_a_checkpoint_without_its_vocab(pretrained_run, tmp_path, capsys):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(os.path.join(pretrained_run, "last.pt"), lonely / "last.pt")
    assert main(["export", "--ckpt", str(lonely / "last.pt"), "--out", str(tmp_path / "x")]) == 2
    assert "vocab.txt does not exist" in capsys.readouterr().err
