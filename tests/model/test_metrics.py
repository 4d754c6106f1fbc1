"""The fine-tuning metrics on hand-checked cases: accuracy, F1, entity F1, the SQuAD scores,
Matthews, Pearson and Spearman."""

from __future__ import annotations

import pytest

from model.finetune.metrics import (
    accuracy,
    binary_f1,
    entity_f1,
    entity_spans,
    matthews_corrcoef,
    normalize_answer,
    pearson,
    spearman,
    squad_scores,
)


def test_accuracy_and_binary_f1():
    assert accuracy(["1", "0", "1", "1"], ["1", "0", "0", "1"]) == 0.75
    # tp 2, fp 1, fn 1 -> 2*2 / (2*2 + 1 + 1)
    assert binary_f1(["1", "1", "1", "0", "0"], ["1", "1", "0", "1", "0"]) == pytest.approx(4 / 6)
    assert binary_f1(["0", "0"], ["1", "0"]) == 0.0


def test_entity_spans_read_iob1_iob2_and_iobes():
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 2), ("LOC", 3, 4)}
    assert entity_spans(["I-PER", "I-PER", "O", "I-LOC"]) == {("PER", 0, 2), ("LOC", 3, 4)}
    assert entity_spans(["B-PER", "B-PER", "I-LOC"]) == {
        ("PER", 0, 1),
        ("PER", 1, 2),
        ("LOC", 2, 3),
    }
    assert entity_spans(["S-ORG", "B-PER", "E-PER", "O"]) == {("ORG", 0, 1), ("PER", 1, 3)}


def test_entity_f1_counts_exact_spans_only():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"]]  # PER cut short: wrong
    scores = entity_f1(pred, gold)
    assert scores["precision"] == pytest.approx(2 / 3) and scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)


def test_squad_metrics_follow_the_official_script():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an Apple a day") == "apple day"
    scores = squad_scores(
        {"q1": "the Eiffel Tower", "q2": "in Paris France", "q3": "nothing"},
        {"q1": ["Eiffel Tower"], "q2": ["Paris", "Paris, France"], "q3": ["x"], "q4": ["y"]},
    )
    # q1 exact; q2 best gold "Paris, France": p 2/3, r 1 -> f1 0.8; q3 wrong; q4 unanswered
    assert scores["exact_match"] == pytest.approx(25.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8) / 4)


def test_matthews_correlation_as_glue_reports_it():
    # tp 2, tn 1, fp 1, fn 1: (2 - 1) / sqrt(3 * 3 * 2 * 2) = 1/6
    pred, gold = ["1", "1", "1", "0", "0"], ["1", "1", "0", "1", "0"]
    assert matthews_corrcoef(pred, gold) == pytest.approx(1 / 6)
    assert matthews_corrcoef(gold, gold) == pytest.approx(1.0)
    assert matthews_corrcoef(["1"] * 4, ["1", "0", "1", "0"]) == 0.0  # one class predicted


def test_pearson_and_spearman_as_scipy_computes_them():
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0]
    assert pearson(x, y) == pytest.approx(0.8)
    assert spearman(x, y) == pytest.approx(0.8)
    # ties share their average rank: ranks [1.5, 1.5, 3, 4] against [1, 2, 3, 4]
    assert spearman([1.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(
        pearson([1.5, 1.5, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    )
    assert spearman([1.0, 4.0, 9.0, 16.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(1.0)
    assert pearson([1.0, 1.0], [1.0, 2.0]) == 0.0
