"""What a kind of fine-tuning task is to the loop (`model.finetune.loop`): the few things in
which classification, tagging, span extraction and multiple choice differ. The kinds are
`classify.Classify` and `classify.Regress` (GLUE), `tag.Tag` (CoNLL NER), `spans.Spans` and
`spans.Spans2` (SQuAD v1.1 and 2.0) and `choose.Choose` (SWAG).

A feature is a dict as `model.finetune.features` makes it (`ids`, `types`, `label`, and what the
kind needs to read its predictions back; a multiple-choice feature holds its sequences under
`choices` instead); `predict` turns features into logits, one numpy array each: the head's
outputs for the sequence (a pooled kind), for each of its positions, or one per choice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import torch

from model.finetune.config import FinetuneConfig

Predict = Callable[[list[dict]], list[np.ndarray]]


class Task(ABC):
    """A task's features, labels and notes, and what its kind does with them."""

    pooled = True  # the head reads the pooled `[CLS]` (one output per sequence), else each position
    head_dropout = True  # dropout between the encoder and the head
    max_seq_length = 128  # --max-seq-length when not given
    choices = 0  # a feature's sequences scored against each other (multiple choice); 0: one
    metric: str  # the dev metric that picks best.pt

    def __init__(self, train: list[dict], dev: list[dict], labels: list[str], notes: list[str]):
        self.train, self.dev = train, dev
        self.labels = labels  # class or tag names by index (saved with the weights)
        self.notes = notes  # what reading the files skipped, said before training

    @classmethod
    @abstractmethod
    def read(cls, cfg: FinetuneConfig, tok) -> Task:
        """The task's training and dev sets from `cfg.data`, as features."""

    @property
    def num_labels(self) -> int:
        """The head's outputs per sequence or position."""
        return len(self.labels)

    def batch_labels(self, features: list[dict], length: int) -> np.ndarray:
        """The labels of a batch padded to `length` positions: one per sequence by default."""
        return np.array([f["label"] for f in features], np.int64)

    @abstractmethod
    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The training loss of a batch's logits."""

    @abstractmethod
    def evaluate(self, predict: Predict) -> dict[str, float]:
        """The dev metrics; keeps the dev predictions for `outputs`."""

    @abstractmethod
    def outputs(self) -> dict[str, str]:
        """The run directory's prediction files of the last evaluation: name -> text."""

    def label_test(self, predict: Predict) -> dict[str, str]:
        """--predict's labelled test files: name -> text (none unless the kind has them)."""
        return {}
