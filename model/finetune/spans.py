"""Span extraction (SQuAD v1.1, and 2.0 with its unanswerable questions): an answer's start and
end in the context, two logits per position; scored as the official evaluate-v1.1.py (and
evaluate-v2.0.py), with predictions.json and nbest_predictions.json as the paper's run_squad.py
writes them."""

from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F

from model.finetune.config import FinetuneConfig
from model.finetune.features import span_features
from model.finetune.hub import holds_hub_layout, split_paths
from model.finetune.metrics import squad2_scores, squad_scores
from model.finetune.readers import SquadExample, answer_is_aligned, data_files, read_squad
from model.finetune.task import Predict, Task


class Spans(Task):
    """Start and end logits per position, each trained by cross-entropy over the positions."""

    pooled = False
    # No dropout before the span head: neither the paper's run_squad.py nor transformers'
    # BertForQuestionAnswering has one.
    head_dropout = False
    max_seq_length = 384
    metric = "f1"
    files = (("train-v1.1.json", "train.json"), ("dev-v1.1.json", "dev.json"))
    v2 = False  # SQuAD 2.0: questions may have no answer (`Spans2`)

    def __init__(self, train, dev, examples: list[SquadExample], notes, max_answer: int):
        super().__init__(train, dev, [], notes)
        self.examples, self.max_answer = examples, max_answer  # the dev questions
        self.nbest: dict[str, list[dict]] = {}  # the last evaluation's n best spans by question

    @classmethod
    def read(cls, cfg: FinetuneConfig, tok) -> Spans:
        train_path, train, dev = cls._read_files(cfg)
        # As the paper's run_squad.py: a training answer whose answer_start does not point at
        # its text is skipped (training on it would teach the wrong span), and counted.
        aligned = [ex for ex in train if answer_is_aligned(ex)]
        notes = []
        if len(aligned) < len(train):
            notes.append(
                f"{train_path}: skipped {len(train) - len(aligned)} of {len(train)} question(s) "
                "whose answer_start does not point at the answer text"
            )
        args = (cfg.max_seq_length, cfg.doc_stride, cfg.max_query_length)
        train_f = span_features(tok, aligned, *args)
        dev_f = span_features(tok, dev, *args)
        return cls(train_f, dev_f, dev, notes, cfg.max_answer_length)

    @classmethod
    def _read_files(cls, cfg: FinetuneConfig) -> tuple[str, list, list]:
        """The training file (or folder) and the training and dev questions: SQuAD's JSON, or
        the Hugging Face Hub's Parquet splits (`train-*.parquet`, `validation-*.parquet`, as
        `rajpurkar/squad` publishes them) where the folder holds no JSON of either."""
        if holds_hub_layout(cfg.data, cls.files[0]):
            train, dev = (
                [
                    ex
                    for path in split_paths(cfg.data, cfg.task, s)
                    for ex in read_squad(path, cls.v2)
                ]
                for s in ("train", "validation")
            )
            return cfg.data, train, dev
        train_path, dev_path = data_files(cfg.task, cfg.data, list(cls.files))
        return train_path, read_squad(train_path, cls.v2), read_squad(dev_path, cls.v2)

    @property
    def num_labels(self) -> int:
        return 2

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        start, end = logits.float().unbind(-1)
        return (F.cross_entropy(start, labels[:, 0]) + F.cross_entropy(end, labels[:, 1])) / 2

    def evaluate(self, predict: Predict) -> dict[str, float]:
        self.nbest = span_nbest(self.dev, predict(self.dev), self.examples, self.max_answer)
        gold = {ex.qid: list(ex.answers) for ex in self.examples}
        return squad_scores(self.predictions(), gold)

    def predictions(self) -> dict[str, str]:
        """Question id -> the best span's text."""
        return {qid: spans[0]["text"] for qid, spans in self.nbest.items()}

    def outputs(self) -> dict[str, str]:
        def text(obj) -> str:
            return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"

        # predictions.json: the official format, question id -> answer text
        return {
            "predictions.json": text(self.predictions()),
            "nbest_predictions.json": text(self.nbest),
        }


