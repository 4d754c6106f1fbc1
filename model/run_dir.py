"""The run directory: created (or re-entered on --resume) with the shards' vocab and tokenizer and
the run's train_config.json; later it holds last.pt, metrics.jsonl and eval.json."""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import asdict

from model.config import TrainConfig, flag_hint
from model.distributed import Dist
from model.files import write_text
from schemas import ShardSet

CHECKPOINT = "last.pt"
METRICS = "metrics.jsonl"
EVAL = "eval.json"


def prepare_run(cfg: TrainConfig, shards: ShardSet, d: Dist) -> str | None:
    """Create the run directory (rank 0); the checkpoint to resume from, if any."""
    path = os.path.join(cfg.run, CHECKPOINT)
    exists = os.path.exists(path)
    if exists and not cfg.resume:
        raise ValueError(
            f"{path} exists: pass {flag_hint('--resume')} to continue that run, or choose "
            f"another {flag_hint('--run', 'DIR')}"
        )
    if d.main:
        _populate(cfg, shards, path)
    if cfg.resume and not exists and d.main:
        print(f"note: {path} does not exist yet; starting {cfg.run} from step 0")
    return path if exists else None


def _populate(cfg: TrainConfig, shards: ShardSet, checkpoint: str) -> None:
    os.makedirs(cfg.run, exist_ok=True)
    for stale in glob.glob(f"{checkpoint}.tmp-*"):  # left by a run killed while saving
        os.unlink(stale)
    for name in ("vocab.txt", "tokenizer.json"):
        src = os.path.join(shards.directory, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(cfg.run, name))
    write_text(os.path.join(cfg.run, "train_config.json"), to_json(asdict(cfg)))


def trim_metrics(path: str, step: int) -> None:
    """Drop records after `step`: a killed run may have logged past its last checkpoint."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    write_text(path, "".join(lines))


def to_json(obj) -> str:
    """Indented, key-sorted JSON with a final newline (the run directory's .json files)."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
