"""Starting from a Hugging Face BERT directory: our export read back gives the identical
weights; a `transformers` model (a tiny random config, built here, nothing downloaded) saved
with `save_pretrained` gives the same outputs; missing heads are initialised and named; a vocab
other than the shards' is refused or, when asked, mapped by piece; unsupported configs and
pickles that are not plain weights are refused in one line."""

from __future__ import annotations

import json
import os
import shlex

import numpy as np
import pytest
import torch

from model.bert import BertForPreTraining
from model.cli import main
from model.config import BertConfig
from model.hf_import import load_pretrained
from model.run_dir import load_checkpoint
from schemas.vocab import Vocab
from tests.model.helpers import VOCAB, finetune_args, one_line_error, results, write_sst2

transformers = pytest.importorskip("transformers")


def tiny_hf_config(vocab_size: int = len(VOCAB), **overrides):
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return transformers.BertConfig(**{**fields, **overrides})


def save_hf(
    directory, cls, vocab: Vocab = VOCAB, weights: str = "model.safetensors", seed=0, **config
):
    """A `transformers` model of class `cls` saved as `save_pretrained` does, with its vocab;
    `weights="pytorch_model.bin"` writes the pickled state dict that older versions wrote."""
    torch.manual_seed(seed)
    model = cls(tiny_hf_config(len(vocab), **config)).eval()
    model.save_pretrained(str(directory))
    if weights == "pytorch_model.bin":
        os.remove(os.path.join(directory, "model.safetensors"))
        torch.save(model.state_dict(), os.path.join(directory, weights))
    (directory / "vocab.txt").write_text(vocab.to_text())
    return model


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(7, len(VOCAB), (3, 12), generator=g)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # padding takes part in the comparison
    ids[1, 8:] = VOCAB.special_ids.pad
    return ids, types, mask


def ours(directory) -> tuple[BertForPreTraining, object]:
    imported = load_pretrained(str(directory))
    model = BertForPreTraining(imported.cfg)
    model.load_state_dict(imported.state)
    return model.eval(), imported


