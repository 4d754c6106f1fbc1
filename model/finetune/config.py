"""The fine-tuning run's configuration, validated on construction."""

from __future__ import annotations

import os
from dataclasses import dataclass

from model.config import (
    A_SHARE,
    AT_LEAST_1,
    NAMED,
    NOT_NEGATIVE,
    POSITIVE,
    PRECISION,
    SEED,
    Rule,
    check_fields,
)
from model.finetune.readers import GLUE_TASKS, check_task


@dataclass(frozen=True)
class FinetuneConfig:
    task: str  # a GLUE task (cola, sst2, ...), ner, squad, squad2 or swag (readers.TASKS)
    data: str  # the task's directory
    ckpt: str  # pre-training checkpoint (vocab.txt beside it) or a Hugging Face BERT directory
    run: str  # output directory
    epochs: float = 3.0
    batch_size: int = 32
    accum: int = 1  # micro-batches each batch is split into (gradients accumulated over them)
    lr: float = 2e-5  # the paper picks among 5e-5, 3e-5, 2e-5
    warmup_ratio: float = 0.1  # share of the steps spent warming up
    weight_decay: float = 0.01
    max_seq_length: int = 128
    doc_stride: int = 128  # squad: tokens between window starts
    max_query_length: int = 64  # squad: question tokens kept
    max_answer_length: int = 30  # squad: longest predicted answer, in tokens
    seed: int = 0
    device: str = "cpu"
    precision: str = "auto"  # the training step, as pre-training's: auto | bf16 | fp16 | fp32
    compile: bool = False  # torch.compile the training forward (evaluation runs eager)
    checkpoint_activations: bool = False  # recompute each layer in the backward pass
    log_every: int = 50
    predict: bool = False  # GLUE: label the test files with the best checkpoint, server layout
    tensorboard: bool = False  # TensorBoard event files in RUN/tensorboard (model.board)

    def __post_init__(self):
        check_task(self.task)
        if self.predict and not (self.task in GLUE_TASKS and GLUE_TASKS[self.task].test_files):
            raise ValueError(
                f"--predict labels GLUE test files for the GLUE server; --task {self.task} has "
                "none (its dev predictions are written without it)"
            )
        check_fields(self, FINETUNE_RULES)
        if self.accum > self.batch_size:
            raise ValueError(
                f"--accum {self.accum} splits each batch of --batch-size {self.batch_size} into "
                f"{self.accum} micro-batches, more than it has rows: give at most "
                f"{self.batch_size}"
            )


# FinetuneConfig's fields that a flag sets (each field's flag is its name as a flag)
FINETUNE_RULES = {
    "run": NAMED,
    "epochs": POSITIVE,
    "batch_size": AT_LEAST_1,
    "accum": AT_LEAST_1,
    "lr": POSITIVE,
    "warmup_ratio": A_SHARE,
    "weight_decay": NOT_NEGATIVE,
    "max_seq_length": Rule(lambda v: v >= 8, "must be at least 8"),
    "doc_stride": AT_LEAST_1,  # 0 would never move the window on
    "max_query_length": AT_LEAST_1,
    "max_answer_length": AT_LEAST_1,
    "seed": SEED,
    "precision": PRECISION,
    "log_every": AT_LEAST_1,
}


def default_run(ckpt: str, task: str) -> str:
    """CKPTDIR/finetune-TASK beside a checkpoint file; DIR-finetune-TASK beside a Hugging Face
    directory (not inside it: it is someone's model)."""
    if os.path.isdir(ckpt):
        return f"{os.path.normpath(ckpt)}-finetune-{task}"
    return os.path.join(os.path.dirname(ckpt) or ".", f"finetune-{task}")
