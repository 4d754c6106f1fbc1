"""Token tagging (CoNLL-2003 NER): a tag for every word, predicted on its first piece;
entity-level F1 on dev, the dev predictions in conlleval's layout."""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F

from model.finetune.config import FinetuneConfig
from model.finetune.features import IGNORE, token_features
from model.finetune.hub import holds_hub_layout, read_tagged
from model.finetune.metrics import entity_f1
from model.finetune.readers import data_files, read_conll
from model.finetune.task import Predict, Task


class Tag(Task):
    """A tag per position (cross-entropy where a word starts, none elsewhere); the tag set is
    the training file's."""

    pooled = False
    metric = "f1"

    def __init__(self, train, dev, labels: list[str], gold: list[list[str]], words: list):
        super().__init__(train, dev, labels, [])
        self.gold, self.words = gold, words  # the dev sentences' tags and words
        self.text = ""

    @classmethod
    def read(cls, cfg: FinetuneConfig, tok) -> Tag:
        names = [("train.txt",), ("dev.txt", "valid.txt")]
        if holds_hub_layout(cfg.data, names[0]):  # the Hub's Parquet files (`hub.read_tagged`)
            train_path, dev_path = (os.path.join(cfg.data, s) for s in ("train", "validation"))
            train = read_tagged(cfg.data, "train")
            dev = read_tagged(cfg.data, "validation")
        else:
            train_path, dev_path = data_files(cfg.task, cfg.data, names)
            train, dev = read_conll(train_path), read_conll(dev_path)
        labels = sorted({t for _, tags in train for t in tags})
        index = {name: i for i, name in enumerate(labels)}
        unknown = sorted({t for _, tags in dev for t in tags} - set(index))
        if unknown:
            raise ValueError(
                f"{dev_path}: tags {unknown} never occur in {train_path}, so the model could "
                "never predict them; add training sentences that hold them, or correct the tags "
                "in the dev file if they are mistakes"
            )

        def features(sents):
            words = [w for w, _ in sents]
            tags = [[index[t] for t in tags] for _, tags in sents]
            return token_features(tok, words, tags, cfg.max_seq_length)

        gold = [tags for _, tags in dev]
        return cls(features(train), features(dev), labels, gold, [w for w, _ in dev])

    def batch_labels(self, features: list[dict], length: int) -> np.ndarray:
        labels = np.full((len(features), length), IGNORE, np.int64)
        for i, f in enumerate(features):
            labels[i, : len(f["ids"])] = f["label"]
        return labels

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE)

    def evaluate(self, predict: Predict) -> dict[str, float]:
        pred = []
        for f, x, gold in zip(self.dev, predict(self.dev), self.gold, strict=True):
            tags = ["O"] * len(gold)
            for pos, word in enumerate(f["word_of"]):
                if word >= 0:
                    tags[word] = self.labels[int(x[pos].argmax())]
            pred.append(tags)
        self.text = "".join(  # conlleval's layout: word gold predicted
            "".join(f"{w} {g} {p}\n" for w, g, p in zip(*sent, strict=True)) + "\n"
            for sent in zip(self.words, self.gold, pred, strict=True)
        )
        return entity_f1(pred, self.gold)

    def outputs(self) -> dict[str, str]:
        return {"dev_predictions.txt": self.text}
