"""GLUE `--predict`: the test files labelled in the layout the GLUE server takes (one file per
task named as the server names it, a header `index prediction`, the test rows' own ids, the
task's label names), by the best checkpoint; refused before training when it cannot be done."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from model.cli import main
from tests.model.helpers import finetune_args, write_mnli, write_sst2


def read_rows(path: str) -> list[list[str]]:
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f]


def write_test(directory: str, name: str, header: str, rows: list[str]) -> None:
    with open(os.path.join(directory, name), "w") as f:
        f.write(header + "\n" + "".join(r + "\n" for r in rows))


def test_sst2_test_set_labelled_as_the_glue_server_takes_it(pretrained_run, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    # Test rows: the dev sentences without their labels, under ids of their own.
    dev = read_rows(os.path.join(data, "dev.tsv"))[1:]
    ids = [str(1000 + 7 * i) for i in range(len(dev))]
    rows = [f"{i}\t{sentence}" for i, (sentence, _) in zip(ids, dev, strict=True)]
    write_test(data, "test.tsv", "index\tsentence", rows)
    run = str(tmp_path / "sst2")
    capsys.readouterr()
    args = finetune_args("sst2", data, pretrained_run, run, "--epochs", "6", "--predict")
    assert main([*args, "--log-every", "4"]) == 0
    out = capsys.readouterr().out
    rows = read_rows(os.path.join(run, "SST-2.tsv"))
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == ids
    assert {r[1] for r in rows[1:]} <= {"0", "1"}
    # The best checkpoint labels the test rows: on these (the dev sentences) it scores exactly
    # the dev accuracy of best.json.
    right = np.mean([r[1] == label for r, (_, label) in zip(rows[1:], dev, strict=True)])
    with open(os.path.join(run, "best.json")) as f:
        assert right == pytest.approx(json.load(f)["scores"]["accuracy"]) and right >= 0.9
    assert f"labelled {os.path.join(run, 'SST-2.tsv')} for the GLUE server" in out
    # Fine-tuning prints a progress line with its rate and ETA, as pre-training does.
    lines = out.splitlines()
    progress = [line for line in lines if line.startswith("sst2 step ") and "eta" in line]
    assert progress and all(" seq/s eta " in line and "[" in line for line in progress)


def test_mnli_labels_matched_and_mismatched_with_its_label_names(pretrained_run, tmp_path):
    data = write_mnli(str(tmp_path / "MNLI"), np.random.default_rng(1))
    header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2"
    for name, n in (("test_matched.tsv", 5), ("test_mismatched.tsv", 4)):
        pair = "the film was good .\tthe film was bad ."
        rows = [f"{i}\t{i}\t{i}e\tfiction\t{pair}" for i in range(n)]
        write_test(data, name, header, rows)
    run = str(tmp_path / "mnli")
    assert main(finetune_args("mnli", data, pretrained_run, run, "--epochs", "1", "--predict")) == 0
    for name, n in (("MNLI-m.tsv", 5), ("MNLI-mm.tsv", 4)):
        rows = read_rows(os.path.join(run, name))
        assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [
            str(i) for i in range(n)
        ]
        assert {r[1] for r in rows[1:]} <= {"contradiction", "entailment", "neutral"}


def test_predict_is_refused_before_training_when_it_cannot_be_done(
    pretrained_run, tmp_path, capsys
):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(2))
    run = tmp_path / "r"
    assert main(finetune_args("sst2", data, pretrained_run, str(run), "--predict")) == 2
    assert f"{data}: no test.tsv for --predict to label" in capsys.readouterr().err
    assert not run.exists()
    write_test(data, "test.tsv", "index\tsentence", ["0\ta good film", "1\tstray\ttab"])
    assert main(finetune_args("sst2", data, pretrained_run, str(run), "--predict")) == 2
    err = capsys.readouterr().err
    assert "test.tsv: 1 row(s) with the wrong number of fields" in err and not run.exists()
    assert main(finetune_args("ner", data, pretrained_run, str(run), "--predict")) == 2
    assert "--predict labels GLUE test files" in capsys.readouterr().err


@pytest.mark.parametrize("task, index", [("qqp", "id"), ("cola", "index")])
def test_each_task_reads_its_own_test_header(tmp_path, task, index):
    from model.finetune.readers import GLUE_TASKS, read_glue_test

    spec = GLUE_TASKS[task]
    path = tmp_path / "test.tsv"
    texts = ["a good film", "a bad film"][: len(spec.text_columns)]
    path.write_text(f"{index}\t" + "\t".join(spec.text_columns) + "\n5\t" + "\t".join(texts) + "\n")
    assert read_glue_test(str(path), task) == (["5"], [tuple(texts)])