class Spans2(Spans):
    """SQuAD 2.0 (`--task squad2`), as the paper's run_squad.py with --version_2_with_negative:
    an unanswerable question's windows, like any window without the answer, are trained to
    point at `[CLS]`; a question is answered with no answer ("") where its null score (the
    start and end logits of `[CLS]`, the smallest over its windows) is above its best span's
    score (a threshold of 0.0, run_squad.py's default); scored as evaluate-v2.0.py. Beside the
    predictions, null_odds.json holds each question's null score less its best span's score,
    the file evaluate-v2.0.py's --na-prob-file takes to search for the best threshold."""

    files = (("train-v2.0.json", "train.json"), ("dev-v2.0.json", "dev.json"))
    v2 = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.null_odds: dict[str, float] = {}

    def evaluate(self, predict: Predict) -> dict[str, float]:
        logits = predict(self.dev)
        self.nbest = span_nbest(self.dev, logits, self.examples, self.max_answer)
        null = {}
        for f, x in zip(self.dev, logits, strict=True):
            score = float(x[0, 0] + x[0, 1])
            null[f["example"]] = min(score, null.get(f["example"], score))
        self.null_odds = {}
        for n, ex in enumerate(self.examples):
            spans = self.nbest.get(ex.qid)
            best = spans[0]["start_logit"] + spans[0]["end_logit"] if spans else -float("inf")
            self.null_odds[ex.qid] = null[n] - best
        gold = {ex.qid: list(ex.answers) for ex in self.examples}
        return squad2_scores(self.predictions(), gold)

    def predictions(self) -> dict[str, str]:
        """Question id -> the best span's text, or "" (no answer) where the null score wins."""
        return {
            ex.qid: "" if self.null_odds[ex.qid] > 0.0 else self.nbest[ex.qid][0]["text"]
            for ex in self.examples
        }

    def outputs(self) -> dict[str, str]:
        out = super().outputs()
        out["null_odds.json"] = json.dumps(self.null_odds, indent=2) + "\n"
        return out


def span_nbest(
    features, logits, examples, max_answer: int, top: int = 20, n_best: int = 20
) -> dict[str, list[dict]]:
    """Per question: its `n_best` valid spans (start <= end, at most `max_answer` tokens,
    inside the context) over all its windows, best first, one per distinct text, each with its
    text cut from the context, start and end logits and probability (a softmax over the n best
    scores, as the paper's run_squad.py writes nbest_predictions.json)."""
    found: dict[int, list[tuple[float, str, float, float]]] = {}
    for f, x in zip(features, logits, strict=True):
        lo, hi = f["context_start"], f["context_start"] + len(f["offsets"])
        starts = [i for i in np.argsort(-x[:, 0])[:top] if lo <= i < hi]
        ends = [i for i in np.argsort(-x[:, 1])[:top] if lo <= i < hi]
        ctx = examples[f["example"]].context
        for s in starts:
            for e in ends:
                if s <= e < s + max_answer:
                    text = ctx[f["offsets"][s - lo][0] : f["offsets"][e - lo][1]]
                    a, b = float(x[s, 0]), float(x[e, 1])
                    found.setdefault(f["example"], []).append((a + b, text, a, b))
    out = {}
    for n, candidates in found.items():
        candidates.sort(key=lambda c: -c[0])  # stable: among equal scores the first found wins
        kept, seen = [], set()
        for c in candidates:
            if c[1] not in seen:
                seen.add(c[1])
                kept.append(c)
            if len(kept) == n_best:
                break
        scores = np.array([c[0] for c in kept])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        out[examples[n].qid] = [
            {"text": t, "probability": float(p), "start_logit": a, "end_logit": b}
            for (_, t, a, b), p in zip(kept, probs, strict=True)
        ]
    return out
