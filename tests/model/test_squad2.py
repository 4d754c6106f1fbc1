"""SQuAD 2.0 (`--task squad2`): evaluate-v2.0.py's scores, unanswerable questions read and
trained to point at [CLS], "" predicted where the null score wins, null_odds.json beside the
predictions; a 2.0 file given to --task squad names --task squad2."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from model.cli import main
from model.finetune.features import load_tokenizer, span_features
from model.finetune.metrics import squad2_scores
from model.finetune.readers import read_squad
from tests.model.helpers import REPO, finetune_args, one_line_error, results, write_squad


def test_scores_as_evaluate_v2():
    answers = {
        "q1": ["the cat"],  # "cat" matches once articles are dropped
        "q2": ["red house"],  # no answer predicted: 0
        "q3": [],  # unanswerable, "" predicted: 1
        "q4": [],  # unanswerable, an answer predicted: 0
        "q5": ["The"],  # normalises to empty: unanswerable, as evaluate-v2.0.py reads it
        "q6": ["big red house"],  # F1 0.8: 2 of 2 predicted tokens, 2 of 3 gold
    }
    predictions = {"q1": "cat", "q2": "", "q3": "", "q4": "blue", "q5": "", "q6": "red house"}
    scores = squad2_scores(predictions, answers)
    assert scores == pytest.approx(
        {
            "exact_match": 100 * 3 / 6,
            "f1": 100 * 3.8 / 6,
            "total": 6,
            "HasAns_exact": 100 * 1 / 3,
            "HasAns_f1": 100 * 1.8 / 3,
            "HasAns_total": 3,
            "NoAns_exact": 100 * 2 / 3,
            "NoAns_f1": 100 * 2 / 3,
            "NoAns_total": 3,
        }
    )


def write_squad2(directory: str, rng) -> str:
    """The v1.1 test set as SQuAD 2.0: every paragraph also asks a question it cannot answer."""
    write_squad(directory, rng)
    for old, new in (("train-v1.1.json", "train-v2.0.json"), ("dev-v1.1.json", "dev-v2.0.json")):
        with open(os.path.join(directory, old)) as f:
            doc = json.load(f)
        doc["version"] = "v2.0"
        for a, article in enumerate(doc["data"]):
            for p, paragraph in enumerate(article["paragraphs"]):
                for qa in paragraph["qas"]:
                    qa["is_impossible"] = False
                unanswerable = {"id": f"none-{a}-{p}", "question": "Who built the moon ?"}
                paragraph["qas"].append({**unanswerable, "answers": [], "is_impossible": True})
        with open(os.path.join(directory, new), "w") as f:
            json.dump(doc, f)
        os.unlink(os.path.join(directory, old))
    return directory


def test_squad2_trains_predicts_no_answer_by_the_null_score_and_scores(
    pretrained_run, tmp_path, capsys
):
    data = write_squad2(str(tmp_path / "squad2"), np.random.default_rng(2))
    dev = read_squad(os.path.join(data, "dev-v2.0.json"), v2=True)
    unanswerable = [ex for ex in dev if not ex.answers]
    assert unanswerable and all(ex.answer_start == -1 for ex in unanswerable)
    tok = load_tokenizer(os.path.join(pretrained_run, "vocab.txt"), lowercase=True)
    windows = span_features(tok, unanswerable, 32, 8, 64)
    assert len(windows) >= len(unanswerable) and all(w["label"] == (0, 0) for w in windows)
    run = str(tmp_path / "run")
    extra = ("--epochs", "4", "--max-seq-length", "32", "--doc-stride", "8")
    assert main(finetune_args("squad2", data, pretrained_run, run, *extra)) == 0
    with open(os.path.join(run, "predictions.json")) as f:
        predictions = json.load(f)
    with open(os.path.join(run, "null_odds.json")) as f:
        odds = json.load(f)
    assert set(predictions) == set(odds) == {ex.qid for ex in dev}
    assert all((predictions[q] == "") == (odds[q] > 0) for q in predictions)
    gold = {ex.qid: list(ex.answers) for ex in dev}
    scores = results(run)
    assert scores == pytest.approx(squad2_scores(predictions, gold))
    assert scores["NoAns_total"] == len(unanswerable) and scores["HasAns_total"] > 0
    # SQuAD 2.0 given to --task squad (as train.json and dev.json, names both read) is refused,
    # naming the task that reads it
    for old, new in (("train-v2.0.json", "train.json"), ("dev-v2.0.json", "dev.json")):
        os.rename(os.path.join(data, old), os.path.join(data, new))
    capsys.readouterr()
    assert main(finetune_args("squad", data, pretrained_run, str(tmp_path / "r"))) == 2
    line = one_line_error(capsys)
    assert "train.json: SQuAD v2.0 (unanswerable questions); only v1.1 is read by --task" in line
    assert line.endswith("pass --task squad2 for SQuAD 2.0")


def test_the_bundled_sample_fine_tunes(pretrained_run, tmp_path):
    """sample/finetune/squad2, what `make finetune TASK=squad2` reads: the v1.1 sample with a
    question each paragraph cannot answer."""
    data = os.path.join(REPO, "sample", "finetune", "squad2")
    dev = read_squad(os.path.join(data, "dev-v2.0.json"), v2=True)
    assert sum(not ex.answers for ex in dev) == 2 and len(dev) == 9
    run = str(tmp_path / "run")
    extra = ("--epochs", "1", "--max-seq-length", "64", "--doc-stride", "32")
    assert main(finetune_args("squad2", data, pretrained_run, run, *extra)) == 0
    assert results(run)["NoAns_total"] == 2 and results(run)["HasAns_total"] == 7
