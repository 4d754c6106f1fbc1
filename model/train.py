"""Pre-training: MLM + NSP on the shards, on a CPU or under `torchrun` on GPUs.

One process per device. Under `torchrun` each rank reads its slice of every global batch
(`model.data`), DDP averages the gradients, and rank 0 writes metrics and checkpoints. A
checkpoint (`model.checkpoint`) holds everything the rest of the run depends on, so `--resume`
reproduces an uninterrupted run exactly.

This module is the loop and its wiring; the parts live beside it: `model.distributed` (ranks,
devices), `model.optim` (AdamW, schedule), `model.trainer` (one optimizer step), `model.meter`
(metrics records, progress line), `model.checkpoint`, `model.run_dir` (the run directory) and
`model.holdout` (the final held-out evaluation). Their public names are importable from here too.
"""

from __future__ import annotations

import gc
import json
import os
import time
from typing import IO

import torch.distributed as dist

from model.bert import count_parameters
from model.checkpoint import (
    CHECKPOINT_FORMAT,
    ORDER_KEYS,
    check_resume,
    checkpoint_state,
    load_checkpoint,
    restore,
    save_checkpoint,
    write_checkpoint,
)
from model.config import BertConfig, TrainConfig, preset
from model.data import LoaderConfig, PretrainingData, batches, open_shards
from model.distributed import Dist, init_distributed, micro_batch_size, resolve_device
from model.files import write_text
from model.hf_import import Imported, load_pretrained
from model.holdout import evaluate, split_holdout
from model.meter import PEAK_BF16_TFLOPS, Meter, progress_line
from model.optim import WarmupLinear, make_optimizer
from model.run_dir import CHECKPOINT, EVAL, METRICS, prepare_run, to_json, trim_metrics
from model.trainer import Trainer, to_device
from schemas import ShardSet

__all__ = [
    "CHECKPOINT",
    "CHECKPOINT_FORMAT",
    "METRICS",
    "ORDER_KEYS",
    "PEAK_BF16_TFLOPS",
    "Dist",
    "Meter",
    "Trainer",
    "WarmupLinear",
    "check_resume",
    "checkpoint_state",
    "evaluate",
    "init_distributed",
    "load_checkpoint",
    "make_optimizer",
    "micro_batch_size",
    "model_config",
    "prepare_run",
    "pretrain",
    "progress_line",
    "resolve_device",
    "restore",
    "save_checkpoint",
    "split_holdout",
    "trim_metrics",
]


def model_config(name: str, shards: ShardSet) -> BertConfig:
    """The preset sized to the shards: their vocab, their [PAD], their sequence length."""
    max_len = int(shards.config.get("max_seq_length", 512))
    pad = shards.vocab.special_ids.pad
    return preset(name, len(shards.vocab), pad_id=pad, max_position=max(512, max_len))


def pretrain(cfg: TrainConfig) -> dict:
    """Train as configured; returns {"step", "last" (the last metrics record), "eval"}."""
    d = init_distributed(cfg.device)
    try:
        result = _pretrain(cfg, d)
        if d.world > 1:
            # Every rank done with every collective, and the DDP model (which holds the
            # process group) freed, before the group goes: else gloo can abort at exit.
            gc.collect()
            dist.barrier()
        return result
    finally:
        if d.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _pretrain(cfg: TrainConfig, d: Dist) -> dict:
    shards = open_shards(cfg.shards)
    micro = micro_batch_size(cfg.batch_size, d.world, cfg.accum)
    train_parts, held = split_holdout(shards, cfg.holdout)
    lc = LoaderConfig(micro, cfg.seed, d.rank, d.world, True, cfg.shuffle_window, cfg.remask)
    data = PretrainingData(shards, train_parts, lc)
    imported = init_model(cfg, shards) if cfg.init else None
    trainer = Trainer(cfg, imported.cfg if imported else model_config(cfg.model, shards), d)
    step, position = _resume(prepare_run(cfg, shards, d), trainer, shards)
    if imported and step == 0:  # a resumed run has its own weights
        trainer.raw.load_state_dict(imported.state)
    if d.main:
        trim_metrics(os.path.join(cfg.run, METRICS), step)
        _announce(cfg, trainer, data, step)
        if imported and step == 0 and imported.report():
            print(f"note: {imported.report()}", flush=True)
    last = _train_loop(cfg, trainer, shards, data, step, position)
    result = evaluate(trainer, shards, held, micro)
    if d.main and result is not None:
        _report_eval(cfg, result)
    return {"step": cfg.steps, "last": last, "eval": result}


