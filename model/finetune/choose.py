"""Multiple choice (SWAG, the paper's section 4.4): a situation and four endings, the one that
follows to be picked. Each ending is read beside the situation, `[CLS] sent1 [SEP] sent2 ending
[SEP]`, and scored from its pooled `[CLS]` by one output of the head; a softmax over the four
scores is trained by cross-entropy, as the paper's run_swag and transformers'
`BertForMultipleChoice` do. Dev: accuracy, the predictions in the GLUE server's layout."""

from __future__ import annotations

import csv

import torch
import torch.nn.functional as F

from model.finetune.classify import dev_tsv
from model.finetune.config import FinetuneConfig
from model.finetune.features import sequence_features
from model.finetune.hub import holds_hub_layout, split_paths
from model.finetune.metrics import accuracy
from model.finetune.readers import data_files, read_parquet, utf8_text
from model.finetune.task import Predict, Task

ENDINGS = ("ending0", "ending1", "ending2", "ending3")
COLUMNS = ("sent1", "sent2", *ENDINGS, "label")  # SWAG's train.csv and val.csv, as published


class Choose(Task):
    """One score per ending, four endings a feature (`choices`)."""

    metric = "accuracy"
    choices = len(ENDINGS)

    def __init__(self, train: list[dict], dev: list[dict]):
        super().__init__(train, dev, [str(i) for i in range(self.choices)], [])
        self.files: dict[str, str] = {}

    @classmethod
    def read(cls, cfg: FinetuneConfig, tok) -> Choose:
        if holds_hub_layout(cfg.data, ("train.csv",)):  # the Hub's `swag` (regular) in Parquet
            train, dev = (read_swag_split(cfg.data, s) for s in ("train", "validation"))
        else:
            paths = data_files(cfg.task, cfg.data, [("train.csv",), ("val.csv",)])
            train, dev = (read_swag(p) for p in paths)

        def features(rows):
            pairs = [(r["sent1"], f"{r['sent2']} {r[e]}") for r in rows for e in ENDINGS]
            flat = sequence_features(tok, pairs, [0] * len(pairs), cfg.max_seq_length)
            out = []
            for i, r in enumerate(rows):
                choices = flat[i * cls.choices : (i + 1) * cls.choices]
                cut = next((c["truncated"] for c in choices if c["truncated"]), None)
                out.append({"choices": choices, "label": int(r["label"]), "truncated": cut})
            return out

        return cls(features(train), features(dev))

    @property
    def num_labels(self) -> int:
        return 1  # a score per ending

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().view(-1, self.choices), labels)

    def evaluate(self, predict: Predict) -> dict[str, float]:
        pred = [str(int(x.argmax())) for x in predict(self.dev)]
        gold = [str(f["label"]) for f in self.dev]
        self.files["dev_predictions.tsv"] = dev_tsv(pred, gold)
        return {"accuracy": accuracy(pred, gold)}

    def outputs(self) -> dict[str, str]:
        return self.files


def read_swag(path: str) -> list[dict]:
    """SWAG's CSV (a header row naming its columns); a missing column, or a label that is not
    one of the endings' indices 0-3, is refused naming the file (and the line)."""
    with utf8_text(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: no column(s) {', '.join(missing)} in the header {reader.fieldnames}; "
                "--task swag reads SWAG's train.csv and val.csv as published"
            )
        rows = []
        for row in reader:
            if row["label"] not in ("0", "1", "2", "3"):
                raise ValueError(
                    f"{path}:{reader.line_num}: label {row['label']!r} is not the index of an "
                    "ending, 0 to 3"
                )
            rows.append(row)
    return rows


def read_swag_split(directory: str, split: str) -> list[dict]:
    """A split of the Hub's `swag` (its regular configuration) in Parquet: the CSV's columns,
    the label an integer; checked as `read_swag` checks the CSV, naming the file and row."""
    rows = []
    for path in split_paths(directory, "swag", split):
        table = read_parquet(path, COLUMNS, "--task swag reads SWAG's columns")
        for i, row in enumerate(table.to_pylist()):
            if row["label"] not in (0, 1, 2, 3) or isinstance(row["label"], bool):
                raise ValueError(
                    f"{path}: row {i + 1}: label {row['label']!r} is not the index of an ending, "
                    "0 to 3"
                )
            rows.append({**row, "label": str(row["label"])})
    return rows