def test_our_export_reads_back_as_identical_weights(pretrained_run, tmp_path):
    ckpt_path = os.path.join(pretrained_run, "last.pt")
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", ckpt_path, "--out", out]) == 0
    ckpt = load_checkpoint(ckpt_path)
    imported = load_pretrained(out)
    assert imported.cfg == BertConfig(**ckpt["model_config"])
    assert imported.state.keys() == ckpt["model"].keys()
    assert all(torch.equal(imported.state[k], ckpt["model"][k]) for k in ckpt["model"])
    assert imported.initialised == () and imported.ignored == () and imported.report() == ""
    assert imported.vocab.sha256 == ckpt["vocab"]["sha256"] and imported.lowercase is True


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_transformers_bert_for_pretraining_gives_the_same_logits(tmp_path, weights):
    theirs = save_hf(tmp_path, transformers.BertForPreTraining, weights=weights)
    model, imported = ours(tmp_path)
    assert imported.initialised == ()
    ids, types, mask = inputs()
    with torch.no_grad():
        mlm, nsp = model(ids, types, mask)
        got = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    torch.testing.assert_close(mlm, got.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(nsp, got.seq_relationship_logits, atol=1e-5, rtol=0)


def test_a_bert_for_masked_lm_gets_its_pooler_and_nsp_head_initialised(tmp_path):
    theirs = save_hf(tmp_path, transformers.BertForMaskedLM, weights="pytorch_model.bin")
    model, imported = ours(tmp_path)
    assert imported.initialised == ("pooler", "next-sentence head")
    assert imported.report() == f"no pooler, next-sentence head in {tmp_path}: initialised"
    ids, types, mask = inputs()
    with torch.no_grad():
        mlm, _ = model(ids, types, mask)
        got = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    torch.testing.assert_close(mlm, got.logits, atol=1e-5, rtol=0)


def test_a_bert_model_gets_its_heads_initialised_and_reported(tmp_path, shards_dir, capsys):
    theirs = save_hf(tmp_path / "hf", transformers.BertModel)
    model, imported = ours(tmp_path / "hf")
    assert imported.initialised == ("masked-LM head", "next-sentence head")
    ids, types, mask = inputs()
    with torch.no_grad():
        h, pooled = model.bert(ids, types, mask)
        got = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    torch.testing.assert_close(h, got.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(pooled, got.pooler_output, atol=1e-5, rtol=0)
    # The heads are a new model's: BERT's initialisation, seeded (the same seed, the same heads).
    fresh = BertForPreTraining(imported.cfg, generator=torch.Generator().manual_seed(0))
    assert torch.equal(imported.state["nsp.weight"], fresh.state_dict()["nsp.weight"])
    assert torch.equal(imported.state["mlm.bias"], torch.zeros(len(VOCAB)))

    # Pre-training from it: one note line names what was initialised; the encoder starts from
    # the directory's weights (a learning rate of 1e-10 leaves them where they were).
    run = str(tmp_path / "run")
    capsys.readouterr()
    args = ["pretrain", "--shards", shards_dir, "--run", run, "--init", str(tmp_path / "hf")]
    args += ["--steps", "2", "--batch-size", "8", "--lr", "1e-10", "--eval-batches", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"from {tmp_path / 'hf'}: 2 layers, hidden 32" in out
    assert f"| a new run from its weights -> {run}" in out and "from scratch" not in out
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    hf = tmp_path / "hf"
    assert notes == [f"note: no masked-LM head, next-sentence head in {hf}: initialised"]
    state = load_checkpoint(os.path.join(run, "last.pt"))["model"]
    for name in ("bert.embeddings.word.weight", "bert.layers.1.attention.qkv.weight"):
        torch.testing.assert_close(state[name], imported.state[name], atol=1e-7, rtol=0)
    # Resuming that run without --init is refused, with the make spelling of the flag.
    assert main([*args[:5], "--steps", "4", "--resume", "--eval-batches", "1"]) == 2
    err = capsys.readouterr().err
    assert f"the run started from {tmp_path / 'hf'}; resume it with --init {tmp_path / 'hf'}" in err
    assert f"(make: ARGS='--init {tmp_path / 'hf'}')" in err


def test_a_vocab_other_than_the_shards_is_refused_naming_both(tmp_path, shards_dir, capsys):
    other = Vocab((*VOCAB.pieces, "extra"))
    save_hf(tmp_path / "hf", transformers.BertForPreTraining, vocab=other)
    run = tmp_path / "run"
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--init", str(tmp_path / "hf")]
    capsys.readouterr()  # transformers' own progress bar while saving
    assert main([*args, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"bert-model pretrain: error: {tmp_path / 'hf'}/vocab.txt has {len(other)} pieces (sha256 "
        f"{other.sha256[:12]}) but the shards in {shards_dir} use {len(VOCAB)} (sha256 "
        f"{VOCAB.sha256[:12]}); build the shards with its vocab (make shards "
        f"VOCAB={shlex.quote(f'{tmp_path}/hf/vocab.txt')}), or pass --init-map-vocab (make: "
        "ARGS=--init-map-vocab) to map the embedding rows by piece"
    )
    assert not (run / "last.pt").exists()


@pytest.mark.parametrize("lowercases", [False, True])
def test_a_model_of_the_other_casing_than_the_shards_is_refused(
    tmp_path, make_shards, capsys, lowercases
):
    """The same vocab, the text of another casing: a cased model on lowercased shards, or an
    uncased one on shards built with --cased."""
    save_hf(tmp_path / "hf", transformers.BertForPreTraining)
    (tmp_path / "hf" / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": lowercases})
    )
    shards = make_shards(str(tmp_path / "shards"), num_shards=2, lowercase=not lowercases)
    run = tmp_path / "run"
    args = ["pretrain", "--shards", shards, "--run", str(run), "--init", str(tmp_path / "hf")]
    capsys.readouterr()
    assert main([*args, "--steps", "1"]) == 2
    line = one_line_error(capsys)
    if lowercases:
        said = "its tokenizer lowercases (do_lower_case true), but the shards in "
        assert f"{said}{shards} were built with --cased; build them lowercased" in line
    else:
        said = "its tokenizer keeps case (do_lower_case false), but the shards in "
        assert f"{said}{shards} were built lowercased, accents stripped" in line
        assert "with --cased (make shards ARGS=--cased)" in line
    assert not run.exists()


def test_init_map_vocab_moves_embedding_rows_by_piece(tmp_path):
    # Theirs: our pieces reversed (the specials kept first), less two, plus two of its own.
    specials, words = VOCAB.pieces[:7], VOCAB.pieces[7:]
    theirs_vocab = Vocab((*specials, "zebra", *reversed(words[2:]), "yak"))
    theirs = save_hf(tmp_path, transformers.BertForPreTraining, vocab=theirs_vocab)
    imported = load_pretrained(str(tmp_path), seed=3, vocab=VOCAB, map_vocab=True)
    assert imported.cfg.vocab_size == len(VOCAB) and imported.vocab == VOCAB
    word = theirs.bert.embeddings.word_embeddings.weight.detach()
    bias = theirs.cls.predictions.bias.detach()
    fresh = BertForPreTraining(imported.cfg, generator=torch.Generator().manual_seed(3))
    for i, piece in enumerate(VOCAB.pieces):
        if piece in theirs_vocab.index:
            j = theirs_vocab.index[piece]
            assert torch.equal(imported.state["bert.embeddings.word.weight"][i], word[j])
            assert imported.state["mlm.bias"][i] == bias[j]
        else:  # the two words theirs lacks: a new model's rows
            want = fresh.state_dict()["bert.embeddings.word.weight"][i]
            assert torch.equal(imported.state["bert.embeddings.word.weight"][i], want)
    assert imported.report() == (
        f"embedding rows mapped by piece: {len(VOCAB) - 2} of {len(VOCAB)} pieces found in its "
        f"vocab of {len(theirs_vocab)}, 2 initialised"
    )
    # Without the flag the same directory is refused.
    with pytest.raises(ValueError, match="has 73 pieces .* but the shards use 73"):
        load_pretrained(str(tmp_path), vocab=VOCAB)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "roberta"}, "model_type 'roberta' is not supported"),
        ({"hidden_act": "gelu_new"}, "hidden_act 'gelu_new' is not supported"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
        ({"is_decoder": True}, "is_decoder is set; only the BERT encoder is supported"),
        ({"type_vocab_size": 1}, "type_vocab_size 1; BERT needs 2 segments"),
        ({"num_attention_heads": 5}, "hidden_size 32 does not divide into 5 heads"),
        ({"vocab_size": 80}, "vocab_size 80, but its vocab.txt has 73 pieces"),
    ],
)
def test_unsupported_configs_are_refused_in_one_line(tmp_path, capsys, change, message):
    save_hf(tmp_path / "hf", transformers.BertModel)
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    args = ["finetune", "--task", "sst2", "--data", str(tmp_path), "--ckpt", str(tmp_path / "hf")]
    capsys.readouterr()  # transformers' own progress bar while saving
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


class NotAWeight:
    pass


def test_a_pickle_that_is_not_plain_weights_is_not_run(tmp_path):
    save_hf(tmp_path, transformers.BertModel, weights="pytorch_model.bin")
    torch.save({"x": NotAWeight()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin: holds pickled code .*NotAWeight"):
        load_pretrained(str(tmp_path))


def test_a_directory_without_vocab_or_weights_says_what_is_missing(tmp_path):
    save_hf(tmp_path, transformers.BertModel)
    os.remove(tmp_path / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="no model.safetensors or pytorch_model.bin"):
        load_pretrained(str(tmp_path))
    os.remove(tmp_path / "vocab.txt")
    with pytest.raises(FileNotFoundError, match="no vocab.txt"):
        load_pretrained(str(tmp_path))


def test_finetune_from_an_export_equals_finetune_from_its_checkpoint(pretrained_run, tmp_path):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 0
    args = finetune_args("sst2", data, pretrained_run, str(tmp_path / "from-ckpt"), "--epochs", "1")
    assert main(args) == 0
    args = finetune_args("sst2", data, pretrained_run, str(tmp_path / "from-hf"), "--epochs", "1")
    args[args.index("--ckpt") + 1] = out
    assert main(args) == 0
    assert results(str(tmp_path / "from-hf")) == results(str(tmp_path / "from-ckpt"))
    a, b = (
        torch.load(tmp_path / r / "model.pt", weights_only=True) for r in ("from-ckpt", "from-hf")
    )
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_finetune_from_a_masked_lm_directory_names_the_new_pooler(tmp_path, capsys):
    save_hf(tmp_path / "hf", transformers.BertForMaskedLM)
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    capsys.readouterr()
    args = ["finetune", "--task", "sst2", "--data", data, "--ckpt", str(tmp_path / "hf")]
    assert main([*args, "--epochs", "1", "--max-seq-length", "64"]) == 0
    out = capsys.readouterr().out
    # Only the pooler matters here (the pre-training heads are not used), and the run directory
    # sits beside the model's directory, not inside it.
    assert f"note: no pooler in {tmp_path / 'hf'}: initialised" in out
    assert (tmp_path / "hf-finetune-sst2" / "results.json").exists()
    assert main([*args, "--epochs", "1"]) == 2
    assert "the model has 64 positions, fewer than --max-seq-length 128" in capsys.readouterr().err


def test_pretraining_refuses_positions_shorter_than_the_shards_rows(tmp_path, shards_dir, capsys):
    save_hf(tmp_path / "hf", transformers.BertModel, max_position_embeddings=32)
    args = ["pretrain", "--shards", shards_dir, "--run", str(tmp_path / "run")]
    capsys.readouterr()
    assert main([*args, "--init", str(tmp_path / "hf"), "--steps", "1"]) == 2
    assert (
        "max_position_embeddings 32 is shorter than the shards' rows of up to 64 tokens; build "
        "shards of at most that length (make shards SEQ_LEN=32)"
    ) in capsys.readouterr().err
