"""Model sizes and training settings: frozen dataclasses, validated on construction.

The presets follow the BERT paper (base, large) and the compact models of Turc et al. 2019
("Well-Read Students Learn Better": tiny, mini, small, medium). The vocabulary size is never
part of a preset: it comes from the shard set's manifest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

# name: (layers, hidden, heads); the feed-forward width is 4 x hidden everywhere.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# name: (learning rate, global batch). base and large use the paper's values; the compact
# presets take larger steps so that a short CPU run visibly learns.
TRAINING_DEFAULTS: dict[str, tuple[float, int]] = {
    "tiny": (1e-3, 32),
    "mini": (5e-4, 64),
    "small": (3e-4, 128),
    "medium": (2e-4, 128),
    "base": (1e-4, 256),
    "large": (1e-4, 256),
}


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int  # from the shards' manifest
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072  # feed-forward width
    max_position: int = 512  # learned position embeddings
    type_vocab_size: int = 2  # segment A and segment B
    dropout: float = 0.1  # after embeddings, attention output and feed-forward output
    attention_dropout: float = 0.1  # on the attention probabilities
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02  # std of the normal initialisation
    pad_id: int = 0  # [PAD] in this vocab (not always 0 in principle)
    next_sentence: bool = True  # the NSP head; False: masked-LM only (pooler left untrained)

    def __post_init__(self):
        if self.vocab_size < 6:
            raise ValueError(f"vocab_size {self.vocab_size} is too small for a BERT vocab")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} does not divide into {self.num_heads} heads"
            )
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id {self.pad_id} is outside the vocab (size {self.vocab_size})")
        if not (0 <= self.dropout < 1 and 0 <= self.attention_dropout < 1):
            raise ValueError("dropout probabilities must lie in [0, 1)")


def preset(name: str, vocab_size: int, **overrides) -> BertConfig:
    """The named size with the given vocab; `overrides` replace any other field."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    layers, hidden, heads = PRESETS[name]
    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=4 * hidden,
    )
    return replace(cfg, **overrides)


@dataclass(frozen=True)
class TrainConfig:
    shards: str = "out/sample"  # a finished shard set (manifest.json, vocab.txt, shards/)
    run: str = "runs/tiny-sample"  # run directory: metrics.jsonl, last.pt, vocab.txt, eval.json
    model: str = "tiny"  # preset name
    layers: int = 0  # encoder layers instead of the preset's (0: the preset's)
    hidden: int = 0  # hidden size instead of the preset's, feed-forward 4 x it (0: the preset's)
    heads: int = 0  # attention heads (0: the preset's; with --hidden, one per 64 of it)
    steps: int = 1000  # optimizer steps
    batch_size: int = 32  # sequences per optimizer step, all ranks and accumulation together
    accum: int = 1  # gradient accumulation: micro-batches per optimizer step
    lr: float = 1e-3  # peak learning rate
    warmup: int = 100  # linear warm-up steps, then the decay to 0 at `steps`
    schedule: str = "linear"  # the decay after warm-up: linear (BERT's) | cosine
    optimizer: str = "adamw"  # adamw | lamb (large batches: BERT in 76 minutes)
    weight_decay: float = 0.01  # decoupled (AdamW, LAMB); never on biases or LayerNorm
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    seed: int = 0
    device: str = "cpu"  # cpu | cuda (under torchrun: cuda:LOCAL_RANK)
    precision: str = "auto"  # auto (bf16 on CUDA, fp16 where it lacks bf16, fp32 on CPU) | bf16
    # | fp16 (autocast with loss scaling) | fp32
    compile: bool = False  # torch.compile the model
    checkpoint_activations: bool = False  # recompute each layer in the backward pass: less memory
    remask: bool = False  # draw fresh masks for every batch instead of the shards' own
    mask_prob: float = 0.0  # re-masking rate (needs remask); 0: the shards' masked_lm_prob
    nsp: bool = True  # False: masked-LM only, no NSP head or loss (segment B still fed as text)
    pack: bool = False  # pack whole rows into sequences of max_seq_length (no padding)
    attention_dropout: float = 0.1  # on the attention probabilities; 0 lets packed batches on
    # CUDA take the kernels that skip masked blocks (which have no dropout)
    shuffle_window: int = 4  # consecutive shards whose rows are shuffled together
    workers: int = 0  # DataLoader worker processes per rank (0: load in the training process)
    log_every: int = 10  # steps between metrics lines
    ckpt_every: int = 500  # steps between checkpoints (and one at the end)
    keep_every: int = 0  # steps between checkpoints kept as RUN/step-N.pt (0: last.pt alone)
    holdout: int = 1  # shards held out of training and evaluated at the end (0: none)
    eval_batches: int = 50  # at most this many held-out batches per rank (--holdout 0: none)
    eval_every: int = 0  # steps between held-out evaluations while training (0: at the end only)
    tensorboard: bool = False  # TensorBoard event files in RUN/tensorboard (model.board)
    peak_tflops: float = 0.0  # accelerator peak for the MFU figure; 0: looked up by GPU name
    resume: bool = False  # continue from RUN/last.pt
    init: str = ""  # a Hugging Face BERT directory to start from instead of `model`'s preset
    init_map_vocab: bool = False  # init: map its embedding rows onto the shards' vocab by piece
    allow_other_shards: bool = False  # resume on a set other than the run's own (model.run_shards)

    def __post_init__(self):
        check_fields(self, TRAIN_RULES)
        if self.init_map_vocab and not self.init:
            raise ValueError("--init-map-vocab needs --init DIR")
        if self.allow_other_shards and not self.resume:
            raise ValueError(
                "--allow-other-shards needs --resume: it lets a resumed run go on with another "
                "shard set, and a run that is not resumed takes any set"
            )
        if self.warmup > self.steps:
            raise ValueError(
                f"--warmup {self.warmup} is more than --steps {self.steps}: the learning rate "
                f"would never reach --lr; give {flag_hint('--warmup', str(self.steps))} or fewer"
            )
        check_sizes(self)
        if self.eval_every and not self.holdout:
            raise ValueError(
                f"--eval-every {self.eval_every} evaluates the held-out shards, and --holdout 0 "
                "holds none out: give --holdout 1 or more, or drop --eval-every"
            )
        if self.mask_prob and not self.remask:
            raise ValueError("--mask-prob is the rate of --remask's masks: pass --remask too")
        if self.peak_tflops and not self.device.startswith("cuda"):
            raise ValueError(
                f"--peak-tflops is a GPU's peak for the mfu figure, which a --device {self.device} "
                "run does not compute: drop it, or train with --device cuda"
            )


