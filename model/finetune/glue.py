"""`bert-model glue`: the GLUE tasks fine-tuned from one checkpoint, one after another, each as
`bert-model finetune --task TASK` runs it (in RUN/TASK), and the table of their dev scores.

A task's score is the mean of the metrics GLUE reports for it, in percent: CoLA Matthews
correlation; SST-2, QNLI, RTE and WNLI accuracy; MRPC and QQP F1 and accuracy; STS-B Pearson and
Spearman correlation; MNLI matched and mismatched accuracy (matched alone without
`dev_mismatched.tsv`). The average is over the tasks run, WNLI left out as the BERT paper leaves
it out of its table. The scores are the last evaluation's (each run's results.json), on the dev
sets: GLUE's test labels are the server's, which `--predict` writes the files for.

This module imports neither torch nor the fine-tuning loop until it runs, so that the command
line starts without them.
"""

from __future__ import annotations

import argparse
import json
import os

from model.finetune.config import default_run
from schemas.manifest import atomic_write_text

# task -> (its folder as download_glue_data.py names it, as the Hub's nyu-mll/glue names it)
TASK_FOLDERS = {
    "cola": ("CoLA", "cola"),
    "sst2": ("SST-2", "sst2"),
    "mrpc": ("MRPC", "mrpc"),
    "stsb": ("STS-B", "stsb"),
    "qqp": ("QQP", "qqp"),
    "mnli": ("MNLI", "mnli"),
    "qnli": ("QNLI", "qnli"),
    "rte": ("RTE", "rte"),
    "wnli": ("WNLI", "wnli"),
}
# task -> the metrics GLUE reports for it, whose mean is its score
REPORTED = {
    "cola": ("mcc",),
    "mrpc": ("f1", "accuracy"),
    "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
    "mnli": ("accuracy", "accuracy_mm"),
}
LEFT_OUT = ("wnli",)  # of the average, as in the BERT paper's table
SUMMARY = "glue.json"


def glue(args: argparse.Namespace) -> dict:
    """Fine-tune every task asked for (their folders found first, before any runs), each
    `--restarts` times from consecutive seeds keeping the best on dev, then write and print the
    table; returns it."""
    from model.finetune.loop import finetune, finetune_config

    tasks = _tasks(args.tasks)
    if args.restarts < 1:
        raise ValueError(f"--restarts must be at least 1 (got {args.restarts})")
    folders = {task: _folder(args.data, task) for task in tasks}
    run = args.run or default_run(args.ckpt, "glue")
    scores, tried = {}, {}
    for task in tasks:
        by_seed = {}
        for seed in range(args.seed, args.seed + args.restarts):
            folder = os.path.join(run, task)
            folder = folder if args.restarts == 1 else os.path.join(folder, f"seed-{seed}")
            given = {**vars(args), "task": task, "data": folders[task], "run": folder}
            given.update(seed=seed, doc_stride=None, max_query_length=None, max_answer_length=None)
            by_seed[seed] = finetune(finetune_config(argparse.Namespace(**given)))
        each = {s: task_score(task, m) for s, m in by_seed.items()}
        best = max(each, key=each.get)  # the first of equals
        scores[task] = by_seed[best]
        tried[task] = {"best_seed": best, "scores": each}
    table = summary(scores)
    if args.restarts > 1:
        table["restarts"] = tried
    text = json.dumps({"ckpt": args.ckpt, **table}, indent=2) + "\n"
    atomic_write_text(os.path.join(run, SUMMARY), text)
    for task, score in table["scores"].items():
        each = ", ".join(f"{s:.2f}" for s in tried[task]["scores"].values())
        how = f" (best of {args.restarts}, seed {tried[task]['best_seed']}: {each})"
        print(f"glue {task:<5} {score:6.2f}" + (how if args.restarts > 1 else ""))
    print(f"glue average {table['average']:.2f} over {', '.join(table['averaged'])}")
    return table


def task_score(task: str, metrics: dict) -> float:
    """A task's score: the mean of its reported metrics present, in percent."""
    names = [m for m in REPORTED.get(task, ("accuracy",)) if m in metrics]
    return 100.0 * sum(metrics[m] for m in names) / len(names)


def summary(results: dict[str, dict]) -> dict:
    """Each task's score (the mean of its reported metrics present, in percent) and their
    average without WNLI."""
    scores = {task: task_score(task, metrics) for task, metrics in results.items()}
    averaged = [t for t in scores if t not in LEFT_OUT]
    average = sum(scores[t] for t in averaged) / len(averaged) if averaged else float("nan")
    return {"scores": scores, "average": average, "averaged": averaged, "dev": results}


def _tasks(given: str) -> list[str]:
    tasks = [t.strip().lower() for t in given.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASK_FOLDERS]
    if unknown or not tasks:
        raise ValueError(
            f"--tasks {given!r}: {', '.join(unknown) or 'none given'} is no GLUE task; give some "
            f"of {','.join(TASK_FOLDERS)}"
        )
    return list(dict.fromkeys(tasks))


def _folder(data: str, task: str) -> str:
    """The task's folder under --data, by either name; refused when neither is there."""
    for name in TASK_FOLDERS[task]:
        if os.path.isdir(os.path.join(data, name)):
            return os.path.join(data, name)
    names = " or ".join(TASK_FOLDERS[task])
    raise ValueError(
        f"--data {data} holds no folder {names} for {task}; put the task's files there, or "
        f"leave it out with --tasks"
    )
