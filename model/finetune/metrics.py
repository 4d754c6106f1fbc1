"""The standard fine-tuning metrics: accuracy, F1, Matthews, Pearson and Spearman correlation
(GLUE), entity-level F1 (conlleval), exact match and token F1 (the official SQuAD v1.1
evaluation)."""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np


def accuracy(pred: Sequence, gold: Sequence) -> float:
    if len(pred) != len(gold):
        raise ValueError(f"{len(pred)} predictions for {len(gold)} gold labels")
    return sum(p == g for p, g in zip(pred, gold, strict=True)) / max(len(gold), 1)


def binary_f1(pred: Sequence, gold: Sequence, positive: str = "1") -> float:
    """F1 of the positive class (GLUE's MRPC and QQP report it beside accuracy)."""
    tp = sum(p == positive and g == positive for p, g in zip(pred, gold, strict=True))
    fp = sum(p == positive and g != positive for p, g in zip(pred, gold, strict=True))
    fn = sum(p != positive and g == positive for p, g in zip(pred, gold, strict=True))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews_corrcoef(pred: list[str], gold: list[str], positive: str = "1") -> float:
    """Matthews correlation of a binary labelling, GLUE's CoLA metric (0 when a margin is
    empty, as scikit-learn's matthews_corrcoef)."""
    tp = sum(p == positive and g == positive for p, g in zip(pred, gold, strict=True))
    tn = sum(p != positive and g != positive for p, g in zip(pred, gold, strict=True))
    fp = sum(p == positive and g != positive for p, g in zip(pred, gold, strict=True))
    fn = sum(p != positive and g == positive for p, g in zip(pred, gold, strict=True))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def pearson(x: list[float], y: list[float]) -> float:
    """Pearson correlation (0 when either side is constant)."""
    a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum()) / denominator if denominator else 0.0


def _ranks(x: list[float]) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (as scipy.stats.rankdata)."""
    a = np.asarray(x, np.float64)
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and a[order[j + 1]] == a[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman rank correlation: Pearson's of the ranks."""
    return pearson(list(_ranks(x)), list(_ranks(y)))


def _split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type) as conlleval splits a tag: at its first "-"; a tag without one is its
    own prefix with no type ("O")."""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


# IOBES read as IOB2, as taggers that train on IOBES do before running conlleval: conlleval
# itself has no S- tags (it would join "S-PER S-PER" into one entity).
_IOBES_AS_IOB2 = {"S": "B", "E": "I"}


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) of every entity in a tag sequence, by conlleval's chunk rules for
    IOB1 and IOB2 (B-X always begins an entity; I-X continues an entity of type X or begins
    one; anything else ends it) and IOBES read as IOB2 (S-X as B-X, E-X as I-X). Ill-formed
    sequences ("O I-X", "B-X I-Y") are read as conlleval reads them."""
    spans, start, kind = set(), 0, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, typ = _split_tag(tag)
        prefix = _IOBES_AS_IOB2.get(prefix, prefix)
        inside = prefix in ("B", "I")
        begins = prefix == "B" or (inside and typ != kind)
        if kind is not None and (not inside or begins):
            spans.add((kind, start, i))
            kind = None
        if inside and kind is None:
            start, kind = i, typ
    return spans


def entity_f1(pred: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 over entities of all sentences (exact type and span)."""
    tp = n_pred = n_gold = 0
    for p, g in zip(pred, gold, strict=True):
        ps, gs = entity_spans(p), entity_spans(g)
        tp, n_pred, n_gold = tp + len(ps & gs), n_pred + len(ps), n_gold + len(gs)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: dict[str, str], answers: dict[str, list[str]]) -> dict[str, float]:
    """Exact match and F1 in percent as the official SQuAD v1.1 `evaluate-v1.1.py` computes
    them: each the best over a question's gold answers, averaged over every gold question; a
    question with no prediction counts 0 (it is not scored as the empty string, which would
    match a gold answer that normalises to empty, such as "The")."""
    em = f1 = 0.0
    for qid, golds in answers.items():
        if qid not in predictions:
            continue
        pred = predictions[qid]
        em += max(float(normalize_answer(pred) == normalize_answer(g)) for g in golds)
        f1 += max(squad_f1(pred, g) for g in golds)
    n = max(len(answers), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}


def squad2_scores(predictions: dict[str, str], answers: dict[str, list[str]]) -> dict[str, float]:
    """Exact match and F1 in percent as the official SQuAD 2.0 `evaluate-v2.0.py` computes
    them: gold answers that normalise to empty are dropped, and a question left with none (an
    unanswerable one) has the empty string for its only gold; F1 is token F1, or, where either
    side has no tokens, 1 if both have none. Over every question, and apart over the answerable
    (`HasAns_`) and the unanswerable (`NoAns_`), with their counts. A question with no
    prediction counts 0, as in `squad_scores`."""
    exact, f1, has = {}, {}, {}
    for qid, golds in answers.items():
        golds = [g for g in golds if normalize_answer(g)]
        has[qid] = bool(golds)
        pred = predictions.get(qid)
        if pred is None:
            exact[qid] = f1[qid] = 0.0
            continue
        exact[qid] = max(
            float(normalize_answer(pred) == normalize_answer(g)) for g in golds or [""]
        )
        f1[qid] = max(_squad2_f1(pred, g) for g in golds or [""])
    out = {"exact_match": _mean(exact, answers), "f1": _mean(f1, answers), "total": len(answers)}
    for prefix, subset in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in answers if has[q] == subset]
        if qids:
            out.update(
                {
                    f"{prefix}_exact": _mean(exact, qids),
                    f"{prefix}_f1": _mean(f1, qids),
                    f"{prefix}_total": len(qids),
                }
            )
    return out


def _squad2_f1(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred or not gold:
        return float(pred == gold)
    return squad_f1(prediction, truth)


def _mean(scores: dict[str, float], qids) -> float:
    qids = list(qids)
    return 100.0 * sum(scores[q] for q in qids) / max(len(qids), 1)
