"""`bert-model pretrain`'s and `evaluate`'s flags, each default taken from its config field
(`TrainConfig`, `EvaluateConfig`: the one home of each; `tests/model/test_cli_defaults.py`
compares them). Plain argparse: the command line starts without torch."""

from __future__ import annotations

import argparse

from model.config import (
    PRECISIONS,
    PRESETS,
    SCHEDULES,
    EvaluateConfig,
    TrainConfig,
    defaulted,
)


def pretrain_parser(sub) -> None:
    p = sub.add_parser("pretrain", help="MLM + NSP pre-training on a shard set")
    p.add_argument(
        "--shards", default=TrainConfig.shards, help="shard set directory (default: %(default)s)"
    )
    p.add_argument(
        "--run",
        "--run-dir",
        dest="run",
        default=None,
        help="run directory (default: runs/MODEL-SHARDSNAME); under torchrun spell it --run-dir, "
        "since torchrun reads --run as its own --run-path",
    )
    p.add_argument(
        "--model",
        default=TrainConfig.model,
        choices=list(PRESETS),
        help="size preset (default: %(default)s)",
    )
    for flag, what in (
        ("--layers", "encoder layers"),
        ("--hidden", "hidden size (the feed-forward 4 x it)"),
        ("--heads", "attention heads (with --hidden alone: one per 64 of it)"),
    ):
        p.add_argument(
            flag, type=int, default=0, help=f"{what} in place of the preset's (default: its own)"
        )
    _optimizer_flags(p)
    _recipe_flags(p)
    _runtime_flags(p)
    _record_flags(p)
    _start_flags(p)
    _shard_cache_flags(p)


def _shard_cache_flags(p: argparse.ArgumentParser) -> None:
    """Pre-training or evaluating on gs:// shards: the local cache they stream into
    (model.shard_cache)."""
    from model.shard_cache import DEFAULT_GB, gigabytes

    p.add_argument(
        "--shard-cache",
        default=None,
        metavar="DIR",
        help="with --shards gs://...: the folder the shards are copied into as the loader reads "
        "them (a new or empty folder, or an earlier cache; default: ~/.cache/bert-shards/shards)",
    )
    p.add_argument(
        "--shard-cache-gb",
        type=gigabytes,
        default=None,
        metavar="N",
        help="with --shards gs://...: the cache's size in GB; the least recently read copies "
        f"are removed beyond it and fetched again when needed (default: {DEFAULT_GB:g})",
    )


def _optimizer_flags(p: argparse.ArgumentParser) -> None:
    """Pre-training: steps, batch, schedule, regularisation, seed."""
    defaulted(p, "--steps", int, TrainConfig.steps, "optimizer steps")
    p.add_argument(
        "--batch-size",
        type=int,
        help="sequences per step over all ranks (default: by preset, 32 for tiny, 256 for base)",
    )
    defaulted(p, "--accum", int, TrainConfig.accum, "gradient accumulation micro-batches")
    p.add_argument(
        "--lr",
        type=float,
        help="peak learning rate (default: by preset, 1e-3 for tiny, 1e-4 for base)",
    )
    p.add_argument("--warmup", type=int, help="warm-up steps (default: min(10000, steps/10))")
    p.add_argument(
        "--schedule",
        default=TrainConfig.schedule,
        choices=SCHEDULES,
        help="the learning rate's decay to 0 after warm-up: linear (BERT's) or cosine "
        "(default: %(default)s)",
    )
    defaulted(p, "--optimizer", str, TrainConfig.optimizer, "adamw, or lamb for large batches")
    defaulted(p, "--weight-decay", float, TrainConfig.weight_decay, "decoupled weight decay")
    defaulted(p, "--clip", float, TrainConfig.clip, "gradient norm clip, 0 = off")
    defaulted(p, "--seed", int, TrainConfig.seed, "seed for init, dropout and data order")


def _recipe_flags(p: argparse.ArgumentParser) -> None:
    """Pre-training: the recipe's knobs (masking, NSP, attention dropout, packing), recorded in
    the run and refused on a resume that changes them."""
    p.add_argument(
        "--remask",
        action="store_true",
        help="fresh masks per batch (same 80/10/10 rule) instead of the shards' own",
    )
    p.add_argument(
        "--mask-prob",
        type=float,
        default=None,
        help="share of each row's pieces masked, drawn afresh per batch (implies --remask; "
        "80/10/10 and whole-word masking as the shards'; the per-row cap scales with it); "
        "MosaicBERT uses 0.30 (default: the shards' masked_lm_prob, 0.15)",
    )
    p.add_argument(
        "--no-nsp",
        action="store_true",
        help="masked-LM only: no next-sentence head or loss; rows keep segment B as text",
    )
    p.add_argument(
        "--attention-dropout",
        type=float,
        default=TrainConfig.attention_dropout,
        help="dropout on the attention probabilities; 0 (MosaicBERT's setting) lets packed "
        "batches on CUDA use the kernels that skip masked blocks (default: %(default)s, as BERT)",
    )
    p.add_argument(
        "--pack",
        action="store_true",
        help="pack whole rows into sequences of the shards' max_seq_length (no padding); "
        "--batch-size then counts packed sequences",
    )


