"""Export of a fine-tuned model: transformers' class of each task kind loads the directory
(`AutoModelForSequenceClassification`, `...TokenClassification`, `...QuestionAnswering`) and
gives the logits of the run's own model, its labels named, its tokenizer the run's."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from model.cli import main
from model.config import BertConfig
from model.finetune.encoder import TaskModel
from model.safe_load import load_weights
from tests.model.helpers import (
    finetune_args,
    one_line_error,
    write_conll,
    write_squad,
    write_sst2,
    write_stsb,
)

transformers = pytest.importorskip("transformers")

# task -> its data, the transformers class the export is, whether the head reads [CLS]
TASKS = {
    "sst2": (write_sst2, "BertForSequenceClassification", True),
    "stsb": (write_stsb, "BertForSequenceClassification", True),
    "ner": (write_conll, "BertForTokenClassification", False),
    "squad": (write_squad, "BertForQuestionAnswering", False),
}
AUTO = {
    "BertForSequenceClassification": "AutoModelForSequenceClassification",
    "BertForTokenClassification": "AutoModelForTokenClassification",
    "BertForQuestionAnswering": "AutoModelForQuestionAnswering",
}


@pytest.fixture(scope="module")
def tuned(pretrained_run, tmp_path_factory):
    """task -> (its data, a one-epoch fine-tuning run of it), each made once for the module."""
    made: dict[str, tuple[str, str]] = {}

    def make(task: str) -> tuple[str, str]:
        if task not in made:
            where = tmp_path_factory.mktemp(task)
            data = TASKS[task][0](str(where / "data"), np.random.default_rng(5))
            run = str(where / "run")
            extra = ("--max-seq-length", "32", "--doc-stride", "8") if task == "squad" else ()
            args = finetune_args(task, data, pretrained_run, run, "--epochs", "1", *extra)
            assert main(args) == 0
            made[task] = data, run
        return made[task]

    return make


def _ours(run: str) -> tuple[TaskModel, dict]:
    saved = load_weights(os.path.join(run, "best.pt"))
    cfg = BertConfig(**saved["encoder"]["model_config"])
    outputs = saved["model"]["head.weight"].shape[0]
    pooled = TASKS[saved["config"]["task"]][2]
    model = TaskModel(cfg, outputs, torch.Generator().manual_seed(0), pooled)
    model.load_state_dict(saved["model"])
    return model.eval(), saved


def _texts(task: str) -> list:
    if task == "stsb":
        return [("the film was good .", "the film was awful , long ."), ("bad", "great")]
    return ["John visited the old River in Paris , and Mary works at Google .", "the film ."]


@pytest.mark.parametrize("task", list(TASKS))
def test_transformers_loads_the_fine_tuned_export_with_the_same_logits(
    task, tuned, pretrained_run, tmp_path
):
    _, run = tuned(task)
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(run, "best.pt"), "--out", out]) == 0
    ours, saved = _ours(run)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == [TASKS[task][1]] and config["finetuning_task"] == task
    theirs = getattr(transformers, AUTO[TASKS[task][1]]).from_pretrained(out).eval()
    assert type(theirs).__name__ == TASKS[task][1]
    # The tokenizer is the vocab the encoder was pre-trained with.
    with (
        open(os.path.join(out, "vocab.txt")) as a,
        open(os.path.join(pretrained_run, "vocab.txt")) as b,
    ):
        assert a.read() == b.read()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    texts = _texts(task)
    pairs = [list(t) for t in zip(*texts, strict=True)] if isinstance(texts[0], tuple) else [texts]
    batch = tokenizer(*pairs, padding=True, return_tensors="pt")
    assert batch["attention_mask"].eq(0).any()  # padding is part of the comparison
    inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        mine, got = ours(*inputs), theirs(**batch)
    if task == "squad":
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(got.start_logits[real], mine[..., 0][real], atol=1e-5, rtol=0)
        torch.testing.assert_close(got.end_logits[real], mine[..., 1][real], atol=1e-5, rtol=0)
        return
    if task == "ner":
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(got.logits[real], mine[real], atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(got.logits, mine, atol=1e-5, rtol=0)
    if task == "stsb":
        assert theirs.config.problem_type == "regression" and theirs.config.num_labels == 1
    else:  # the run's labels, as its files write them
        assert [theirs.config.id2label[i] for i in range(len(saved["labels"]))] == saved["labels"]


def test_the_export_labels_the_dev_set_as_the_run_did(tuned, tmp_path):
    """SST-2 end to end: transformers' pipeline on the exported directory predicts each dev
    sentence's label as the run's dev_predictions.tsv says (tokenizing, truncation and head)."""
    data, run = tuned("sst2")
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(run, "best.pt"), "--out", out]) == 0
    with open(os.path.join(data, "dev.tsv")) as f:
        sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    with open(os.path.join(run, "dev_predictions.tsv")) as f:
        predicted = [line.split("\t")[1] for line in f.read().splitlines()[1:]]
    classify = transformers.pipeline("text-classification", model=out, device="cpu")
    got = classify(sentences, truncation=True, max_length=128)
    assert [g["label"] for g in got] == predicted


def test_a_fine_tuning_folder_is_named_with_the_checkpoint_to_pass(tuned, tmp_path, capsys):
    _, run = tuned("ner")
    assert main(["export", "--ckpt", run, "--out", str(tmp_path / "a")]) == 2
    line = one_line_error(capsys)
    assert f"--ckpt {run} is a fine-tuning run folder" in line
    assert f"--ckpt {os.path.join(run, 'best.pt')}" in line
    assert not (tmp_path / "a").exists()


def test_fine_tuning_from_the_export_starts_a_new_head(tuned, tmp_path, capsys):
    data, run = tuned("sst2")
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(run, "best.pt"), "--out", out]) == 0
    capsys.readouterr()
    again = finetune_args("sst2", data, "unused", str(tmp_path / "again"), "--epochs", "1")
    again[again.index("--ckpt") + 1] = out
    assert main(again) == 0
    said = capsys.readouterr().out
    assert (
        "note: ignored 2 weight(s) with no place here (classifier.bias, classifier.weight)" in said
    )
    # the export's encoder, shape and vocab carried over into the new run's record
    tuned_again = load_weights(os.path.join(tmp_path, "again", "best.pt"))["encoder"]
    first = load_weights(os.path.join(run, "best.pt"))["encoder"]
    assert tuned_again == first
