"""The GLUE tasks: one or two sentences classified (cross-entropy), or scored (STS-B: mean
squared error), from the pooled `[CLS]`. Dev predictions and --predict's test labels are
written in the layout the GLUE server takes."""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F

from model.finetune.config import FinetuneConfig
from model.finetune.features import sequence_features
from model.finetune.hub import (
    HUB_TASKS,
    holds_hub_layout,
    holds_xnli_layout,
    read_split,
    read_xnli,
    split_files,
)
from model.finetune.metrics import accuracy, binary_f1, matthews_corrcoef, pearson, spearman
from model.finetune.readers import (
    DEV_WHOLE,
    GLUE_TASKS,
    GlueTask,
    data_files,
    read_glue_test,
    read_tsv,
)
from model.finetune.task import Predict, Task


class Classify(Task):
    """A GLUE classification task: accuracy on dev, F1 of `1` (MRPC, QQP), Matthews
    correlation (CoLA), and the further dev sets (MNLI mismatched) scored beside."""

    def __init__(self, spec: GlueTask, train: list[dict], dev: list[dict], gold: list, notes):
        super().__init__(train, dev, list(spec.labels), notes)
        self.spec, self.gold = spec, gold
        self.metric = "mcc" if spec.mcc else "accuracy"
        # further dev sets (MNLI mismatched): suffix -> (features, gold labels)
        self.extra_dev: dict[str, tuple[list[dict], list]] = {}
        # --predict: the GLUE server's file name -> (the test rows' ids, their features)
        self.test: dict[str, tuple[list[str], list[dict]]] = {}
        self.files: dict[str, str] = {}
        # `by_column`'s value of each dev row, per dev set ("" the dev file, else its suffix)
        self.by: dict[str, list[str]] = {}

    @classmethod
    def read(cls, cfg: FinetuneConfig, tok) -> Classify:
        spec = GLUE_TASKS[cfg.task]
        xnli = spec.by_column and holds_xnli_layout(cfg.data)  # the Hub's, a folder a language
        hub = not xnli and holds_hub_layout(cfg.data)
        if hub and spec.by_column:
            raise ValueError(
                f"--data {cfg.data}: Parquet splits, and --task {cfg.task} reads TSV files or "
                f"the Hub's folder of a folder per language: give the folder of its train.tsv "
                f"and {spec.dev_file}, or of en/, de/, ..."
            )
        if xnli:
            train, dev, notes = read_xnli(cfg.data, "train"), read_xnli(cfg.data, "validation"), []
        elif hub:  # the Hugging Face Hub's Parquet files (`model.finetune.hub`)
            train = read_split(cfg.data, cfg.task, "train")[1]
            dev = read_split(cfg.data, cfg.task, HUB_TASKS[cfg.task].dev)[1]
            notes = []
        else:
            train, dev, notes = cls._read_tsv(cfg, spec)
        target = cls._target(spec)

        def features(rows):
            labels = [target(r[-1]) for r in rows]
            return sequence_features(tok, [r[:-1] for r in rows], labels, cfg.max_seq_length)

        dev, by = cls._split_by(spec, dev)
        gold = [cls._gold(r[-1]) for r in dev]
        task = cls(spec, features(train), features(dev), gold, notes)
        task.by[""] = by
        if xnli:
            rows, task.by["test"] = cls._split_by(spec, read_xnli(cfg.data, "test"))
            task.extra_dev["test"] = (features(rows), [r[-1] for r in rows])
        else:
            task._read_extra_dev(cfg, features, hub)
        if cfg.predict:
            task._read_test(cfg, tok, hub)
        return task

    @staticmethod
    def _read_tsv(cfg: FinetuneConfig, spec: GlueTask):
        """GLUE's own TSV files: the training and dev rows, and a note of skipped rows."""
        train_path, dev_path = data_files(cfg.task, cfg.data, [("train.tsv",), (spec.dev_file,)])
        columns = (*spec.text_columns, spec.label_column)
        train, skipped = read_tsv(train_path, columns, spec.labels, spec.names)
        dev_columns = (spec.by_column, *columns) if spec.by_column else columns
        dev, _ = read_tsv(dev_path, dev_columns, spec.labels, spec.names, whole=DEV_WHOLE)
        notes = [f"{train_path}: skipped {skipped} malformed row(s)"] if skipped else []
        return train, dev, notes

    @staticmethod
    def _split_by(spec: GlueTask, rows: list) -> tuple[list, list[str]]:
        """Dev rows read with `by_column` first -> the rows without it, and its values."""
        if not spec.by_column:
            return rows, []
        return [r[1:] for r in rows], [r[0] for r in rows]

    @staticmethod
    def _target(spec: GlueTask):
        """A label as the file writes it -> the model's target: its class index."""
        return {name: i for i, name in enumerate(spec.labels)}.__getitem__

    @staticmethod
    def _gold(label: str):
        return label

    def _read_extra_dev(self, cfg: FinetuneConfig, features, hub: bool) -> None:
        columns = (*self.spec.text_columns, self.spec.label_column)
        if self.spec.by_column:
            columns = (self.spec.by_column, *columns)
        extra = HUB_TASKS[cfg.task].extra_dev if hub else self.spec.extra_dev
        for suffix, name in extra:
            path = os.path.join(cfg.data, name)
            if not (split_files(cfg.data, name) if hub else os.path.exists(path)):
                said = f"{name}.parquet" if hub else name
                self.notes.append(f"{cfg.data}: no {said}, so no {suffix} dev scores")
                continue
            if hub:
                rows = read_split(cfg.data, cfg.task, name)[1]
            else:
                rows = read_tsv(path, columns, self.spec.labels, self.spec.names, DEV_WHOLE)[0]
            rows, self.by[suffix] = self._split_by(self.spec, rows)
            self.extra_dev[suffix] = (features(rows), [r[-1] for r in rows])

    def _read_test(self, cfg: FinetuneConfig, tok, hub: bool) -> None:
        splits = HUB_TASKS[cfg.task].test if hub else [name for name, _ in self.spec.test_files]
        for name, (_, server_name) in zip(splits, self.spec.test_files, strict=True):
            path = os.path.join(cfg.data, name)
            if not (split_files(cfg.data, name) if hub else os.path.exists(path)):
                said = f"{name}.parquet" if hub else name
                raise FileNotFoundError(f"{cfg.data}: no {said} for --predict to label")
            if hub:
                ids, texts = read_split(cfg.data, cfg.task, name, test=True)
            else:
                ids, texts = read_glue_test(path, cfg.task)
            features = sequence_features(tok, texts, [0] * len(texts), cfg.max_seq_length)
            self.test[server_name] = (ids, features)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels)

    def predicted(self, logits: list[np.ndarray]) -> list[str]:
        """Each row's predicted label, as the task's files write it."""
        return [self.labels[int(x.argmax())] for x in logits]

    def scores(self, logits: list[np.ndarray], gold: list[str], by=()) -> dict[str, float]:
        """The dev scores; with `by` (each row's `by_column` value), each value's accuracy
        too (`accuracy_de`)."""
        pred = self.predicted(logits)
        scores = {"accuracy": accuracy(pred, gold)}
        if self.spec.f1:
            scores["f1"] = binary_f1(pred, gold, positive="1")
        if self.spec.mcc:
            scores["mcc"] = matthews_corrcoef(pred, gold, positive="1")
        for value in sorted(set(by)):
            rows = [i for i, v in enumerate(by) if v == value]
            scores[f"accuracy_{value}"] = accuracy([pred[i] for i in rows], [gold[i] for i in rows])
        return scores

    def evaluate(self, predict: Predict) -> dict[str, float]:
        logits = predict(self.dev)
        scores = self.scores(logits, self.gold, self.by.get("", ()))
        self.files["dev_predictions.tsv"] = dev_tsv(self.predicted(logits), self.gold)
        for suffix, (features, gold) in self.extra_dev.items():
            more = predict(features)
            self.files[f"dev_predictions_{suffix}.tsv"] = dev_tsv(self.predicted(more), gold)
            for k, v in self.scores(more, gold, self.by.get(suffix, ())).items():
                scores[f"{k}_{suffix}"] = v
        return scores

    def outputs(self) -> dict[str, str]:
        return self.files

    def test_labels(self, logits: list[np.ndarray]) -> list[str]:
        """Each test row's label as the GLUE server takes it."""
        return self.predicted(logits)

    def label_test(self, predict: Predict) -> dict[str, str]:
        """The GLUE server's file name -> its text: a header `index prediction`, then per test
        row its id and the predicted label as the task's files write it (STS-B: the score)."""
        out = {}
        for name, (ids, features) in self.test.items():
            pred = self.test_labels(predict(features))
            rows = "".join(f"{i}\t{p}\n" for i, p in zip(ids, pred, strict=True))
            out[name] = "index\tprediction\n" + rows
        return out


