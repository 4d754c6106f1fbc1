"""`bert-model pretrain | finetune | glue | export | evaluate`: the model package's command line.

Examples::

    bert-model pretrain --shards out/sample --model tiny --steps 1000
    torchrun --nproc_per_node 8 -m model.cli pretrain --shards out/wiki --model base \\
        --device cuda --run-dir runs/base-wiki
    bert-model pretrain --shards out/wiki --init path/to/bert-dir --steps 10000
    bert-model finetune --task sst2 --data glue/SST-2 --ckpt runs/tiny-sample/last.pt
    bert-model finetune --task sst2 --data glue/SST-2 --ckpt export/tiny --predict
    bert-model glue --data glue_data --ckpt runs/tiny-sample/last.pt
    bert-model export --ckpt runs/tiny-sample/last.pt --out export/tiny
    bert-model export --ckpt runs/tiny-sample/finetune-sst2/best.pt --out export/tiny-sst2
    bert-model evaluate --ckpt runs/tiny-sample/last.pt --shards out/sample
"""

from __future__ import annotations

import argparse
import os
import sys

from model.config import (
    PRECISIONS,
    PRESETS,
    SCHEDULES,
    EvaluateConfig,
    TrainConfig,
    defaulted,
    flag_hint,
    training_defaults,
)
from model.finetune.flags import finetune_parser, glue_parser
from model.folders import UNWRITABLE, check_compile_folder, check_local_paths, unwritable_line
from schemas.command_line import OneLineParser
from schemas.interrupts import exit_code, interrupts_unwind


def _pretrain_parser(sub) -> None:
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


def _export_parser(sub) -> None:
    p = sub.add_parser("export", help="write a Hugging Face directory of a BERT trained here")
    ckpt = "pre-training checkpoint (RUN/last.pt), or a fine-tuning run's best.pt or model.pt"
    p.add_argument("--ckpt", required=True, help=ckpt + " (exported as its task's class)")
    out = "output directory: new, empty, or an earlier export (its files are replaced); never "
    p.add_argument("--out", required=True, help=out + "a shard set or a run folder")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="export into an --out that holds other files too (left as they are; the export's "
        "own files are replaced)",
    )