def _runtime_flags(p: argparse.ArgumentParser) -> None:
    """Pre-training: device, precision, memory and compilation, data loading."""
    p.add_argument(
        "--device", default=TrainConfig.device, help="cpu or cuda (default: %(default)s)"
    )
    p.add_argument(
        "--precision",
        default=TrainConfig.precision,
        choices=PRECISIONS,
        help="auto: bf16 autocast on CUDA, fp16 with loss scaling on GPUs without bf16 (V100, "
        "T4), fp32 on CPU (default: %(default)s)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument(
        "--checkpoint-activations",
        action="store_true",
        help="keep each encoder layer's input only and compute the layer again in the backward "
        "pass: the activations of one layer held at a time, not all, for one more forward pass "
        "of the encoder; the same results",
    )
    defaulted(
        p,
        "--shuffle-window",
        int,
        TrainConfig.shuffle_window,
        "shards whose rows are shuffled together",
    )
    defaulted(p, "--workers", int, TrainConfig.workers, "DataLoader worker processes per rank")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=TrainConfig.peak_tflops,
        help="GPU bf16 peak for MFU (default: looked up by name)",
    )


def _record_flags(p: argparse.ArgumentParser) -> None:
    """Pre-training: what a run records as it goes (metrics, checkpoints, evaluations)."""
    defaulted(p, "--log-every", int, TrainConfig.log_every, "steps between metrics lines")
    defaulted(p, "--ckpt-every", int, TrainConfig.ckpt_every, "steps between checkpoints")
    defaulted(
        p,
        "--keep-every",
        int,
        TrainConfig.keep_every,
        "steps between checkpoints kept as RUN/step-N.pt beside last.pt (for evaluate, finetune "
        "or export later); 0: last.pt alone",
    )
    defaulted(p, "--holdout", int, TrainConfig.holdout, "shards held out for the final evaluation")
    defaulted(p, "--eval-batches", int, TrainConfig.eval_batches, "held-out batches per rank")
    defaulted(
        p,
        "--eval-every",
        int,
        TrainConfig.eval_every,
        "steps between held-out evaluations while training, logged in metrics.jsonl; 0: at the "
        "end only",
    )
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write the metrics as TensorBoard event files in RUN/tensorboard (needs the "
        "tensorboard package)",
    )


def _start_flags(p: argparse.ArgumentParser) -> None:
    """Pre-training: what the weights start from."""
    p.add_argument("--resume", action="store_true", help="continue from RUN/last.pt")
    p.add_argument(
        "--allow-other-shards",
        action="store_true",
        help="with --resume: continue on a shard set other than the run's own (another "
        "manifest.json; default: refuse, naming both)",
    )
    p.add_argument(
        "--init",
        default=TrainConfig.init,
        metavar="DIR",
        help="start from the weights and config.json of a Hugging Face BERT directory "
        "(save_pretrained of BertForPreTraining, BertForMaskedLM or BertModel, or our export) "
        "instead of --model's preset; its vocab.txt must be the shards' (default: none)",
    )
    p.add_argument(
        "--init-map-vocab",
        action="store_true",
        help="with --init and a vocab other than the shards': map the embedding rows by piece, "
        "initialising pieces it lacks (default: refuse)",
    )


def evaluate_parser(sub) -> None:
    """`bert-model evaluate`'s flags, each default its `EvaluateConfig` field's."""
    cfg = EvaluateConfig
    p = sub.add_parser("evaluate", help="held-out MLM/NSP loss and accuracy of a model on a set")
    p.add_argument(
        "--ckpt",
        required=True,
        nargs="+",
        help="pre-training checkpoint (RUN/last.pt, RUN/step-N.pt), or a Hugging Face BERT "
        "directory with a masked-LM head (BertForPreTraining, BertForMaskedLM, an export of "
        "ours); several are evaluated in turn on the same rows",
    )
    p.add_argument("--shards", required=True, help="shard set of the model's vocab (or gs://)")
    p.add_argument(
        "--holdout",
        type=int,
        default=None,
        help="the rows pre-training holds out with --holdout N: the last N shards, or the "
        f"last tenth of a single shard's rows (default: {cfg.holdout})",
    )
    p.add_argument("--all-rows", action="store_true", help="every row of the set instead")
    defaulted(p, "--batch-size", int, cfg.batch_size, "rows per batch")
    defaulted(p, "--eval-batches", int, cfg.eval_batches, "at most this many batches; 0: all")
    p.add_argument("--device", default=cfg.device, help="cpu or cuda (default: %(default)s)")
    p.add_argument(
        "--precision",
        default=cfg.precision,
        choices=PRECISIONS,
        help="autocast as in pre-training; auto: bf16 on CUDA (fp16 without bf16), fp32 on CPU "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--out", default=cfg.out, help="also write the figures to this file, a JSON object a line"
    )
    _shard_cache_flags(p)