class Regress(Classify):
    """STS-B: a score on the pooled `[CLS]` by mean squared error; dev Pearson and Spearman
    correlation, test scores with three decimals."""

    def __init__(self, spec: GlueTask, train: list[dict], dev: list[dict], gold: list, notes):
        super().__init__(spec, train, dev, gold, notes)
        self.metric = "pearson"

    @staticmethod
    def _target(spec: GlueTask):
        return float

    @staticmethod
    def _gold(label: str):
        return float(label)

    @property
    def num_labels(self) -> int:
        return 1

    def batch_labels(self, features: list[dict], length: int) -> np.ndarray:
        return np.array([f["label"] for f in features], np.float32)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(logits.float().squeeze(-1), labels.float())

    def evaluate(self, predict: Predict) -> dict[str, float]:
        pred = [float(x[0]) for x in predict(self.dev)]
        self.files["dev_predictions.tsv"] = dev_tsv(pred, self.gold)
        return {"pearson": pearson(pred, self.gold), "spearman": spearman(pred, self.gold)}

    def test_labels(self, logits: list[np.ndarray]) -> list[str]:
        return [f"{float(x[0]):.3f}" for x in logits]


def dev_tsv(pred: list, gold: list) -> str:
    """Dev predictions in the GLUE server's layout (index, prediction), the gold label beside."""
    rows = [f"{i}\t{p}\t{g}\n" for i, (p, g) in enumerate(zip(pred, gold, strict=True))]
    return "index\tprediction\tlabel\n" + "".join(rows)
