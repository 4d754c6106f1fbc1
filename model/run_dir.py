"""The run directory of pre-training: created (or re-entered on --resume) with the shards' vocab
and tokenizer and the run's train_config.json; later it holds metrics.jsonl, eval.json and the
checkpoint `last.pt`.

A checkpoint holds everything the rest of a run depends on (weights, optimizer, schedule, every
rank's RNG, the loader's position), written atomically, so that `--resume` reproduces an
uninterrupted run exactly and a run killed at any moment (SIGKILL included) continues from its
last checkpoint.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

import torch
import torch.distributed as dist

from model.config import BertConfig, TrainConfig, flag_hint
from model.run_lock import LOCK_NAME, RunLock
from model.run_shards import check_shard_set, shard_set_entry
from model.safe_load import PickledCodeError, load_weights, save_weights
from model.training import Dist, Trainer, WarmupLinear
from schemas import storage
from schemas.manifest import atomic_write_text
from schemas.reader import ShardSet

CHECKPOINT = "last.pt"
METRICS = "metrics.jsonl"
EVAL = "eval.json"


def check_output_dir(path: str, flag: str) -> None:
    """Refuse, before any work, an output directory that cannot be made: a file where it or a
    folder above it should be would otherwise end the command, after the work, in makedirs'
    traceback."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(
            f"{flag} {path} is a file, not a directory; choose another {flag_hint(flag, 'DIR')}"
        )
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(
            f"{flag} {path}: {above} is a file, not a directory, so nothing can be made under "
            f"it; choose another {flag_hint(flag, 'DIR')}"
        )


@contextmanager
def removed_unless_used(run: str) -> Iterator[None]:
    """A run directory this command makes, removed again (with the folders made above it) if
    the command ends while it holds nothing but its lock file: a refusal after `RunLock` made it
    (a batch that does not split over the ranks, an --init that does not fit) leaves nothing
    behind. Under torchrun rank 0 made it and removes it."""
    made = _first_missing(run) if os.environ.get("RANK", "0") == "0" else None
    try:
        yield
    except BaseException:
        if made:
            _remove_unused(os.path.abspath(run), made)
        raise


def _first_missing(path: str) -> str | None:
    """The outermost folder of `path` that does not exist yet (None: `path` exists)."""
    path, missing = os.path.abspath(path), None
    while not os.path.lexists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _remove_unused(run: str, made: str) -> None:
    """Remove `run` if all it holds is a lock file no other run holds, then the empty folders
    above it up to `made`. The lock is taken first, so a run that has just locked it keeps it."""
    try:
        if os.listdir(run) != [LOCK_NAME]:
            return
        with RunLock(run):
            os.unlink(os.path.join(run, LOCK_NAME))
            os.rmdir(run)
    except (OSError, ValueError):  # another run's now, or no longer ours to remove
        return
    folder = os.path.dirname(run)
    while folder.startswith(made):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


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
        src = storage.join(shards.directory, name)  # the set may be in an object store
        if storage.exists(src):
            storage.fetch(src, os.path.join(cfg.run, name))
    atomic_write_text(os.path.join(cfg.run, "train_config.json"), to_json(asdict(cfg)))


def trim_metrics(path: str, step: int) -> None:
    """Drop records after `step`: a killed run may have logged past its last checkpoint."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(lines))


def to_json(obj) -> str:
    """Indented, key-sorted JSON with a final newline (the run directory's .json files)."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


CHECKPOINT_FORMAT = 1
# Settings that fix the data order; a resumed run must keep them.
ORDER_KEYS = ("seed", "batch_size", "accum", "shuffle_window", "remask", "holdout", "pack")
# The recipe's own settings (what is masked, which losses); a resumed run must keep them too.
RECIPE_KEYS = ("mask_prob", "nsp", "attention_dropout")


def save_checkpoint(path: str, state: dict) -> None:
    """Written whole or not at all, Ctrl-C or not (`save_weights`)."""
    save_weights(path, state)


def rng_states(d: Dist) -> list[dict]:
    """Every rank's torch generator state (dropout), gathered on all ranks."""
    state = {"cpu": torch.get_rng_state()}
    if d.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(d.device)
    if d.world == 1:
        return [state]
    states: list = [None] * d.world
    dist.all_gather_object(states, state)
    return states


def checkpoint_state(
    trainer: Trainer, shards: ShardSet, step: int, position: int, rng: list[dict]
) -> dict:
    return {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "loader_position": position,
        "model_config": asdict(trainer.model_cfg),
        "train_config": asdict(trainer.cfg),
        "vocab": {
            "size": len(shards.vocab),
            "sha256": shards.manifest.vocab_sha256,
            "special_ids": shards.vocab.special_ids.to_dict(),
        },
        "shard_config": dict(shards.config),
        **shard_set_entry(shards),  # its manifest's digest: a resume keeps the set
        "model": trainer.raw.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "rng": rng,
        "world_size": trainer.d.world,
    }


def write_checkpoint(
    path: str, trainer: Trainer, shards: ShardSet, step: int, position: int
) -> None:
    """Called on every rank (gathering the RNG states is a collective); rank 0 writes."""
    rng = rng_states(trainer.d)
    if trainer.d.main:
        save_checkpoint(path, checkpoint_state(trainer, shards, step, position, rng))


def load_checkpoint(path: str) -> dict:
    try:
        ckpt = load_weights(path)
    except PickledCodeError:
        raise
    except Exception as e:  # torch raises several types for a damaged file
        raise ValueError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {e}); it was not written "
            "by this package or is damaged"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a checkpoint of this package (format {CHECKPOINT_FORMAT})")
    return ckpt


