"""A fine-tuning run: the task read as its kind (`task.Task`), the encoder under its head,
trained with pre-training's step, AdamW grouping, autocast and logging (`model.training`), the
dev set evaluated after every epoch.

The run directory receives metrics.jsonl (training loss, then dev metrics after every epoch),
results.json (the final dev metrics), model.pt (the fine-tuned weights and label names after the
last step), best.pt (the same at the evaluation with the best dev metric, the kind's `metric`)
and best.json (that evaluation's step and metrics), and the kind's prediction files: GLUE
dev_predictions.tsv, NER dev_predictions.txt, SQuAD predictions.json (question id -> answer
text, as the official scorer reads it) and nbest_predictions.json; with --predict, the GLUE
test files labelled in the layout the GLUE server takes (SST-2.tsv, ...).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch

import model.training as training
from model.board import FOLDER as BOARD_FOLDER
from model.board import Board, check_available
from model.data import PAD_MULTIPLE
from model.finetune.choose import Choose
from model.finetune.classify import Classify, Regress
from model.finetune.config import FinetuneConfig, default_run
from model.finetune.encoder import TaskModel, build_model, encoder_record, read_encoder
from model.finetune.features import truncation_report
from model.finetune.readers import GLUE_TASKS, check_task
from model.finetune.spans import Spans, Spans2
from model.finetune.tag import Tag
from model.finetune.task import Task
from model.folders import FINETUNING_RUN, check_own_kind, folder_kind
from model.run_dir import check_output_dir
from model.run_lock import RunLock
from model.run_log import MetricsLog, Progress
from model.safe_load import load_weights, save_weights
from model.training import (
    Stepper,
    adamw,
    amp_dtype,
    model_inputs,
    resolve_device,
    to_device,
    warmup_linear,
)
from schemas.manifest import atomic_write_text

# `make finetune` passes --run through ARGS (RUN is pre-training's run directory).
RUN_HINT = "--run DIR (make: ARGS='--run DIR')"

KINDS: dict[str, type[Task]] = {
    **{name: Regress if spec.regression else Classify for name, spec in GLUE_TASKS.items()},
    "ner": Tag,
    "squad": Spans,
    "squad2": Spans2,
    "swag": Choose,
}


def kind_of(task: str) -> type[Task]:
    check_task(task)
    return KINDS[task]


SQUAD_ONLY = ("doc_stride", "max_query_length", "max_answer_length")  # --task squad, squad2


def finetune_config(args: argparse.Namespace) -> FinetuneConfig:
    """Flags -> FinetuneConfig; what was not given (None) is the task's or the checkpoint's
    default, a value given (0 included) the config's to accept or refuse."""
    max_len = args.max_seq_length
    max_len = kind_of(args.task).max_seq_length if max_len is None else max_len
    run = default_run(args.ckpt, args.task) if args.run is None else args.run
    squad = {k: getattr(args, k) for k in SQUAD_ONLY if getattr(args, k) is not None}
    if squad and args.task not in ("squad", "squad2"):
        flag = "--" + next(iter(squad)).replace("_", "-")
        raise ValueError(
            f"{flag} shapes SQuAD's windows, questions or answers, and --task {args.task} has "
            f"none: drop it, or pass --task squad"
        )
    fields = ("epochs", "batch_size", "accum", "lr", "warmup_ratio", "weight_decay", "seed")
    fields += ("device",)
    fields += ("precision", "compile", "checkpoint_activations", "log_every", "predict")
    fields += ("tensorboard",)
    return FinetuneConfig(
        task=args.task,
        data=args.data,
        ckpt=args.ckpt,
        run=run,
        max_seq_length=max_len,
        **{k: getattr(args, k) for k in fields},
        **squad,
    )


