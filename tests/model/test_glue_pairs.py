"""The sentence-pair GLUE tasks no other test fine-tunes: MRPC and QQP (accuracy, and F1 of the
positive class, "1"), QNLI and RTE (labels `entailment` / `not_entailment`) and WNLI, each read
from its own columns, fine-tuned for an epoch, its scores checked against the dev predictions
it writes beside the gold labels, and its test file labelled by `--predict` in the file the
GLUE server takes for it."""

from __future__ import annotations

import os

import numpy as np
import pytest

from model.cli import main
from tests.model.helpers import finetune_args, results


def indexed(i: int, a: str, b: str, y: str) -> str:
    """A row of QNLI, RTE or WNLI: index, the two sentences, the label."""
    return f"{i}\t{a}\t{b}\t{y}"


ENTAILMENT = ("not_entailment", "entailment")
# task: (header, a row's line from (index, first, second, label), labels (negative, positive))
PAIRS = {
    "mrpc": (
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        lambda i, a, b, y: f"{y}\t{i}\t{i + 1000}\t{a}\t{b}",
        ("0", "1"),
    ),
    "qqp": (
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        lambda i, a, b, y: f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{y}",
        ("0", "1"),
    ),
    "qnli": ("index\tquestion\tsentence\tlabel", indexed, ENTAILMENT),
    "rte": ("index\tsentence1\tsentence2\tlabel", indexed, ENTAILMENT),
    "wnli": ("index\tsentence1\tsentence2\tlabel", indexed, ("0", "1")),
}
# task: (test.tsv's header, a row's line from (id, first, second), the file --predict writes)
TESTS = {
    "mrpc": ("index\t#1 ID\t#2 ID\t#1 String\t#2 String", "{}\t1\t2\t{}\t{}", "MRPC.tsv"),
    "qqp": ("id\tquestion1\tquestion2", "{}\t{}\t{}", "QQP.tsv"),
    "qnli": ("index\tquestion\tsentence", "{}\t{}\t{}", "QNLI.tsv"),
    "rte": ("index\tsentence1\tsentence2", "{}\t{}\t{}", "RTE.tsv"),
    "wnli": ("index\tsentence1\tsentence2", "{}\t{}\t{}", "WNLI.tsv"),
}


def write_pairs(directory: str, task: str, rng: np.random.Generator) -> list[str]:
    """train.tsv (48 rows) and dev.tsv (16) in the task's layout: the second sentence repeats
    the first's adjective (the positive label) or says the other one; test.tsv holds dev's
    pairs under ids 500, 501, ... Returns dev's labels."""
    header, line, labels = PAIRS[task]
    os.makedirs(directory, exist_ok=True)
    gold, pairs = [], []
    for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
        rows = [header]
        for i in range(n):
            said = rng.choice(["good", "bad"])
            same = bool(i % 2)
            other = said if same else ("bad" if said == "good" else "good")
            first = f"the {rng.choice(['movie', 'film', 'plot'])} was {said} ."
            rows.append(line(i, first, f"it was {other} .", labels[same]))
            if name == "dev.tsv":
                gold.append(labels[same])
                pairs.append((first, f"it was {other} ."))
        with open(os.path.join(directory, name), "w") as f:
            f.write("\n".join(rows) + "\n")
    test_header, test_line, _ = TESTS[task]
    rows = [test_header] + [test_line.format(500 + i, a, b) for i, (a, b) in enumerate(pairs)]
    with open(os.path.join(directory, "test.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return gold


@pytest.mark.parametrize("task", sorted(PAIRS))
def test_a_pair_task_is_read_trained_and_scored_from_its_predictions(
    pretrained_run, tmp_path, task
):
    gold = write_pairs(str(tmp_path / task), task, np.random.default_rng(len(task)))
    run = str(tmp_path / "run")
    args = finetune_args(task, str(tmp_path / task), pretrained_run, run, "--epochs", "1")
    assert main([*args, "--predict"]) == 0
    with open(os.path.join(run, "dev_predictions.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    assert rows[0] == ["index", "prediction", "label"]
    assert [r[2] for r in rows[1:]] == gold
    negative, positive = PAIRS[task][2]
    said = [r[1] for r in rows[1:]]
    assert set(said) <= {negative, positive}
    scores = results(run)
    right = sum(p == g for p, g in zip(said, gold, strict=True))
    assert scores["accuracy"] == pytest.approx(right / len(gold))
    if task in ("mrpc", "qqp"):  # F1 of the positive class, as GLUE scores them
        hits = sum(p == g == positive for p, g in zip(said, gold, strict=True))
        predicted, actual = said.count(positive), gold.count(positive)
        f1 = 2 * hits / (predicted + actual) if predicted + actual else 0.0
        assert set(scores) == {"accuracy", "f1"} and scores["f1"] == pytest.approx(f1)
    else:
        assert set(scores) == {"accuracy"}
    # --predict: the test rows (dev's pairs) labelled by the best checkpoint, which is the
    # epoch's: the dev predictions again, under the test file's ids
    with open(os.path.join(run, TESTS[task][2])) as f:
        labelled = [line.rstrip("\n").split("\t") for line in f]
    assert labelled[0] == ["index", "prediction"]
    assert labelled[1:] == [[str(500 + i), p] for i, p in enumerate(said)]