def init_model(cfg: TrainConfig, shards: ShardSet) -> Imported:
    """The model of `--init DIR` on these shards: their vocab (or its rows mapped onto it with
    --init-map-vocab), positions enough for their rows."""
    imported = load_pretrained(
        cfg.init, cfg.seed, shards.vocab, f"the shards in {shards.directory}", cfg.init_map_vocab
    )
    rows = int(shards.config.get("max_seq_length", 0))
    if imported.cfg.max_position < rows:
        raise ValueError(
            f"{cfg.init}: max_position_embeddings {imported.cfg.max_position} is shorter than "
            f"the shards' rows of up to {rows} tokens; build shards of at most that length "
            f"(make shards SEQ_LEN={imported.cfg.max_position})"
        )
    return imported


def _resume(path: str | None, trainer: Trainer, shards: ShardSet) -> tuple[int, int]:
    """Restore the checkpoint at `path`, if any; the step and loader position to go on from."""
    if not path:
        return 0, 0
    ckpt = load_checkpoint(path)
    check_resume(path, ckpt, trainer, shards)
    restore(ckpt, trainer)
    return ckpt["step"], ckpt["loader_position"]


def _announce(cfg: TrainConfig, trainer: Trainer, data: PretrainingData, step: int) -> None:
    m = trainer.model_cfg
    params = count_parameters(trainer.raw) / 1e6
    name = f"from {cfg.init}" if cfg.init else cfg.model
    print(
        f"{name}: {m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads, "
        f"vocab {m.vocab_size}, {params:.1f}M parameters | {data.total_rows} training sequences, "
        f"batch {cfg.batch_size} ({trainer.d.world} rank(s) x {data.cfg.batch_size} x accum "
        f"{cfg.accum}) | {trainer.d.device} {'bf16' if trainer.autocast else 'fp32'} | "
        f"{'resuming at step ' + str(step) if step else 'from scratch'} -> {cfg.run}",
        flush=True,
    )


def _report_eval(cfg: TrainConfig, result: dict) -> None:
    write_text(os.path.join(cfg.run, EVAL), to_json(result))
    shown = " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in result.items()
        if k != "held_out"
    )
    print(f"held-out {shown}")


def _train_loop(
    cfg: TrainConfig,
    trainer: Trainer,
    shards: ShardSet,
    data: PretrainingData,
    step: int,
    position: int,
) -> dict | None:
    d, meter, last = trainer.d, Meter(trainer), None
    stream = batches(data, position, workers=cfg.workers, pin_memory=d.device.type == "cuda")
    metrics = open(os.path.join(cfg.run, METRICS), "a", encoding="utf-8") if d.main else None
    started, first = time.perf_counter(), step
    try:
        while step < cfg.steps:
            micro_batches = [next(stream) for _ in range(cfg.accum)]
            lr = trainer.lr
            stats = trainer.step([to_device(b, d.device) for b in micro_batches])
            step, position = step + 1, position + cfg.accum
            meter.add(stats, micro_batches)
            save = step % cfg.ckpt_every == 0 or step == cfg.steps
            if save or step % cfg.log_every == 0:
                last = meter.flush(step, lr, position / data.batches_per_epoch)
                _log(metrics, last, cfg.steps, started, first)
            if save:
                write_checkpoint(os.path.join(cfg.run, CHECKPOINT), trainer, shards, step, position)
                meter.reset()
    finally:
        if metrics:
            metrics.close()
    if d.world > 1:
        dist.barrier()
    return last


def _log(metrics: IO[str] | None, record: dict, steps: int, started: float, first: int) -> None:
    """Append the record to metrics.jsonl and print its progress line (rank 0 only)."""
    if metrics:
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        print(progress_line(record, steps, started, first), flush=True)