def collate(features: list[dict], task: Task, pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest row rounded up to a multiple of 8; a multiple-choice feature's
    sequences are rows one after another (`Task.choices` a feature)."""
    rows = [c for f in features for c in f["choices"]] if task.choices else features
    b = len(rows)
    t = -(-max(len(f["ids"]) for f in rows) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = np.full((b, t), pad_id, np.int64)
    types, mask = np.zeros((b, t), np.int64), np.zeros((b, t), np.int64)
    for i, f in enumerate(rows):
        n = len(f["ids"])
        ids[i, :n], types[i, :n], mask[i, :n] = f["ids"], f["types"], 1
    out = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    out["labels"] = task.batch_labels(features, t)
    return {k: torch.from_numpy(v) for k, v in out.items()}


@dataclass
class Finetuning:
    """A run's configuration, task and model, and where the model runs."""

    cfg: FinetuneConfig
    task: Task
    model: TaskModel
    device: torch.device
    pad_id: int
    encoder: dict  # `encoder_record`: saved with the weights, for `bert-model export`

    @torch.no_grad()
    def predict(self, features: list[dict]) -> list[np.ndarray]:
        """Logits per feature (numpy), batch by batch."""
        self.model.eval()
        out, size = [], -(-self.cfg.batch_size // self.cfg.accum)  # a micro-batch's rows
        for i in range(0, len(features), size):
            batch = to_device(collate(features[i : i + size], self.task, self.pad_id), self.device)
            logits = self.model(*model_inputs(batch)).float().cpu()
            if self.task.choices:  # a score per sequence -> the choices of each feature
                logits = logits.view(-1, self.task.choices)
            chunk = features[i : i + size]
            n = [0 if self.task.pooled else len(f["ids"]) for f in chunk]
            out += [logits[j] if self.task.pooled else logits[j, : n[j]] for j in range(len(n))]
        self.model.train()
        return [o.numpy() for o in out]

    def loss_of(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]):
        """The task's loss of a batch, and the same detached for the metrics record."""
        loss = self.task.loss(model(*model_inputs(batch)), batch["labels"])
        return loss, loss.detach()

    def save(self, name: str) -> None:
        path = os.path.join(self.cfg.run, name)
        state = {"config": asdict(self.cfg), "labels": self.task.labels, "encoder": self.encoder}
        state["model"] = self.model.state_dict()
        save_weights(path, state)

    def write(self, name: str, text: str) -> None:
        atomic_write_text(os.path.join(self.cfg.run, name), text)


def finetune(cfg: FinetuneConfig) -> dict:
    """Train on the task's training set, evaluate on its dev set after every epoch; returns the
    final dev metrics."""
    check_output_dir(cfg.run, "--run", RUN_HINT)
    check_own_kind(cfg.run, "--run", FINETUNING_RUN, RUN_HINT)
    if cfg.tensorboard:
        check_available()
    device = resolve_device(cfg.device)
    kind = kind_of(cfg.task)
    ckpt, tok = read_encoder(cfg)
    task = kind.read(cfg, tok)
    for note in task.notes:
        print(f"note: {note}")
    truncated, said = truncation_report(task.train, task.dev)  # examples cut to fit
    if said:
        print(f"note: {said}")
    if not task.train or not task.dev:
        raise ValueError(f"{cfg.data}: the training or dev set is empty")
    torch.manual_seed(cfg.seed)
    model = build_model(ckpt, task.num_labels, cfg.seed, task.pooled, task.head_dropout)
    model.bert.checkpoint_layers = cfg.checkpoint_activations
    with RunLock(cfg.run, command="finetune", hint=RUN_HINT):  # a second run is refused
        clear_earlier_run(cfg.run)
        pad = ckpt["vocab"]["special_ids"]["pad"]
        run = Finetuning(cfg, task, model.to(device), device, pad, encoder_record(ckpt))
        return _run_and_write(run, model, truncated)


def _run_and_write(run: Finetuning, model: TaskModel, truncated: int) -> dict:
    """Train, then write the run's files (and --predict's, from the best checkpoint)."""
    cfg, task = run.cfg, run.task
    scores, best = _train(run)
    run.save("model.pt")
    run.write("best.json", json.dumps(best, indent=2) + "\n")
    cut = {"truncated": truncated} if truncated else {}
    run.write("results.json", json.dumps({**scores, **cut}, indent=2) + "\n")
    for name, text in task.outputs().items():
        run.write(name, text)
    if cfg.predict:  # labelled by the best checkpoint, as a GLUE submission would be
        best_state = load_weights(os.path.join(cfg.run, "best.pt"), map_location=None)
        model.load_state_dict(best_state["model"])
        for name, text in task.label_test(run.predict).items():
            run.write(name, text)
            print(f"{cfg.task}: labelled {os.path.join(cfg.run, name)} for the GLUE server")
    return scores


# Every file a fine-tuning run writes into --run, whatever its task: the ones of all kinds, the
# dev predictions of each kind, and the files --predict writes for the GLUE server.
RUN_FILES = (
    "metrics.jsonl",
    "results.json",
    "best.json",
    "model.pt",
    "best.pt",
    "dev_predictions.tsv",
    "dev_predictions.txt",
    "predictions.json",
    "nbest_predictions.json",
    *(f"dev_predictions_{suffix}.tsv" for t in GLUE_TASKS.values() for suffix, _ in t.extra_dev),
    *(name for t in GLUE_TASKS.values() for _, name in t.test_files),
)


def clear_earlier_run(run: str) -> None:
    """An earlier fine-tuning run's files in `run` removed before this one writes there, so that
    the folder holds this run's alone: another task's dev predictions, or the GLUE server files
    of an earlier model, would otherwise sit beside this run's results. Other files stay, and
    a folder that holds no fine-tuning run (`folder_kind`) is left as it is."""
    if (folder_kind(run) or ("",))[0] != FINETUNING_RUN:
        return
    for name in RUN_FILES:
        path = os.path.join(run, name)
        if os.path.isfile(path):
            os.unlink(path)
    board = os.path.join(run, BOARD_FOLDER)
    for path in glob.glob(os.path.join(glob.escape(board), "events.out.tfevents.*")):
        os.unlink(path)  # --tensorboard's event files of the earlier run
    if os.path.isdir(board) and not os.listdir(board):
        os.rmdir(board)


def _batches(run: Finetuning, steps: int):
    """`steps` training batches, each a list of its `--accum` micro-batches (consecutive runs of
    its rows, as equal as they divide): a fresh seeded permutation of the training set each
    epoch."""
    cfg, train = run.cfg, run.task.train
    rng = np.random.default_rng(cfg.seed)
    per_epoch = math.ceil(len(train) / cfg.batch_size)
    for step in range(steps):
        if step % per_epoch == 0:
            order = rng.permutation(len(train))
        k = (step % per_epoch) * cfg.batch_size
        rows = order[k : k + cfg.batch_size]
        parts = [p for p in np.array_split(rows, min(cfg.accum, len(rows))) if len(p)]
        yield [
            to_device(collate([train[i] for i in part], run.task, run.pad_id), run.device)
            for part in parts
        ]


def _stepper(run: Finetuning, steps: int) -> Stepper:
    """Pre-training's step on the task model: AdamW (eps 1e-6) with its parameter grouping,
    the warm-up then linear decay, autocast as --precision says (auto: bf16 on a GPU, fp16
    with loss scaling on one without bf16),
    gradients clipped to norm 1; with --compile the training forward is compiled (dynamic
    shapes), while evaluation and --predict (`Finetuning.predict`) call the eager model in fp32."""
    cfg, model = run.cfg, run.model
    optimizer = adamw(model, cfg.lr, cfg.weight_decay, eps=1e-6)
    scheduler = warmup_linear(optimizer, int(cfg.warmup_ratio * steps), steps)
    forward = training.compiled(model) if cfg.compile else None
    return Stepper(
        model,
        optimizer,
        scheduler,
        run.loss_of,
        run.device,
        dtype=amp_dtype(cfg.precision, run.device),
        clip=1.0,
        model=forward,
    )


def _train(run: Finetuning) -> tuple[dict, dict]:
    """Train, evaluating after every epoch and keeping the best evaluation's weights in
    best.pt; returns the last evaluation's scores and the best evaluation."""
    cfg = run.cfg
    per_epoch = math.ceil(len(run.task.train) / cfg.batch_size)
    steps = max(1, math.ceil(cfg.epochs * per_epoch))
    stepper, progress = _stepper(run, steps), Progress(steps, name=cfg.task)
    board = Board(cfg.run, 0) if cfg.tensorboard else None
    log = MetricsLog(os.path.join(cfg.run, "metrics.jsonl"), "w", board=board)
    scores, best = {}, {}
    try:
        for step, micro_batches in enumerate(_batches(run, steps), 1):
            loss = stepper.step(micro_batches).item() / len(micro_batches)
            record = {"step": step, "epoch": step / per_epoch, "loss": loss}
            if step % per_epoch == 0 or step == steps:
                scores = record["dev"] = run.task.evaluate(run.predict)
                _keep_best(run, best, step, step / per_epoch, scores)
                shown = " ".join(f"{k} {v:.4f}" for k, v in scores.items() if isinstance(v, float))
                took = progress.elapsed()
                print(f"{cfg.task} step {step}/{steps} loss {loss:.4f} | dev {shown} | {took:.0f}s")
            if step % cfg.log_every == 0 or "dev" in record:
                log.write(record)
            if step % cfg.log_every == 0 and "dev" not in record:
                figures = f"epoch {record['epoch']:.2f} loss {loss:.4f} lr {stepper.lr:.2e} "
                figures += f"{progress.rate(step) * cfg.batch_size:.0f} seq/s"
                print(progress.line(step, figures))
    finally:
        log.close()
    return scores, best


def _keep_best(run: Finetuning, best: dict, step: int, epoch: float, scores: dict) -> None:
    """Save best.pt when these scores beat the best so far (the first evaluation wins a tie)."""
    metric = run.task.metric
    if not best or scores[metric] > best["scores"][metric]:
        best.update(metric=metric, step=step, epoch=epoch, scores=scores)
        run.save("best.pt")
