"""`bert-model finetune`'s flags, each default taken from its `FinetuneConfig` field (its one
home; `tests/model/test_cli_defaults.py` compares them)."""

from __future__ import annotations

import argparse

from model.config import PRECISIONS, defaulted
from model.finetune.config import FinetuneConfig

TASK_HELP = (
    "cola | sst2 | mrpc | qqp | stsb | qnli | rte | wnli | mnli (GLUE TSV), xnli (MultiNLI's "
    "train.tsv, XNLI's dev and test), ner (CoNLL), squad (SQuAD v1.1), squad2 (SQuAD 2.0), "
    "swag (SWAG CSV)"
)


def finetune_parser(sub) -> None:
    p = sub.add_parser("finetune", help="fine-tune a pre-trained checkpoint on a task")
    p.add_argument("--task", required=True, help=TASK_HELP)
    p.add_argument(
        "--data",
        required=True,
        help="task directory (train.tsv/dev.tsv, train.txt/dev.txt, train-v1.1.json/dev-v1.1.json)",
    )
    p.add_argument(
        "--ckpt",
        required=True,
        help="pre-training checkpoint (RUN/last.pt, vocab.txt beside it), or a Hugging Face BERT "
        "directory (config.json, model.safetensors or pytorch_model.bin, vocab.txt)",
    )
    p.add_argument(
        "--run",
        default=None,
        help="output directory; an earlier fine-tuning run's files there are replaced "
        "(default: CKPTDIR/finetune-TASK; beside a Hugging Face directory DIR: "
        "DIR-finetune-TASK)",
    )
    _squad_flags(p, FinetuneConfig)
    _training_flags(p)


def glue_parser(sub) -> None:
    """`bert-model glue`: the GLUE tasks one after another, each with finetune's flags."""
    from model.finetune.glue import TASK_FOLDERS

    p = sub.add_parser("glue", help="fine-tune and score the GLUE tasks, and their table")
    p.add_argument(
        "--data",
        required=True,
        help="the GLUE folder: a folder per task, named as download_glue_data.py names them "
        "(CoLA, SST-2, ..., MNLI) or as the Hugging Face Hub's nyu-mll/glue does (cola, sst2, ...)",
    )
    p.add_argument(
        "--ckpt",
        required=True,
        help="pre-training checkpoint (RUN/last.pt) or a Hugging Face BERT directory",
    )
    p.add_argument(
        "--run",
        default=None,
        help="output directory: a fine-tuning run per task in RUN/TASK, and RUN/glue.json "
        "(default: CKPTDIR/finetune-glue; beside a Hugging Face directory DIR: DIR-finetune-glue)",
    )
    p.add_argument(
        "--tasks",
        default=",".join(TASK_FOLDERS),
        help="the tasks to run, comma-separated (default: all nine)",
    )
    p.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="fine-tunings of each task, seeds SEED, SEED+1, ..., the best on dev kept (the "
        "BERT paper's random restarts for small sets); above 1, each in RUN/TASK/seed-S",
    )
    _training_flags(p)


def _training_flags(p: argparse.ArgumentParser) -> None:
    """What `finetune` and `glue` share: the schedule, the step, logging, --predict."""
    cfg = FinetuneConfig  # each default's one home: its field there
    _finetune_schedule_flags(p, cfg)
    defaulted(p, "--seed", int, cfg.seed, "seed for the head, dropout and order")
    p.add_argument("--device", default=cfg.device, help="cpu or cuda (default: %(default)s)")
    _finetune_step_flags(p)
    defaulted(p, "--log-every", int, cfg.log_every, "steps between progress lines")
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write the metrics (training loss, dev metrics) as TensorBoard event files in "
        "RUN/tensorboard (needs the tensorboard package)",
    )
    p.add_argument(
        "--predict",
        action="store_true",
        help="GLUE: also label test.tsv (MNLI: test_matched.tsv, test_mismatched.tsv) with the "
        "best checkpoint, as the GLUE server takes it (RUN/SST-2.tsv, ...)",
    )


def _finetune_schedule_flags(p: argparse.ArgumentParser, cfg) -> None:
    """Fine-tuning: epochs, batch, learning rate and its warm-up, weight decay, length."""
    p.add_argument("--max-seq-length", type=int, default=None, help="default: 128, 384 for squad*")
    defaulted(p, "--epochs", float, cfg.epochs, "training epochs")
    defaulted(p, "--batch-size", int, cfg.batch_size, "sequences per step")
    defaulted(
        p,
        "--accum",
        int,
        cfg.accum,
        "micro-batches each batch is split into, gradients accumulated over them (less memory, "
        "the same batch)",
    )
    defaulted(p, "--lr", float, cfg.lr, "peak learning rate")
    defaulted(p, "--warmup-ratio", float, cfg.warmup_ratio, "warm-up share of the steps")
    defaulted(p, "--weight-decay", float, cfg.weight_decay, "AdamW weight decay")


def _squad_flags(p: argparse.ArgumentParser, cfg) -> None:
    """Fine-tuning: SQuAD's windows, questions and answers."""
    squad = (
        (
            "--doc-stride",
            cfg.doc_stride,
            "tokens between the starts of a long context's windows, "
            "as doc_stride in the paper's run_squad.py",
        ),
        ("--max-query-length", cfg.max_query_length, "question tokens kept"),
        ("--max-answer-length", cfg.max_answer_length, "longest answer in tokens"),
    )
    for flag, default, text in squad:  # None when not given: refused beside another task
        p.add_argument(flag, type=int, default=None, help=f"squad*: {text} (default: {default})")


def _finetune_step_flags(p: argparse.ArgumentParser) -> None:
    """Fine-tuning: precision and compilation of the training step, defaults as
    `FinetuneConfig` has them; evaluation and --predict run the eager model in fp32."""
    p.add_argument(
        "--precision",
        default=FinetuneConfig.precision,
        choices=PRECISIONS,
        help="of the training step, as pre-training's; auto: bf16 autocast on CUDA (fp16 on "
        "GPUs without bf16), fp32 on CPU (default: "
        "%(default)s); dev evaluation and --predict run in fp32",
    )
    p.add_argument(
        "--checkpoint-activations",
        action="store_true",
        default=FinetuneConfig.checkpoint_activations,
        help="compute each encoder layer again in the backward pass instead of keeping its "
        "activations: less memory (BERT-large at 384 or 512), the same results",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        default=FinetuneConfig.compile,
        help="torch.compile the training forward (dynamic shapes); dev evaluation and --predict "
        "run the model eager",
    )