def _evaluate_parser(sub) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    """The command line; a mistake in it is one line (`OneLineParser`, which the subcommands'
    parsers are too)."""
    parser = OneLineParser(prog="bert-model", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _pretrain_parser(sub)
    finetune_parser(sub)
    glue_parser(sub)
    _export_parser(sub)
    _evaluate_parser(sub)
    return parser


def train_config(args: argparse.Namespace) -> TrainConfig:
    """Flags -> TrainConfig, filling the preset's defaults for what was not given (None): a
    value given, 0 included, is the config's to accept or refuse."""
    if args.mask_prob is not None and not 0 < args.mask_prob < 1:
        raise ValueError(f"--mask-prob {args.mask_prob}: give a share in (0, 1), e.g. 0.30")
    defaults = training_defaults(args.model, args.steps)
    name = os.path.basename(os.path.normpath(args.shards)) or "shards"
    return TrainConfig(
        shards=args.shards,
        run=os.path.join("runs", f"{args.model}-{name}") if args.run is None else args.run,
        model=args.model,
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        steps=args.steps,
        batch_size=defaults["batch_size"] if args.batch_size is None else args.batch_size,
        accum=args.accum,
        lr=defaults["lr"] if args.lr is None else args.lr,
        warmup=defaults["warmup"] if args.warmup is None else args.warmup,
        schedule=args.schedule,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        clip=args.clip,
        seed=args.seed,
        device=args.device,
        precision=args.precision,
        compile=args.compile,
        checkpoint_activations=args.checkpoint_activations,
        remask=args.remask or args.mask_prob is not None,
        mask_prob=args.mask_prob or 0.0,
        nsp=not args.no_nsp,
        pack=args.pack,
        attention_dropout=args.attention_dropout,
        shuffle_window=args.shuffle_window,
        workers=args.workers,
        log_every=args.log_every,
        ckpt_every=args.ckpt_every,
        keep_every=args.keep_every,
        holdout=args.holdout,
        eval_batches=args.eval_batches,
        eval_every=args.eval_every,
        tensorboard=args.tensorboard,
        peak_tflops=args.peak_tflops,
        resume=args.resume,
        init=args.init,
        init_map_vocab=args.init_map_vocab,
        allow_other_shards=args.allow_other_shards,
    )


def _pretrain(args: argparse.Namespace) -> None:
    """Refuse what can be refused before the run directory is made and locked (the flags, a run
    path taken by a file or by another kind of folder, an --init that is no model directory, a
    local shard set that is none); a later refusal leaves no run directory behind either."""
    from model.batches import refuse_too_many_workers
    from model.data import open_shards
    from model.folders import PRETRAINING_RUN, check_own_kind
    from model.hf_import import check_init_directory
    from model.pretrain import pretrain
    from model.run_dir import check_output_dir, removed_unless_used
    from model.shard_cache import settings
    from schemas import storage

    cfg = train_config(args)
    refuse_too_many_workers(cfg.workers)
    check_output_dir(cfg.run, "--run")
    check_own_kind(cfg.run, "--run", PRETRAINING_RUN, flag_hint("--run", "DIR"))
    if cfg.init:
        check_init_directory(cfg.init)
    with settings(args.shard_cache, args.shard_cache_gb):
        if not storage.is_remote(cfg.shards):  # a gs:// set's cache folder is made on opening
            open_shards(cfg.shards)
        with removed_unless_used(cfg.run):
            pretrain(cfg)


def _run(args: argparse.Namespace) -> None:
    check_local_paths(args.command, vars(args))
    check_compile_folder(vars(args))
    if args.command == "pretrain":
        _pretrain(args)
    elif args.command == "finetune":
        from model.finetune.loop import finetune, finetune_config

        finetune(finetune_config(args))
    elif args.command == "glue":
        from model.finetune.glue import glue

        glue(args)
    elif args.command == "evaluate":
        from model.evaluate import evaluate, evaluate_config
        from model.shard_cache import settings

        with settings(args.shard_cache, args.shard_cache_gb):
            evaluate(evaluate_config(args))
    else:
        from model.export import export

        print(f"exported to {export(args.ckpt, args.out, args.overwrite)}")


def interrupted_line(args: argparse.Namespace) -> str:
    """What an interrupted command says: how to go on (pre-training, from its checkpoint)."""
    when, then = how_to_go_on(args)
    return f"interrupted{when}; {then}"


def how_to_go_on(args: argparse.Namespace) -> tuple[str, str]:
    """(when it stopped, what to run) for a command stopped partway: pre-training goes on from
    its last checkpoint, other commands run again."""
    again = "run the same command again"
    if args.command != "pretrain":
        return "", again
    try:
        checkpoint = os.path.join(train_config(args).run, "last.pt")
    except ValueError:
        return "", again
    if not os.path.exists(checkpoint):
        return " before the run's first checkpoint", again
    return "", (
        f"run the same command with {flag_hint('--resume')} to continue from {checkpoint}, "
        "written every --ckpt-every steps"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with interrupts_unwind():
            _run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"bert-model {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # what os.access could not foresee: a read-only or full filesystem,
        if e.errno not in UNWRITABLE:  # a folder root may not write in (/sys, /proc)
            raise
        said = unwritable_line(e, how_to_go_on(args)[1])
        print(f"bert-model {args.command}: error: {said}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # under torchrun: a collective that another rank's end broke
        from model.training import peer_gone

        if not peer_gone(e):
            raise
        rank = os.environ.get("RANK", "?")
        said = f"rank {rank} stopped: another rank ended first (its line says why)"
        print(f"bert-model {args.command}: {said}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (`Interrupted`), or a Ctrl-C before
        if os.environ.get("RANK", "0") == "0":  # under torchrun every rank is told: one line
            print(interrupted_line(args), file=sys.stderr)
        return exit_code(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
