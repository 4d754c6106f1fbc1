"""The SQuAD scorer agrees exactly with the official v1.1 script's rules (`evaluate-v1.1.py`,
reimplemented here line by line) on randomised inputs: missing predictions, gold answers that
normalise to empty, several gold answers, punctuation, articles and case."""

from __future__ import annotations

import re
import string
from collections import Counter

import numpy as np
import pytest

from model.finetune.metrics import squad_scores


def official_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1(prediction, ground_truth):
    prediction_tokens = official_normalize(prediction).split()
    ground_truth_tokens = official_normalize(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_em(prediction, ground_truth):
    return official_normalize(prediction) == official_normalize(ground_truth)


def official_evaluate(dataset, predictions):
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue  # "Unanswered question ... will receive score 0."
                ground_truths = [x["text"] for x in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += max(official_em(prediction, g) for g in ground_truths)
                f1 += max(official_f1(prediction, g) for g in ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


WORDS = ["The", "the", "a", "An", "Paris", "paris,", "France", "!", "", " ", "river", "old", "--"]


def random_text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(0, 5))))


@pytest.mark.parametrize("seed", range(20))
def test_scorer_matches_the_official_v11_rules(seed):
    rng = np.random.default_rng(seed)
    qas, predictions = [], {}
    for i in range(int(rng.integers(1, 30))):
        qid = f"q{i}"
        golds = [random_text(rng) for _ in range(int(rng.integers(1, 4)))]
        qas.append({"id": qid, "answers": [{"text": g} for g in golds]})
        if rng.random() < 0.7:  # the rest are missing predictions
            predictions[qid] = random_text(rng)
    dataset = [{"paragraphs": [{"qas": qas}]}]
    got = squad_scores(predictions, {q["id"]: [a["text"] for a in q["answers"]] for q in qas})
    want = official_evaluate(dataset, predictions)
    assert got == pytest.approx(want, abs=1e-9)


def test_a_missing_prediction_counts_zero_even_when_the_gold_normalises_to_empty():
    answers = {"q1": ["The"], "q2": ["Paris"]}
    assert squad_scores({}, answers) == {"exact_match": 0.0, "f1": 0.0}
    # An empty prediction that is given does match "The" exactly, as in the official script.
    assert squad_scores({"q1": ""}, answers)["exact_match"] == 50.0
