"""A resumed pre-training run checked against its checkpoint, then restored from it.

`check_resume` refuses, before anything of the run changes, a checkpoint of another vocab, model,
data order, recipe or optimizer settings than the flags give; `restore` puts back the weights,
optimizer, schedule, loss scale and every rank's random state, so that `--resume` reproduces an
uninterrupted run (`model.run_dir` writes and reads the checkpoint itself).
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from model.config import PRESETS, BertConfig, TrainConfig, flag_hint
from model.run_shards import check_shard_set
from model.training import SCHEDULES, Trainer
from schemas.reader import ShardSet

# Settings that fix the data order; a resumed run must keep them.
ORDER_KEYS = ("seed", "batch_size", "accum", "shuffle_window", "remask", "holdout", "pack")
# The recipe's own settings (what is masked, which losses); a resumed run must keep them too.
RECIPE_KEYS = ("mask_prob", "nsp", "attention_dropout")
# What the optimizer's own state restores on a resume, whatever the flags say; a resume that
# changes them is refused (the schedule's --steps, --warmup and --clip follow the flags).
OPTIMIZER_KEYS = ("lr", "weight_decay")


def check_resume(path: str, ckpt: dict, trainer: Trainer, shards: ShardSet) -> None:
    """Refuse to resume a checkpoint onto a different vocab, model, data order or optimizer
    setting, or with fewer --steps than it has taken."""
    if trainer.cfg.steps < ckpt["step"]:
        raise ValueError(
            f"{path}: the run is at step {ckpt['step']}, past --steps {trainer.cfg.steps}; "
            f"pass {flag_hint('--steps', str(ckpt['step']))} or more to finish or extend it"
        )
    _check_vocab(path, ckpt, shards)
    _check_model(path, ckpt, trainer)
    _check_train_settings(path, ckpt, trainer.cfg)
    check_shard_set(path, ckpt, shards, trainer.cfg.allow_other_shards, trainer.d.main)


def _check_vocab(path: str, ckpt: dict, shards: ShardSet) -> None:
    """The shard set's vocab is the run's: its size, then its digest."""
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


def _check_model(path: str, ckpt: dict, trainer: Trainer) -> None:
    """The model is the run's: how it started (--init or a preset), its recipe's switches,
    then its whole config."""
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
    now_cfg = asdict(trainer.model_cfg)
    if was_cfg != now_cfg:
        model = ckpt["train_config"]["model"]
        was, now = _shape(was_cfg), _shape(now_cfg)
        if was == now:  # the same shape, another config (positions, vocab): the set's doing
            keys = ", ".join(f"{k} {was_cfg[k]}" for k in was_cfg if was_cfg[k] != now_cfg[k])
            raise ValueError(f"{path}: the run's model has {keys}; this run's would not")
        flags = " ".join(
            f"--{k} {v}" for k, v in zip(("layers", "hidden", "heads"), was, strict=True)
        )
        preset_shape = PRESETS.get(model)
        again = flag_hint("--model", model) + ("" if preset_shape == was else f" {flags}")
        raise ValueError(
            f"{path}: a {model!r} model of {_said(was)}, these flags make one of {_said(now)}; "
            f"resume with {again}"
        )


def _check_train_settings(path: str, ckpt: dict, cfg: TrainConfig) -> None:
    """The data order, the recipe and the optimizer settings are the run's (a checkpoint
    written before a setting existed holds its default)."""
    was_train = {**asdict(TrainConfig()), **ckpt["train_config"]}
    changed = [k for k in ORDER_KEYS if was_train[k] != getattr(cfg, k)]
    if changed:
        old = ", ".join(f"{k}={was_train[k]}" for k in changed)
        raise ValueError(f"{path}: resume with the run's own data settings ({old})")
    changed = [k for k in RECIPE_KEYS if was_train[k] != getattr(cfg, k)]
    if changed:
        hints = ", ".join(_recipe_hint(ckpt, k) for k in changed)
        raise ValueError(f"{path}: resume with the run's own recipe: {hints}")
    if was_train["optimizer"] != cfg.optimizer:  # its moments are another optimizer's
        raise ValueError(
            f"{path}: the run trains with --optimizer {was_train['optimizer']}; resume with "
            f"{flag_hint('--optimizer', was_train['optimizer'])}, or start a new "
            f"{flag_hint('--run', 'DIR')}"
        )
    changed = [k for k in OPTIMIZER_KEYS if was_train[k] != getattr(cfg, k)]
    if changed:
        given = _flags({k: getattr(cfg, k) for k in changed})
        own = _flags({k: was_train[k] for k in changed})
        flag, value = own.split(" ", 1)
        raise ValueError(
            f"{path}: its optimizer state keeps the run's own {own} on a resume, so {given} "
            f"would not take effect; resume with {flag_hint(flag, value)}, or start a new "
            f"{flag_hint('--run', 'DIR')}"
        )


def _shape(model_cfg: dict) -> tuple[int, int, int]:
    """A model config's (layers, hidden, heads)."""
    return tuple(model_cfg[k] for k in ("num_layers", "hidden_size", "num_heads"))


def _said(shape: tuple[int, int, int]) -> str:
    return "{} layers, hidden {}, {} heads".format(*shape)


def _flags(values: dict) -> str:
    """Settings as the flags spell them: `--lr 0.001 --weight-decay 0.01`."""
    return " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in values.items())


def _recipe_hint(ckpt: dict, key: str) -> str:
    """How the flags spell a recipe setting as the checkpoint's run had it."""
    value = {**asdict(TrainConfig()), **ckpt["train_config"]}[key]
    if key == "nsp":
        return "MLM + NSP (no --no-nsp)" if value else flag_hint("--no-nsp")
    if key == "attention_dropout":
        return flag_hint("--attention-dropout", f"{value:g}")
    return flag_hint("--mask-prob", f"{value:g}") if value else "the shards' rate (no --mask-prob)"


def restore(ckpt: dict, trainer: Trainer) -> None:
    """Put the weights, optimizer, schedule, loss scale and this rank's RNG back as the
    checkpoint had them."""
    trainer.raw.load_state_dict(ckpt["model"])
    trainer.optimizer.load_state_dict(ckpt["optimizer"])
    trainer.scheduler.load_state_dict(ckpt["scheduler"])
    if trainer.scaler and "scaler" in ckpt:  # fp16's loss scale; a run that was not: 2^16 again
        trainer.scaler.load_state_dict(ckpt["scaler"])
    _reschedule(trainer)
    _restore_rng(ckpt, trainer)


def _reschedule(trainer: Trainer) -> None:
    """The schedule follows this run's --steps, --warmup and --schedule (a resumed run may be
    extended)."""
    schedule = SCHEDULES[trainer.cfg.schedule](trainer.cfg.warmup, trainer.cfg.steps)
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
