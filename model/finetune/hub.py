"""GLUE as the Hugging Face Hub publishes it (the `nyu-mll/glue` dataset, and what the
`datasets` library's `to_parquet` writes): a folder per task holding one Parquet file per
split, or its shards (`train-00000-of-00001.parquet`, `validation-...`, `test-...`; MNLI's
`validation_matched`, `validation_mismatched`, `test_matched`, `test_mismatched`), the texts
under the `datasets` column names (`premise`, `hypothesis`, ...), the label as the index of its
class (-1 in the test splits) and each row's id as `idx`.

Read into the rows the TSV reader gives (`readers.read_tsv`), each label as GLUE's own files
write it (`0`/`1`, `entailment`, ...): training, scoring, the dev predictions and `--predict`'s
server files are then the same whichever layout a task came in. Where a file records its class
names (`datasets` writes its features into the schema's metadata), they must be the Hub's, in
the Hub's order: read by index, another order would swap the labels without a sign.

SQuAD's Parquet splits (`rajpurkar/squad`) hold the flat records `readers.read_squad` reads;
`split_paths` finds them. CoNLL-2003's (`eriktks/conll2003`) hold a sentence a row, read by
`read_tagged`.
"""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass

from model.config import flag_hint
from model.finetune.readers import ENTAILMENT, read_parquet

BINARY = ("0", "1")  # CoLA, SST-2, MRPC, QQP, WNLI: GLUE writes the class index itself


@dataclass(frozen=True)
class HubTask:
    text_columns: tuple[str, ...]
    labels: tuple[str, ...]  # class index -> the label as GLUE's files write it; () a score
    names: tuple[str, ...] = ()  # the Hub's names of the classes (its `ClassLabel`), by index
    dev: str = "validation"
    extra_dev: tuple[tuple[str, str], ...] = ()  # (suffix, split), as GlueTask.extra_dev
    test: tuple[str, ...] = ("test",)  # the test splits, in the order of GlueTask.test_files


PAIR = ("sentence1", "sentence2")
MNLI = ("entailment", "neutral", "contradiction")
HUB_TASKS = {
    "cola": HubTask(("sentence",), BINARY, ("unacceptable", "acceptable")),
    "sst2": HubTask(("sentence",), BINARY, ("negative", "positive")),
    "mrpc": HubTask(PAIR, BINARY, ("not_equivalent", "equivalent")),
    "qqp": HubTask(("question1", "question2"), BINARY, ("not_duplicate", "duplicate")),
    "stsb": HubTask(PAIR, ()),
    "mnli": HubTask(
        ("premise", "hypothesis"),
        MNLI,
        MNLI,
        dev="validation_matched",
        extra_dev=(("mm", "validation_mismatched"),),
        test=("test_matched", "test_mismatched"),
    ),
    "qnli": HubTask(("question", "sentence"), ENTAILMENT, ENTAILMENT),
    "rte": HubTask(PAIR, ENTAILMENT, ENTAILMENT),
    "wnli": HubTask(PAIR, BINARY, ("not_entailment", "entailment")),
    # `facebook/xnli`: a folder per language's config, read by `read_xnli`
    "xnli": HubTask(("premise", "hypothesis"), MNLI, MNLI),
}
XNLI_TRAIN = "en"  # the language XNLI trains in (MultiNLI's English), zero-shot in the others


def holds_xnli_layout(directory: str) -> bool:
    """The Hub's XNLI (`facebook/xnli`): a folder per language's config (`en/`, `de/`, ...),
    each holding its splits in Parquet."""
    return bool(split_files(os.path.join(directory, XNLI_TRAIN), "train"))


def read_xnli(directory: str, split: str) -> list[tuple[str, ...]]:
    """The Hub's XNLI rows: `train` the English config's (premise, hypothesis, label); the
    others every language folder's, its language first (`GlueTask.by_column`'s place). The
    `all_languages` config, a translation dict a row, is not read."""
    if split == "train":
        return read_split(os.path.join(directory, XNLI_TRAIN), "xnli", split)[1]
    rows = []
    for language in sorted(os.listdir(directory)):
        folder = os.path.join(directory, language)
        if language != "all_languages" and split_files(folder, "validation"):
            rows += [(language, *r) for r in read_split(folder, "xnli", split)[1]]
    return rows


def split_files(directory: str, split: str) -> list[str]:
    """A split's Parquet files in `directory`: `SPLIT.parquet`, or its shards in order,
    `SPLIT-*.parquet` (the Hub's data files) or `SPLIT/*.parquet` (its Parquet conversion of a
    dataset, `SPLIT/0000.parquet`, ...); none if it has none of them."""
    whole = os.path.join(directory, f"{split}.parquet")
    if os.path.isfile(whole):
        return [whole]
    here = glob.escape(directory)
    for pattern in (f"{split}-*.parquet", os.path.join(glob.escape(split), "*.parquet")):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found
    return []


def holds_hub_layout(directory: str, own: tuple[str, ...] = ("train.tsv",)) -> bool:
    """A task folder in the Hub's layout: a training split in Parquet and none of the task's
    own training files (`own`: GLUE's train.tsv by default)."""
    if not os.path.isdir(directory) or any(os.path.exists(os.path.join(directory, n)) for n in own):
        return False
    return bool(split_files(directory, "train"))


def split_paths(directory: str, task: str, split: str) -> list[str]:
    """`split_files`, refused in one line where the folder has none."""
    paths = split_files(directory, split)
    if not paths:
        raise FileNotFoundError(
            f"{directory}: no {split}.parquet, {split}-*.parquet or {split}/*.parquet; --task "
            f"{task} in the Hugging Face Hub's layout reads the Parquet files of that task's "
            f"folder, {flag_hint('--data', 'DIR')}"
        )
    return paths