def check_resume(path: str, ckpt: dict, trainer: Trainer, shards: ShardSet) -> None:
    """Refuse to resume a checkpoint onto a different vocab, model or data order."""
    size, here = ckpt["vocab"]["size"], len(shards.vocab)
    if size != here:
        raise ValueError(
            f"{path}: trained with a vocab of {size} pieces, but {shards.directory} has {here}; "
            "resume on the shard set the run started with, or start a new "
            f"{flag_hint('--run', 'DIR')}"
        )
    if ckpt["vocab"]["sha256"] != shards.manifest.vocab_sha256:
        raise ValueError(
            f"{path}: trained with vocab {ckpt['vocab']['sha256']}, but {shards.directory} uses "
            f"{shards.manifest.vocab_sha256}; resume on the original shard set, or start a new "
            f"{flag_hint('--run', 'DIR')}"
        )
    init = ckpt["train_config"].get("init", "")
    if init != trainer.cfg.init:
        started = f"from {init}" if init else f"from the {ckpt['train_config']['model']!r} preset"
        raise ValueError(
            f"{path}: the run started {started}; resume it with "
            f"{flag_hint('--init', init) if init else 'no --init (make: none in ARGS)'}"
        )
    # A checkpoint written before a field existed holds that field's default.
    was_cfg = {**asdict(BertConfig(**ckpt["model_config"])), **ckpt["model_config"]}
    recipe = {"next_sentence": "nsp", "attention_dropout": "attention_dropout"}
    changed = [v for k, v in recipe.items() if was_cfg[k] != getattr(trainer.model_cfg, k)]
    if changed:
        hints = ", ".join(_recipe_hint(ckpt, k) for k in changed)
        raise ValueError(f"{path}: resume with the run's own recipe: {hints}")
    if was_cfg != asdict(trainer.model_cfg):
        was = ckpt["train_config"]["model"]
        raise ValueError(
            f"{path}: a {was!r} model; {flag_hint('--model', trainer.cfg.model)} differs"
        )
    defaults = asdict(TrainConfig())
    was_train = {**defaults, **ckpt["train_config"]}
    changed = [k for k in ORDER_KEYS if was_train[k] != getattr(trainer.cfg, k)]
    if changed:
        old = ", ".join(f"{k}={was_train[k]}" for k in changed)
        raise ValueError(f"{path}: resume with the run's own data settings ({old})")
    changed = [k for k in RECIPE_KEYS if was_train[k] != getattr(trainer.cfg, k)]
    if changed:
        hints = ", ".join(_recipe_hint(ckpt, k) for k in changed)
        raise ValueError(f"{path}: resume with the run's own recipe: {hints}")
    check_shard_set(path, ckpt, shards, trainer.cfg.allow_other_shards, trainer.d.main)


def _recipe_hint(ckpt: dict, key: str) -> str:
    """How the flags spell a recipe setting as the checkpoint's run had it."""
    value = {**asdict(TrainConfig()), **ckpt["train_config"]}[key]
    if key == "nsp":
        return "MLM + NSP (no --no-nsp)" if value else flag_hint("--no-nsp")
    if key == "attention_dropout":
        return flag_hint("--attention-dropout", f"{value:g}")
    return flag_hint("--mask-prob", f"{value:g}") if value else "the shards' rate (no --mask-prob)"


def restore(ckpt: dict, trainer: Trainer) -> None:
    """Put the weights, optimizer, schedule and this rank's RNG back as the checkpoint had them."""
    trainer.raw.load_state_dict(ckpt["model"])
    trainer.optimizer.load_state_dict(ckpt["optimizer"])
    trainer.scheduler.load_state_dict(ckpt["scheduler"])
    _reschedule(trainer)
    _restore_rng(ckpt, trainer)


def _reschedule(trainer: Trainer) -> None:
    """The schedule follows this run's --steps and --warmup (a resumed run may be extended)."""
    schedule = WarmupLinear(trainer.cfg.warmup, trainer.cfg.steps)
    trainer.scheduler.lr_lambdas = [schedule] * len(trainer.optimizer.param_groups)
    factor = schedule(trainer.scheduler.last_epoch)
    for group, base in zip(trainer.optimizer.param_groups, trainer.scheduler.base_lrs, strict=True):
        group["lr"] = base * factor
    trainer.scheduler._last_lr = [g["lr"] for g in trainer.optimizer.param_groups]


def _restore_rng(ckpt: dict, trainer: Trainer) -> None:
    d = trainer.d
    if len(ckpt["rng"]) == d.world:
        torch.set_rng_state(ckpt["rng"][d.rank]["cpu"])
        if d.device.type == "cuda" and "cuda" in ckpt["rng"][d.rank]:
            torch.cuda.set_rng_state(ckpt["rng"][d.rank]["cuda"], d.device)
    else:  # another world size: the data order holds, dropout draws differ
        torch.manual_seed(trainer.cfg.seed + d.rank + ckpt["step"])
