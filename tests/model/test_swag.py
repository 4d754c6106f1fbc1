"""SWAG (`--task swag`, multiple choice): four endings scored from their pooled [CLS], the
right one learned, accuracy and dev predictions written; the export is transformers'
`BertForMultipleChoice` with the run's scores; a malformed file is refused naming it."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
import torch

from model.cli import main
from model.config import BertConfig
from model.finetune.encoder import TaskModel
from model.safe_load import load_weights
from tests.model.helpers import REPO, finetune_args, one_line_error, results

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source"]
HEADER += ["ending0", "ending1", "ending2", "ending3", "label"]


def write_swag(directory: str, rng: np.random.Generator, rows: int = 48) -> str:
    """A learnable SWAG: the ending that follows says the film was good, the others bad."""
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train.csv", rows), ("val.csv", 16)):
        with open(os.path.join(directory, name), "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(HEADER)
            for i in range(n):
                label = int(rng.integers(4))
                endings = [f"said it was {rng.choice(['bad', 'awful'])} ." for _ in range(4)]
                endings[label] = f"said it was {rng.choice(['good', 'great'])} ."
                subject = str(rng.choice(["the man", "a woman", "the critic"]))
                sent1 = f"{subject} watched the film ."
                row = [i, f"v{i}", i, f"{sent1} {subject}", sent1, subject, "gold"]
                out.writerow([*row, *endings, label])
    return directory


def test_swag_learns_the_ending_that_follows(pretrained_run, tmp_path):
    data = write_swag(str(tmp_path / "swag"), np.random.default_rng(0))
    run = str(tmp_path / "run")
    assert main(finetune_args("swag", data, pretrained_run, run, "--epochs", "6")) == 0
    assert results(run)["accuracy"] >= 0.9
    with open(os.path.join(run, "dev_predictions.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    with open(os.path.join(data, "val.csv"), newline="") as f:
        gold = [r["label"] for r in csv.DictReader(f)]
    assert [r[2] for r in rows] == gold and {r[1] for r in rows} <= {"0", "1", "2", "3"}
    right = sum(r[1] == r[2] for r in rows) / len(rows)
    assert right == pytest.approx(results(run)["accuracy"])
    # exported: transformers' BertForMultipleChoice gives the run's own scores
    transformers = pytest.importorskip("transformers")
    out = str(tmp_path / "hf")
    assert main(["export", "--ckpt", os.path.join(run, "best.pt"), "--out", out]) == 0
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["architectures"] == ["BertForMultipleChoice"]
    theirs = transformers.AutoModelForMultipleChoice.from_pretrained(out).eval()
    saved = load_weights(os.path.join(run, "best.pt"))
    ours = TaskModel(BertConfig(**saved["encoder"]["model_config"]), 1, torch.Generator())
    ours.load_state_dict(saved["model"])
    tok = transformers.AutoTokenizer.from_pretrained(out)
    firsts = ["the man watched the film ."] * 4
    seconds = [f"the man said it was {w} ." for w in ("good", "bad", "quite awful", "great")]
    batch = tok(firsts, seconds, padding=True, return_tensors="pt")
    assert batch["attention_mask"].eq(0).any()
    with torch.no_grad():
        mine = ours.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        got = theirs(**{k: v.unsqueeze(0) for k, v in batch.items()}).logits
    torch.testing.assert_close(got, mine.view(1, 4), atol=1e-5, rtol=0)


def test_a_malformed_swag_file_is_refused_naming_it(pretrained_run, tmp_path, capsys):
    data = write_swag(str(tmp_path / "swag"), np.random.default_rng(1), rows=4)
    train = os.path.join(data, "train.csv")
    with open(train) as f:
        lines = f.read().splitlines()
    with open(train, "w") as f:
        f.write("\n".join([*lines[:3], lines[3].rsplit(",", 1)[0] + ",7"]) + "\n")
    args = finetune_args("swag", data, pretrained_run, str(tmp_path / "r"))
    assert main(args) == 2
    assert f"{train}:4: label '7' is not the index of an ending, 0 to 3" in one_line_error(capsys)
    with open(train, "w") as f:
        f.write("sent1,sent2,label\nA,B,0\n")
    assert main(args) == 2
    line = one_line_error(capsys)
    assert f"{train}: no column(s) ending0, ending1, ending2, ending3 in the header" in line
    assert not (tmp_path / "r").exists()


def test_the_hubs_swag_fine_tunes_as_its_csv(pretrained_run, tmp_path, capsys):
    """The bundled sample (sample/finetune/swag, what `make finetune TASK=swag` reads: 40
    training and 12 dev situations, original text) fine-tunes; and in the Hub's `swag`
    (regular) layout, Parquet splits with the CSV's columns and an integer label, the same
    rows give the same run, file for file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = os.path.join(REPO, "sample", "finetune", "swag")
    hub = tmp_path / "hub"
    hub.mkdir()
    for name, split in (("train.csv", "train"), ("val.csv", "validation")):
        with open(os.path.join(data, name), newline="") as f:
            rows = [{**r, "label": int(r["label"])} for r in csv.DictReader(f)]
        pq.write_table(pa.Table.from_pylist(rows), hub / f"{split}-00000-of-00001.parquet")
    runs = [str(tmp_path / "csv"), str(tmp_path / "parquet")]
    for source, run in zip((data, str(hub)), runs, strict=True):
        assert main(finetune_args("swag", source, pretrained_run, run, "--epochs", "1")) == 0
    for name in ("dev_predictions.tsv", "results.json"):
        with open(os.path.join(runs[0], name)) as a, open(os.path.join(runs[1], name)) as b:
            assert a.read() == b.read()
    with open(os.path.join(runs[0], "dev_predictions.tsv")) as f:
        assert len(f.read().splitlines()) == 1 + 12
    assert 0 <= results(runs[0])["accuracy"] <= 1
    rows[1]["label"] = 5
    bad = hub / "validation-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    assert main(finetune_args("swag", str(hub), pretrained_run, str(tmp_path / "r"))) == 2
    assert f"{bad}: row 2: label 5 is not the index of an ending" in one_line_error(capsys)
