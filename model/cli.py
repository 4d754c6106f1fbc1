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
import contextlib
import os
import sys

from model.config import TrainConfig, flag_hint, training_defaults
from model.finetune.flags import finetune_parser, glue_parser
from model.flags import evaluate_parser, pretrain_parser
from model.folders import UNWRITABLE, check_compile_folder, check_local_paths, unwritable_line
from schemas.command_line import OneLineParser
from schemas.interrupts import exit_code, interrupts_unwind
from schemas.storage_errors import StoreError


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


def build_parser() -> argparse.ArgumentParser:
    """The command line; a mistake in it is one line (`OneLineParser`, which the subcommands'
    parsers are too)."""
    parser = OneLineParser(prog="bert-model", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pretrain_parser(sub)
    finetune_parser(sub)
    glue_parser(sub)
    _export_parser(sub)
    evaluate_parser(sub)
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


def parse(argv: list[str] | None):
    """The command line; a mistake in it is one line, which under torchrun the first process
    of each machine says alone (every process parses the same line: the same mistake), the
    others ending with the same status in silence."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        return build_parser().parse_args(argv)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
        return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        with interrupts_unwind():
            _run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"bert-model {args.command}: error: {e}", file=sys.stderr)
        return 2
    except StoreError as e:  # the object store failed under the run (a set on gs://)
        when, then = how_to_go_on(args)
        print(f"bert-model {args.command}: error: {e}{when}; {then}", file=sys.stderr)
        return 1
    except OSError as e:  # what os.access could not foresee: a read-only or full filesystem,
        if e.errno not in UNWRITABLE:  # a folder root may not write in (/sys, /proc)
            raise
        said = unwritable_line(e, how_to_go_on(args)[1])
        print(f"bert-model {args.command}: error: {said}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # under torchrun: a collective that another rank's end broke
        from model.batches import loader_worker_lost
        from model.training import peer_gone

        lost = loader_worker_lost(e)
        if lost:
            when, then = how_to_go_on(args)
            print(f"bert-model {args.command}: error: {lost}{when}; {then}", file=sys.stderr)
            return 1
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
