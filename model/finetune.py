"""Fine-tuning a pre-trained encoder: sequence classification on the pooled `[CLS]` (GLUE-style
TSV), token classification (CoNLL-style), span extraction (SQuAD v1.1), as in the BERT paper.

The encoder comes from a pre-training checkpoint, the tokenizer from the `vocab.txt` beside it;
or both from a Hugging Face BERT directory (`model.hf_import`).
The run directory receives metrics.jsonl (training loss, then dev metrics after every epoch),
results.json (the final dev metrics), model.pt (the fine-tuned weights and label names after the
last step), best.pt (the same at the evaluation with the best dev metric, see `dev_metric`) and
best.json (that evaluation's step and metrics);
for SQuAD also predictions.json (question id -> answer text, as the official scorer reads it)
and nbest_predictions.json (question id -> the 20 best spans with logits and probabilities);
with --predict, the GLUE test files labelled in the layout the GLUE server takes (SST-2.tsv, ...).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from model.bert import BertModel, init_weights
from model.config import BertConfig, flag_hint
from model.data import PAD_MULTIPLE
from model.hf_import import is_hf_directory, load_pretrained
from model.metrics import accuracy, binary_f1, entity_f1, squad_scores
from model.run_dir import load_checkpoint
from model.tasks import (
    GLUE_TASKS,
    IGNORE,
    answer_is_aligned,
    data_files,
    load_tokenizer,
    read_conll,
    read_glue_test,
    read_squad,
    read_tsv,
    sequence_features,
    span_features,
    task_kind,
    token_features,
)
from model.training import WarmupLinear, param_groups, progress, resolve_device
from schemas.manifest import atomic_write, atomic_write_text


@dataclass(frozen=True)
class FinetuneConfig:
    task: str  # cola | sst2 | mrpc | qqp | stsb | qnli | rte | wnli | mnli | ner | squad
    data: str  # the task's directory
    ckpt: str  # pre-training checkpoint (vocab.txt beside it) or a Hugging Face BERT directory
    run: str  # output directory
    epochs: float = 3.0
    batch_size: int = 32
    lr: float = 2e-5  # the paper picks among 5e-5, 3e-5, 2e-5
    warmup_ratio: float = 0.1  # share of the steps spent warming up
    weight_decay: float = 0.01
    max_seq_length: int = 128
    doc_stride: int = 128  # squad: tokens between window starts
    max_query_length: int = 64  # squad: question tokens kept
    max_answer_length: int = 30  # squad: longest predicted answer, in tokens
    seed: int = 0
    device: str = "cpu"
    log_every: int = 50
    predict: bool = False  # GLUE: label the test files with the best checkpoint, server layout

    def __post_init__(self):
        task_kind(self.task)
        if self.predict and self.task not in GLUE_TASKS:
            raise ValueError(
                f"--predict labels GLUE test files for the GLUE server; --task {self.task} has "
                "none (its dev predictions are written without it)"
            )
        if self.epochs <= 0 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("fine-tuning: epochs, batch size and lr must be positive")
        if not 0 <= self.warmup_ratio < 1 or self.max_seq_length < 8:
            raise ValueError("fine-tuning: warmup ratio in [0, 1), max sequence length >= 8")


def finetune_config(args: argparse.Namespace) -> FinetuneConfig:
    max_len = args.max_seq_length or (384 if args.task == "squad" else 128)
    run = args.run or default_run(args.ckpt, args.task)
    fields = ("epochs", "batch_size", "lr", "warmup_ratio", "weight_decay", "doc_stride")
    fields += ("max_query_length", "max_answer_length", "seed", "device", "log_every", "predict")
    return FinetuneConfig(
        task=args.task,
        data=args.data,
        ckpt=args.ckpt,
        run=run,
        max_seq_length=max_len,
        **{k: getattr(args, k) for k in fields},
    )


def default_run(ckpt: str, task: str) -> str:
    """CKPTDIR/finetune-TASK beside a checkpoint file; DIR-finetune-TASK beside a Hugging Face
    directory (not inside it: it is someone's model)."""
    if os.path.isdir(ckpt):
        return f"{os.path.normpath(ckpt)}-finetune-{task}"
    return os.path.join(os.path.dirname(ckpt) or ".", f"finetune-{task}")


class TaskModel(nn.Module):
    """The pre-trained encoder and one linear head: on the pooled `[CLS]` (sequence), on every
    position (token), or two logits per position, answer start and end (span)."""

    def __init__(self, cfg: BertConfig, kind: str, num_labels: int, generator: torch.Generator):
        super().__init__()
        self.kind = kind
        self.bert = BertModel(cfg)
        # No dropout before the span head: neither the paper's run_squad.py nor transformers'
        # BertForQuestionAnswering has one.
        self.dropout = nn.Identity() if kind == "span" else nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self.head, cfg.initializer_range, generator)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h, pooled = self.bert(ids, types, mask)
        pooled_kinds = ("sequence", "regression")
        return self.head(self.dropout(pooled if self.kind in pooled_kinds else h))