def read_split(
    directory: str, task: str, split: str, test: bool = False
) -> tuple[list[str], list[tuple[str, ...]]]:
    """A split's rows: their texts followed by the label as GLUE's files write it, or, for a
    `test` split, their ids (`idx`) and texts. A split the folder lacks, a missing column, an
    empty text or a label outside the task's classes is refused in one line naming the file
    (and the row)."""
    spec = HUB_TASKS[task]
    paths = split_paths(directory, task, split)
    last = "idx" if test else "label"
    ids, rows = [], []
    for path in paths:
        columns, label = _columns(path, task, (*spec.text_columns, last))
        for i, values in enumerate(zip(*columns, strict=True)):
            texts = values[:-1]
            if any(not isinstance(v, str) for v in texts):
                raise ValueError(f"{path}: row {i + 1} has no text in {_empty(spec, texts)}")
            if test:
                ids.append(str(values[-1]))
                rows.append(texts)
            else:
                rows.append((*texts, label(path, i, spec, values[-1])))
    return ids, rows


def _columns(path: str, task: str, names: tuple[str, ...]):
    """The named columns of a Parquet file, as lists, and how its label reads (`_label`)."""
    import pyarrow as pa

    table = read_parquet(path, names, f"is this the right {flag_hint('--task', 'TASK')}?")
    classes = _class_names(table.schema.metadata or {})
    if classes is not None and classes != HUB_TASKS[task].names:
        raise ValueError(
            f"{path}: its label classes are {', '.join(classes)} by index, not the Hub's "
            f"{', '.join(HUB_TASKS[task].names)} for --task {task}; read by index, they would "
            f"be other labels: is this the right {flag_hint('--task', 'TASK')}?"
        )
    single = table.schema.field(names[-1]).type == pa.float32()
    return [table.column(c).to_pylist() for c in names], _single_label if single else _label


def _class_names(metadata: dict, column: str = "label") -> tuple[str, ...] | None:
    """The class names the `datasets` library recorded for `column` in a file it wrote (its
    features, in the schema's `huggingface` metadata): a `ClassLabel`'s, or, for a sequence of
    them (CoNLL's `ner_tags`), its items'; None where it recorded none."""
    try:
        feature = json.loads(metadata[b"huggingface"])["info"]["features"][column]
        feature = feature.get("feature", feature)  # a sequence: its items' feature
        names = feature["names"] if feature.get("_type") == "ClassLabel" else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return tuple(str(n) for n in names) if isinstance(names, list) else None


def _empty(spec: HubTask, values: tuple) -> str:
    return ", ".join(c for c, v in zip(spec.text_columns, values, strict=True) if v is None)


def _label(path: str, i: int, spec: HubTask, value) -> str:
    """A label as GLUE's files write it: the class's name by its index, or a finite score."""
    if not spec.labels:
        if isinstance(value, (int, float)) and math.isfinite(value):
            return repr(float(value))
        raise ValueError(f"{path}: row {i + 1}: label {value!r} is not a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(spec.labels):
        return spec.labels[value]
    named = ", ".join(f"{n} ({name})" for n, name in enumerate(spec.labels))
    classes = "0 or 1" if spec.labels == BINARY else named
    raise ValueError(f"{path}: row {i + 1}: label {value!r} is not a class of the task: {classes}")


def _single_label(path: str, i: int, spec: HubTask, value) -> str:
    """A score stored as float32 (STS-B's on the Hub), written as its shortest decimal: the
    score as GLUE's file writes it (`3.800`, not float32's 3.7999999523)."""
    label = _label(path, i, spec, value)
    if not spec.labels:
        import numpy as np

        return np.format_float_positional(np.float32(value), trim="-")
    return label


def read_tagged(directory: str, split: str) -> list[tuple[list[str], list[str]]]:
    """CoNLL-2003 as the Hub publishes it (`eriktks/conll2003`): a row per sentence, its words
    in `tokens` and their entity tags in `ner_tags` as class indices, named by the file's
    recorded features (`datasets`' ClassLabel). Returned as `readers.read_conll` returns the
    text files: (words, tags) per sentence, `-DOCSTART-` rows and empty rows left out."""
    sentences = []
    for path in split_paths(directory, "ner", split):
        advice = "--task ner reads a sentence's words from tokens and their tags from ner_tags"
        table = read_parquet(path, ("tokens", "ner_tags"), advice)
        names = _class_names(table.schema.metadata or {}, "ner_tags")
        if names is None:
            raise ValueError(
                f"{path}: no record of the names of ner_tags' classes (the features `datasets` "
                "writes into a Parquet file's metadata); without them the tags are numbers "
                "alone: use the Hub's files as published, or CoNLL's text files"
            )
        words_and_tags = [table.column(c).to_pylist() for c in ("tokens", "ner_tags")]
        for i, (words, tags) in enumerate(zip(*words_and_tags, strict=True)):
            if not words or words == ["-DOCSTART-"]:
                continue
            sentences.append((words, _tags(path, i, words, tags, names)))
    return sentences


def _tags(path: str, i: int, words: list, tags: list, names: tuple[str, ...]) -> list[str]:
    if not all(isinstance(w, str) and w for w in words) or not isinstance(tags, list):
        raise ValueError(f"{path}: row {i + 1}: a word that is empty or no text, or no tags")
    if len(tags) != len(words):
        raise ValueError(f"{path}: row {i + 1}: {len(words)} tokens but {len(tags)} ner_tags")
    for t in tags:
        if not (isinstance(t, int) and 0 <= t < len(names)):
            raise ValueError(
                f"{path}: row {i + 1}: tag {t!r} is not one of ner_tags' {len(names)} classes"
            )
    return [names[t] for t in tags]