class Rule(NamedTuple):
    """What a field's value must meet, and the same in words for the refusal."""

    ok: Callable[[Any], bool]
    says: str


AT_LEAST_1 = Rule(lambda v: v >= 1, "must be at least 1")
NOT_NEGATIVE = Rule(lambda v: v >= 0, "must be 0 or more")
POSITIVE = Rule(lambda v: v > 0, "must be > 0")
A_SHARE = Rule(lambda v: 0 <= v < 1, "must lie in [0, 1)")
NAMED = Rule(bool, "must name a directory")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine")  # model.training.SCHEDULES's names
PRECISION = Rule(lambda v: v in PRECISIONS, "must be auto, bf16, fp16 or fp32")
SEEDS = 2**32  # numpy's and torch's generators all take a seed below this
SEED = Rule(lambda v: 0 <= v < SEEDS, f"must be from 0 to {SEEDS - 1}")

# TrainConfig's fields that a flag sets (each field's flag is its name as a flag, `--log-every`)
TRAIN_RULES = {
    "model": Rule(lambda v: v in PRESETS, f"must be one of {', '.join(PRESETS)}"),
    "run": NAMED,
    "layers": NOT_NEGATIVE,
    "hidden": NOT_NEGATIVE,
    "heads": NOT_NEGATIVE,
    "steps": AT_LEAST_1,
    "batch_size": AT_LEAST_1,
    "accum": AT_LEAST_1,
    "lr": POSITIVE,
    "warmup": NOT_NEGATIVE,
    "schedule": Rule(lambda v: v in SCHEDULES, f"must be one of {', '.join(SCHEDULES)}"),
    "optimizer": Rule(lambda v: v in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
    "weight_decay": NOT_NEGATIVE,
    "clip": Rule(lambda v: v >= 0, "must be 0 (no clipping) or more"),
    "seed": SEED,
    "precision": PRECISION,
    "mask_prob": Rule(lambda v: 0 <= v < 1, "must lie in (0, 1), e.g. 0.30"),
    "attention_dropout": A_SHARE,
    "shuffle_window": AT_LEAST_1,
    "workers": NOT_NEGATIVE,
    "log_every": AT_LEAST_1,
    "ckpt_every": AT_LEAST_1,
    "keep_every": Rule(lambda v: v >= 0, "must be 0 (last.pt alone) or more"),
    "holdout": NOT_NEGATIVE,
    "eval_batches": AT_LEAST_1,  # the held-out figures are means over its batches
    "eval_every": Rule(lambda v: v >= 0, "must be 0 (at the end only) or more"),
    "peak_tflops": Rule(lambda v: v >= 0, "must be 0 (looked up by the GPU's name) or more"),
}


def check_sizes(cfg: TrainConfig) -> None:
    """--layers, --hidden and --heads: a new model's shape, which --init's directory brings,
    heads that divide the hidden size."""
    given = [f"--{k} {getattr(cfg, k)}" for k in ("layers", "hidden", "heads") if getattr(cfg, k)]
    if given and cfg.init:
        raise ValueError(
            f"{' '.join(given)} shapes a new model, and --init {cfg.init} brings its own: drop "
            f"{'them' if len(given) > 1 else 'it'}, or --init"
        )
    hidden, heads = model_sizes(cfg)[1:]
    if hidden % heads:
        raise ValueError(
            f"--hidden {hidden} does not split into {heads} attention heads: give a hidden size "
            f"that {heads} divides, or --heads that divides {hidden} (BERT's heads are 64 wide)"
        )


def model_sizes(cfg: TrainConfig) -> tuple[int, int, int]:
    """(layers, hidden, heads) of the run's model: the preset's, or what the flags say; a
    hidden size given alone takes a head per 64 of it, as BERT's (at least one)."""
    layers, hidden, heads = PRESETS.get(cfg.model, (1, 64, 1))
    if cfg.hidden and not cfg.heads:
        heads = max(1, cfg.hidden // 64)
    return cfg.layers or layers, cfg.hidden or hidden, cfg.heads or heads


def check_fields(cfg: Any, rules: dict[str, Rule]) -> None:
    """Refuse the first field that breaks its rule, naming its flag, the rule and the value
    given: a message that lists several rules leaves the reader to find the one broken. A number
    that is not finite (nan, inf) breaks every rule, whatever a comparison says of it."""
    for name, rule in rules.items():
        value, says = getattr(cfg, name), rule.says
        ok = rule.ok(value)
        if isinstance(value, float) and not math.isfinite(value):
            ok, says = False, "must be a finite number"
        if not ok:
            shown = repr(value) if isinstance(value, str) else value
            raise ValueError(f"--{name.replace('_', '-')} {says} (got {shown})")


# Flags that the Makefile sets from a variable of its own; any other flag goes through ARGS.
MAKE_VARIABLES = {
    "--shards": "OUT",
    "--run": "RUN",
    "--model": "MODEL",
    "--steps": "STEPS",
    "--device": "DEVICE",
    "--task": "TASK",
    "--data": "DATA",
    "--ckpt": "CKPT",
    "--out": "EXPORT",
}


def flag_hint(flag: str, value: str = "") -> str:
    """A flag as a refusal names it, with its make spelling beside it, for those who run
    `make`: `--resume (make: ARGS=--resume)`, `--run DIR (make: RUN=DIR)`."""
    spelled = f"{flag} {value}".strip()
    if flag in MAKE_VARIABLES:
        make = f"{MAKE_VARIABLES[flag]}={value or '...'}"
    else:
        make = f"ARGS='{spelled}'" if " " in spelled else f"ARGS={spelled}"
    return f"{spelled} (make: {make})"


def defaulted(p, flag: str, kind, default, text: str) -> None:
    """A typed flag of an argparse parser `p` whose help ends with its default, as the config
    field holds it (each default's one home)."""
    p.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")


def training_defaults(model: str, steps: int) -> dict:
    """Learning rate, batch and warm-up for a preset: the paper's 10,000 warm-up steps, or a
    tenth of a shorter run."""
    if model not in TRAINING_DEFAULTS:
        raise ValueError(f"unknown model preset {model!r}; choose one of {', '.join(PRESETS)}")
    lr, batch = TRAINING_DEFAULTS[model]
    return {"lr": lr, "batch_size": batch, "warmup": min(10_000, steps // 10)}


@dataclass(frozen=True)
class EvaluateConfig:
    ckpts: tuple[str, ...]  # each RUN/last.pt (or RUN/step-N.pt) or a Hugging Face BERT directory
    shards: str  # the shard set whose rows are evaluated
    holdout: int = 1  # the rows pre-training holds out with --holdout N
    all_rows: bool = False  # every row of the set instead
    batch_size: int = 64  # rows per batch
    eval_batches: int = 0  # at most this many batches; 0: every held-out row
    device: str = "cpu"
    precision: str = "auto"  # as pre-training's: autocast on a GPU, fp32 on a CPU
    out: str = ""  # also write the figures to this file, a JSON object per checkpoint a line

    def __post_init__(self):
        check_fields(self, EVALUATE_RULES)


# EvaluateConfig's fields that a flag sets
EVALUATE_RULES = {
    "holdout": AT_LEAST_1,
    "batch_size": AT_LEAST_1,
    "eval_batches": Rule(lambda v: v >= 0, "must be 0 (every held-out row) or more"),
    "precision": PRECISION,
}