def task_loss(kind: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    if kind == "sequence":
        return F.cross_entropy(logits, labels)
    if kind == "regression":
        return F.mse_loss(logits.squeeze(-1), labels.float())
    if kind == "token":
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    start, end = logits.unbind(-1)
    return (F.cross_entropy(start, labels[:, 0]) + F.cross_entropy(end, labels[:, 1])) / 2


def collate(features: list[dict], kind: str, pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest row rounded up to a multiple of 8."""
    b = len(features)
    t = -(-max(len(f["ids"]) for f in features) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = np.full((b, t), pad_id, np.int64)
    types, mask = np.zeros((b, t), np.int64), np.zeros((b, t), np.int64)
    labels = np.full((b, t), IGNORE, np.int64) if kind == "token" else None
    for i, f in enumerate(features):
        n = len(f["ids"])
        ids[i, :n], types[i, :n], mask[i, :n] = f["ids"], f["types"], 1
        if labels is not None:
            labels[i, :n] = f["label"]
    if labels is None:
        dtype = np.float32 if kind == "regression" else np.int64
        labels = np.array([f["label"] for f in features], dtype)
    out = {"ids": ids, "types": types, "mask": mask, "labels": labels}
    return {k: torch.from_numpy(v) for k, v in out.items()}


@dataclass
class TaskData:
    train: list[dict]
    dev: list[dict]
    labels: list[str]  # class or tag names by index (span tasks: none)
    gold: object  # what the dev metrics compare against
    notes: list[str]
    predictions: dict | None = None  # squad: the last evaluation's answers by question id
    nbest: dict | None = None  # squad: the last evaluation's n best spans by question id
    words: list | None = None  # ner: the dev sentences' words
    outputs: dict[str, str] = field(default_factory=dict)  # file name -> the dev predictions
    # further dev sets scored beside the first (MNLI mismatched): suffix -> (features, gold)
    extra_dev: dict[str, tuple[list[dict], list]] = field(default_factory=dict)
    # --predict: the GLUE server's file name -> (the test rows' ids, their features)
    test: dict[str, tuple[list[str], list[dict]]] = field(default_factory=dict)


def load_task(cfg: FinetuneConfig, tok) -> TaskData:
    train_path, dev_path = data_files(cfg.task, cfg.data)
    if cfg.task in GLUE_TASKS:
        return _glue_data(cfg, tok, train_path, dev_path)
    if cfg.task == "ner":
        return _conll_data(cfg, tok, train_path, dev_path)
    train, dev = read_squad(train_path), read_squad(dev_path)
    # As the paper's run_squad.py: a training answer whose answer_start does not point at its
    # text is skipped (training on it would teach the wrong span), and counted.
    aligned = [ex for ex in train if answer_is_aligned(ex)]
    notes = []
    if len(aligned) < len(train):
        notes.append(
            f"{train_path}: skipped {len(train) - len(aligned)} of {len(train)} question(s) "
            "whose answer_start does not point at the answer text"
        )
    args = (cfg.max_seq_length, cfg.doc_stride, cfg.max_query_length)
    train_f = span_features(tok, aligned, *args)
    return TaskData(train_f, span_features(tok, dev, *args), [], dev, notes)


def _glue_data(cfg: FinetuneConfig, tok, train_path: str, dev_path: str) -> TaskData:
    spec = GLUE_TASKS[cfg.task]
    columns = (*spec.text_columns, spec.label_column)
    train, skipped_train = read_tsv(train_path, columns, spec.labels, spec.names)
    dev, skipped_dev = read_tsv(dev_path, columns, spec.labels, spec.names)
    labels = list(spec.labels)
    index = {name: i for i, name in enumerate(labels)}
    target = float if spec.regression else index.__getitem__  # a score, or a class index
    notes = [
        f"{p}: skipped {n} malformed row(s)"
        for p, n in ((train_path, skipped_train), (dev_path, skipped_dev))
        if n
    ]

    max_len = cfg.max_seq_length

    def features(rows):
        labels = [target(r[-1]) for r in rows]
        return sequence_features(tok, [r[:-1] for r in rows], labels, max_len)

    gold = [float(r[-1]) if spec.regression else r[-1] for r in dev]
    data = TaskData(features(train), features(dev), labels, gold, notes)
    for suffix, name in spec.extra_dev:
        path = os.path.join(cfg.data, name)
        if not os.path.exists(path):
            notes.append(f"{cfg.data}: no {name}, so no {suffix} dev scores")
            continue
        rows, skipped = read_tsv(path, columns, spec.labels, spec.names)
        if skipped:
            notes.append(f"{path}: skipped {skipped} malformed row(s)")
        data.extra_dev[suffix] = (features(rows), [r[-1] for r in rows])
    for name, server_name in spec.test_files if cfg.predict else ():
        path = os.path.join(cfg.data, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{cfg.data}: no {name} for --predict to label")
        ids, texts = read_glue_test(path, cfg.task)
        data.test[server_name] = (ids, sequence_features(tok, texts, [0] * len(texts), max_len))
    return data


def _conll_data(cfg: FinetuneConfig, tok, train_path: str, dev_path: str) -> TaskData:
    train, dev = read_conll(train_path), read_conll(dev_path)
    labels = sorted({t for _, tags in train for t in tags})
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted({t for _, tags in dev for t in tags} - set(index))
    if unknown:
        raise ValueError(f"{dev_path}: tags {unknown} never occur in {train_path}")

    def features(sents):
        words = [w for w, _ in sents]
        return token_features(
            tok, words, [[index[t] for t in tags] for _, tags in sents], cfg.max_seq_length
        )

    gold = [tags for _, tags in dev]
    return TaskData(features(train), features(dev), labels, gold, [], words=[w for w, _ in dev])


@torch.no_grad()
def predict(model: TaskModel, features: list[dict], cfg: FinetuneConfig, device, pad_id: int):
    """Logits per feature (numpy), batch by batch."""
    model.eval()
    out = []
    for i in range(0, len(features), cfg.batch_size):
        batch = collate(features[i : i + cfg.batch_size], model.kind, pad_id)
        logits = model(*(batch[k].to(device) for k in ("ids", "types", "mask"))).float().cpu()
        n = [len(f["ids"]) for f in features[i : i + cfg.batch_size]]
        whole = model.kind in ("sequence", "regression")
        out += [logits[j] if whole else logits[j, : n[j]] for j in range(len(n))]
    model.train()
    return [o.numpy() for o in out]


def evaluate(model: TaskModel, data: TaskData, cfg: FinetuneConfig, device, pad_id: int) -> dict:
    """The task's standard dev metrics."""
    logits = predict(model, data.dev, cfg, device, pad_id)
    if model.kind == "regression":
        pred = [float(x[0]) for x in logits]
        data.outputs["dev_predictions.tsv"] = _tsv(pred, data.gold)
        return {"pearson": pearson(pred, data.gold), "spearman": spearman(pred, data.gold)}
    if model.kind == "sequence":
        scores = _sequence_scores(cfg.task, data.labels, logits, data.gold)
        pred = [data.labels[int(x.argmax())] for x in logits]
        data.outputs["dev_predictions.tsv"] = _tsv(pred, data.gold)
        for suffix, (features, gold) in data.extra_dev.items():
            more = predict(model, features, cfg, device, pad_id)
            pred = [data.labels[int(x.argmax())] for x in more]
            data.outputs[f"dev_predictions_{suffix}.tsv"] = _tsv(pred, gold)
            for k, v in _sequence_scores(cfg.task, data.labels, more, gold).items():
                scores[f"{k}_{suffix}"] = v
        return scores
    if model.kind == "token":
        pred = []
        for f, x, gold in zip(data.dev, logits, data.gold, strict=True):
            tags = ["O"] * len(gold)
            for pos, word in enumerate(f["word_of"]):
                if word >= 0:
                    tags[word] = data.labels[int(x[pos].argmax())]
            pred.append(tags)
        data.outputs["dev_predictions.txt"] = "".join(  # conlleval's layout: word gold predicted
            "".join(f"{w} {g} {p}\n" for w, g, p in zip(*sent, strict=True)) + "\n"
            for sent in zip(data.words, data.gold, pred, strict=True)
        )
        return entity_f1(pred, data.gold)
    data.nbest = span_nbest(data.dev, logits, data.gold, cfg.max_answer_length)
    predictions = {qid: spans[0]["text"] for qid, spans in data.nbest.items()}
    data.predictions = predictions
    return squad_scores(predictions, {ex.qid: list(ex.answers) for ex in data.gold})


def label_test(model: TaskModel, data: TaskData, cfg: FinetuneConfig, device, pad_id: int):
    """The GLUE server's file name -> its text: a header `index prediction`, then per test
    row its id and the predicted label as the task's files write it (STS-B: the score)."""
    out = {}
    for name, (ids, features) in data.test.items():
        logits = predict(model, features, cfg, device, pad_id)
        if model.kind == "regression":
            pred = [f"{float(x[0]):.3f}" for x in logits]
        else:
            pred = [data.labels[int(x.argmax())] for x in logits]
        rows = "".join(f"{i}\t{p}\n" for i, p in zip(ids, pred, strict=True))
        out[name] = "index\tprediction\n" + rows
    return out


def _tsv(pred: list, gold: list) -> str:
    """Dev predictions in the GLUE server's layout (index, prediction), the gold label beside."""
    rows = [f"{i}\t{p}\t{g}\n" for i, (p, g) in enumerate(zip(pred, gold, strict=True))]
    return "index\tprediction\tlabel\n" + "".join(rows)


def _sequence_scores(task: str, labels: list[str], logits, gold: list[str]) -> dict:
    pred = [labels[int(x.argmax())] for x in logits]
    scores = {"accuracy": accuracy(pred, gold)}
    if GLUE_TASKS[task].f1:
        scores["f1"] = binary_f1(pred, gold, positive="1")
    if GLUE_TASKS[task].mcc:
        scores["mcc"] = matthews_corrcoef(pred, gold, positive="1")
    return scores


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


def matthews_corrcoef(pred: list[str], gold: list[str], positive: str = "1") -> float:
    """Matthews correlation of a binary labelling, GLUE's CoLA metric (0 when a margin is
    empty, as scikit-learn's matthews_corrcoef)."""
    tp = sum(p == positive and g == positive for p, g in zip(pred, gold, strict=True))
    tn = sum(p != positive and g != positive for p, g in zip(pred, gold, strict=True))
    fp = sum(p == positive and g != positive for p, g in zip(pred, gold, strict=True))
    fn = sum(p != positive and g == positive for p, g in zip(pred, gold, strict=True))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


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


def build_model(ckpt: dict, num_labels: int, kind: str, seed: int) -> TaskModel:
    """The task model with the checkpoint's encoder weights."""
    model_cfg = BertConfig(**ckpt["model_config"])
    model = TaskModel(model_cfg, kind, num_labels, torch.Generator().manual_seed(seed))
    encoder = {k[len("bert.") :]: v for k, v in ckpt["model"].items() if k.startswith("bert.")}
    model.bert.load_state_dict(encoder)
    return model


def read_encoder(cfg: FinetuneConfig) -> tuple[dict, str]:
    """The pre-trained weights (as a checkpoint's fields) and the path of their vocab.txt: a
    pre-training checkpoint file, or a Hugging Face BERT directory (`model.hf_import`)."""
    if is_hf_directory(cfg.ckpt):
        imported = load_pretrained(cfg.ckpt, cfg.seed)
        said = imported.report(parts=("pooler",))  # the heads of pre-training are not used here
        if said:
            print(f"note: {said}")
        return imported.as_checkpoint(), os.path.join(cfg.ckpt, "vocab.txt")
    if os.path.isdir(cfg.ckpt):
        raise FileNotFoundError(
            f"{cfg.ckpt} is a directory without config.json; --ckpt takes a pre-training "
            "checkpoint (RUN/last.pt) or a Hugging Face BERT directory (config.json, "
            "model.safetensors or pytorch_model.bin, vocab.txt)"
        )
    if not os.path.exists(cfg.ckpt):
        raise FileNotFoundError(
            f"no checkpoint at {cfg.ckpt}; `make pretrain` writes one, or pass "
            f"{flag_hint('--ckpt', 'PATH')}"
        )
    return load_checkpoint(cfg.ckpt), os.path.join(os.path.dirname(cfg.ckpt) or ".", "vocab.txt")


def _check_vocab(ckpt: dict, tok, vocab_path: str) -> None:
    if tok.get_vocab_size() != ckpt["vocab"]["size"]:
        raise ValueError(
            f"{vocab_path} has {tok.get_vocab_size()} pieces but the checkpoint was trained "
            f"with {ckpt['vocab']['size']}; put the run's own vocab.txt beside the checkpoint"
        )


def dev_metric(task: str) -> str:
    """The dev metric that picks the best checkpoint: GLUE's headline one for the task."""
    return {"cola": "mcc", "stsb": "pearson", "ner": "f1", "squad": "f1"}.get(task, "accuracy")


def _save(model: TaskModel, data: TaskData, cfg: FinetuneConfig, name: str) -> None:
    path = os.path.join(cfg.run, name)
    state = {"config": asdict(cfg), "labels": data.labels, "model": model.state_dict()}
    atomic_write(path, lambda f: torch.save(state, f))


def finetune(cfg: FinetuneConfig) -> dict:
    """Train on the task's training set, evaluate on its dev set after every epoch; returns the
    final dev metrics."""
    device = resolve_device(cfg.device)
    kind = task_kind(cfg.task)
    ckpt, vocab_path = read_encoder(cfg)
    tok = load_tokenizer(vocab_path, bool(ckpt["shard_config"].get("lowercase", True)))
    _check_vocab(ckpt, tok, vocab_path)
    if cfg.max_seq_length > ckpt["model_config"]["max_position"]:
        raise ValueError(
            f"{cfg.ckpt}: the model has {ckpt['model_config']['max_position']} positions, fewer "
            f"than --max-seq-length {cfg.max_seq_length}; lower it "
            f"({flag_hint('--max-seq-length', str(ckpt['model_config']['max_position']))})"
        )
    data = load_task(cfg, tok)
    for note in data.notes:
        print(f"note: {note}")
    if not data.train or not data.dev:
        raise ValueError(f"{cfg.data}: the training or dev set is empty")
    num_labels = {"span": 2, "regression": 1}.get(kind, len(data.labels))
    torch.manual_seed(cfg.seed)
    model = build_model(ckpt, num_labels, kind, cfg.seed).to(device)
    os.makedirs(cfg.run, exist_ok=True)
    pad_id = ckpt["vocab"]["special_ids"]["pad"]
    metric, best = dev_metric(cfg.task), {}

    def keep_best(step: int, epoch: float, scores: dict) -> None:
        if not best or scores[metric] > best["scores"][metric]:
            best.update(metric=metric, step=step, epoch=epoch, scores=scores)
            _save(model, data, cfg, "best.pt")

    scores = _train(model, data, cfg, device, pad_id, keep_best)
    _write_run(model, data, cfg, scores, best)
    if data.test:  # labelled by the best checkpoint, as a GLUE submission would be
        best_state = torch.load(os.path.join(cfg.run, "best.pt"), weights_only=True)
        model.load_state_dict(best_state["model"])
        for name, text in label_test(model, data, cfg, device, pad_id).items():
            atomic_write_text(os.path.join(cfg.run, name), text)
            print(f"{cfg.task}: labelled {os.path.join(cfg.run, name)} for the GLUE server")
    return scores


def _write_run(model: TaskModel, data: TaskData, cfg: FinetuneConfig, scores: dict, best: dict):
    """The last weights, the best evaluation, the last scores and dev predictions."""
    _save(model, data, cfg, "model.pt")
    atomic_write_text(os.path.join(cfg.run, "best.json"), json.dumps(best, indent=2) + "\n")
    atomic_write_text(os.path.join(cfg.run, "results.json"), json.dumps(scores, indent=2) + "\n")
    for name, text in data.outputs.items():
        atomic_write_text(os.path.join(cfg.run, name), text)
    if data.predictions is not None:  # the official format: question id -> answer text
        text = json.dumps(data.predictions, indent=2, ensure_ascii=False) + "\n"
        atomic_write_text(os.path.join(cfg.run, "predictions.json"), text)
        text = json.dumps(data.nbest, indent=2, ensure_ascii=False) + "\n"
        atomic_write_text(os.path.join(cfg.run, "nbest_predictions.json"), text)


def _optimizer(model: nn.Module, cfg: FinetuneConfig, steps: int):
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, eps=1e-6)
    return optimizer, LambdaLR(optimizer, WarmupLinear(int(cfg.warmup_ratio * steps), steps))


def _batches(data: TaskData, cfg: FinetuneConfig, kind: str, pad_id: int, steps: int):
    """`steps` training batches: a fresh seeded permutation of the training set each epoch."""
    rng = np.random.default_rng(cfg.seed)
    per_epoch = math.ceil(len(data.train) / cfg.batch_size)
    for step in range(steps):
        if step % per_epoch == 0:
            order = rng.permutation(len(data.train))
        k = (step % per_epoch) * cfg.batch_size
        yield collate([data.train[i] for i in order[k : k + cfg.batch_size]], kind, pad_id)


def _progress_line(cfg: FinetuneConfig, record: dict, steps: int, started: float, lr: float):
    """As pre-training's: bar, loss, learning rate, throughput and ETA."""
    bar, rate, eta = progress(record["step"], steps, started)
    return (
        f"{cfg.task} step {record['step']:>{len(str(steps))}}/{steps} {bar} epoch "
        f"{record['epoch']:.2f} loss {record['loss']:.4f} lr {lr:.2e} "
        f"{rate * cfg.batch_size:.0f} seq/s eta {eta}"
    )


def _train(
    model: TaskModel, data: TaskData, cfg: FinetuneConfig, device, pad_id: int, on_eval=None
) -> dict:
    """Train; after every evaluation `on_eval(step, epoch, scores)` (keeps the best)."""
    per_epoch = math.ceil(len(data.train) / cfg.batch_size)
    steps = max(1, math.ceil(cfg.epochs * per_epoch))
    optimizer, scheduler = _optimizer(model, cfg, steps)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    scores, started = {}, time.perf_counter()
    log = open(os.path.join(cfg.run, "metrics.jsonl"), "w", encoding="utf-8")
    for step, batch in enumerate(_batches(data, cfg, model.kind, pad_id, steps), 1):
        with amp:
            logits = model(*(batch[n].to(device) for n in ("ids", "types", "mask")))
        loss = task_loss(model.kind, logits, batch["labels"].to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        record = {"step": step, "epoch": step / per_epoch, "loss": loss.item()}
        if step % per_epoch == 0 or step == steps:
            scores = evaluate(model, data, cfg, device, pad_id)
            record["dev"] = scores
            if on_eval is not None:
                on_eval(step, step / per_epoch, scores)
            shown = " ".join(f"{k} {v:.4f}" for k, v in scores.items())
            took = time.perf_counter() - started
            print(
                f"{cfg.task} step {step}/{steps} loss {loss.item():.4f} | dev {shown} | {took:.0f}s"
            )
        if step % cfg.log_every == 0 or "dev" in record:
            log.write(json.dumps(record) + "\n")
            log.flush()
        if step % cfg.log_every == 0 and "dev" not in record:
            print(_progress_line(cfg, record, steps, started, scheduler.get_last_lr()[0]))
    log.close()
    return scores
