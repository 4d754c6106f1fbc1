"""Fine-tuning's files: the task table (which tasks there are, GLUE's columns, labels and
files) and the readers of GLUE-style TSV, CoNLL-style token tags and SQuAD v1.1 JSON. Turning
what they read into model features is `model.finetune.features`.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import itertools
import json
import math
import os
import re
from dataclasses import dataclass

from model.config import flag_hint


@dataclass(frozen=True)
class GlueTask:
    text_columns: tuple[str, ...]  # one sentence, or a pair
    label_column: str
    labels: tuple[str, ...] = ("0", "1")  # the task's classes, exactly as the files write them
    dev_file: str = "dev.tsv"
    f1: bool = False  # also report F1 of the positive label "1" (MRPC, QQP)
    mcc: bool = False  # report Matthews correlation, GLUE's metric for CoLA
    names: tuple[str, ...] | None = None  # column names of a file with no header row (CoLA)
    extra_dev: tuple[tuple[str, str], ...] = ()  # (suffix, file): further dev sets, if present
    regression: bool = False  # a real-valued score on the pooled output (STS-B), not classes
    # --predict: (test file, the file the GLUE server takes) and the test files' id column
    test_files: tuple[tuple[str, str], ...] = ()
    test_index: str = "index"
    # a column whose values are scored apart too (XNLI's `language`: each language's accuracy)
    by_column: str = ""


ENTAILMENT = ("entailment", "not_entailment")
# Why a GLUE dev file must be read whole: a skipped row would change what the score covers.
DEV_WHOLE = "every dev row is scored, as GLUE scores them all"
GLUE_TASKS = {
    "cola": GlueTask(
        ("sentence",),
        "label",
        mcc=True,
        names=("source", "label", "author_label", "sentence"),
        test_files=(("test.tsv", "CoLA.tsv"),),
    ),
    "sst2": GlueTask(("sentence",), "label", test_files=(("test.tsv", "SST-2.tsv"),)),
    "mrpc": GlueTask(
        ("#1 String", "#2 String"), "Quality", f1=True, test_files=(("test.tsv", "MRPC.tsv"),)
    ),
    "qqp": GlueTask(
        ("question1", "question2"),
        "is_duplicate",
        f1=True,
        test_files=(("test.tsv", "QQP.tsv"),),
        test_index="id",
    ),
    "qnli": GlueTask(
        ("question", "sentence"), "label", ENTAILMENT, test_files=(("test.tsv", "QNLI.tsv"),)
    ),
    "rte": GlueTask(
        ("sentence1", "sentence2"), "label", ENTAILMENT, test_files=(("test.tsv", "RTE.tsv"),)
    ),
    "wnli": GlueTask(("sentence1", "sentence2"), "label", test_files=(("test.tsv", "WNLI.tsv"),)),
    "stsb": GlueTask(
        ("sentence1", "sentence2"),
        "score",
        (),
        regression=True,
        test_files=(("test.tsv", "STS-B.tsv"),),
    ),
    "mnli": GlueTask(
        ("sentence1", "sentence2"),
        "gold_label",
        ("contradiction", "entailment", "neutral"),
        dev_file="dev_matched.tsv",
        extra_dev=(("mm", "dev_mismatched.tsv"),),
        test_files=(("test_matched.tsv", "MNLI-m.tsv"), ("test_mismatched.tsv", "MNLI-mm.tsv")),
    ),
    # XNLI (multilingual BERT's evaluation): trained on MultiNLI's English `train.tsv`, scored on
    # XNLI 1.0's dev and test files, whose labels are public, overall and per language
    "xnli": GlueTask(
        ("sentence1", "sentence2"),
        "gold_label",
        ("contradiction", "entailment", "neutral"),
        dev_file="xnli.dev.tsv",
        extra_dev=(("test", "xnli.test.tsv"),),
        by_column="language",
    ),
}
TASKS = (*GLUE_TASKS, "ner", "squad", "squad2", "swag")


def check_task(task: str) -> None:
    """Refuse a task name that is not one of `TASKS`."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def data_files(task: str, directory: str, names: list[tuple[str, ...]]) -> tuple[str, str]:
    """(train, dev) paths of a task directory: the first of each of the (train, dev) `names`
    that exists, else a refusal naming them (and a `--data` that is no folder, saying so)."""
    if not os.path.isdir(directory):
        what = "a file, not a folder" if os.path.exists(directory) else "no such folder"
        wanted = " and ".join(options[0] for options in names)
        raise FileNotFoundError(
            f"--data {directory}: {what}; --task {task} reads the folder that holds {wanted}: "
            f"give {flag_hint('--data', 'DIR')}"
        )
    paths = []
    for options in names:
        found = [
            os.path.join(directory, n)
            for n in options
            if os.path.exists(os.path.join(directory, n))
        ]
        if not found:
            raise FileNotFoundError(
                f"{directory}: no {' or '.join(options)}; --task {task} expects the standard "
                f"layout of that dataset in {flag_hint('--data', 'DIR')}"
            )
        paths.append(found[0])
    return paths[0], paths[1]


@contextlib.contextmanager
def utf8_text(path: str, newline: str | None = None):
    """`path` open as UTF-8 text, a byte-order mark first dropped (as Excel and Notepad save
    one); text in another encoding refused, while it is read, in one line naming the file and
    the line (`not_utf8`)."""
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as f:
            yield f
    except UnicodeDecodeError:
        raise ValueError(not_utf8(path)) from None


def not_utf8(path: str) -> str:
    """Why `path` is not UTF-8 text: its first line that does not decode, and the byte."""
    advice = "fine-tuning reads UTF-8: convert it (iconv -f ITS-ENCODING -t UTF-8) and run again"
    with open(path, "rb") as f:
        if f.read(2) in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
            return f"{path}: UTF-16 or UTF-32 text (it starts with their byte-order mark); {advice}"
        f.seek(0)
        for lineno, raw in enumerate(f, 1):
            try:
                raw.removeprefix(codecs.BOM_UTF8 if lineno == 1 else b"").decode("utf-8")
            except UnicodeDecodeError as e:
                at = e.start + (3 if lineno == 1 and raw.startswith(codecs.BOM_UTF8) else 0)
                return (
                    f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[at]:02x} at byte {at + 1} of "
                    f"the line); {advice}"
                )
    return f"{path}: not UTF-8 text; {advice}"


def read_tsv(
    path: str,
    columns: tuple[str, ...],
    labels: tuple[str, ...] | None = None,
    names: tuple[str, ...] | None = None,
    whole: str = "",
) -> tuple[list[tuple[str, ...]], int]:
    """The named columns of a TSV with a header row, and how many malformed rows were skipped
    (GLUE's training files hold a few rows with stray tabs). With `whole` (why every row
    counts), a malformed row is refused instead, naming its line. `names` are the columns of a
    file with no header row (CoLA's train and dev), unless its first row names `columns` (as
    the `datasets` library writes CoLA: sentence, label, idx), which is then its header. With
    `labels`, the last column must be one of them exactly (`1.0`, ` 1` or `abc` are not `1`):
    anything else is refused naming the line; `labels=()` asks for a finite number instead
    (STS-B's score)."""
    with utf8_text(path, newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        first = []  # with `names`: the first row, a row of data unless it names the columns
        if names and header is not None and not set(columns) <= set(header):
            header, first = list(names), [header]
        if not header:
            raise ValueError(f"{path} is empty; expected a header row naming the columns")
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(
                f"{path}: no column(s) {', '.join(missing)} in the header {header}; is this "
                f"the right {flag_hint('--task', 'TASK')}?"
            )
        index = [header.index(c) for c in columns]
        rows, skipped = [], 0
        for row in itertools.chain(first, reader):
            if len(row) != len(header):
                if whole:
                    raise ValueError(
                        f"{path}:{reader.line_num}: {len(row)} field(s) where the header has "
                        f"{len(header)}; {whole}, so the file must be whole: mend that row"
                    )
                skipped += 1
                continue
            if labels == ():  # a real-valued score
                try:
                    if not math.isfinite(float(row[index[-1]])):
                        raise ValueError
                except ValueError:
                    raise ValueError(
                        f"{path}:{reader.line_num}: {columns[-1]} {row[index[-1]]!r} is not a "
                        "finite number"
                    ) from None
            elif labels is not None and row[index[-1]] not in labels:
                raise ValueError(
                    f"{path}:{reader.line_num}: {columns[-1]} {row[index[-1]]!r} is not one of "
                    f"the task's labels {', '.join(labels)}"
                )
            rows.append(tuple(row[i] for i in index))
    return rows, skipped


def read_glue_test(path: str, task: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """A GLUE test file (a header row, CoLA's too; no labels): each row's id and its texts.
    A malformed row is refused: the GLUE server wants a prediction for every row."""
    spec = GLUE_TASKS[task]
    rows, skipped = read_tsv(path, (spec.test_index, *spec.text_columns))
    if skipped:
        raise ValueError(
            f"{path}: {skipped} row(s) with the wrong number of fields; the GLUE server wants "
            "a prediction for every test row, so the file must be whole"
        )
    return [r[0] for r in rows], [r[1:] for r in rows]


COLUMN_GAP = re.compile(r"[ \t]+")  # between a CoNLL line's columns
ASCII_SPACE = " \t\r\n\v\f"


def read_conll(path: str) -> list[tuple[list[str], list[str]]]:
    """Sentences as (words, tags): one `word ... tag` line per token (the tag is the last
    column), a blank line between sentences, `-DOCSTART-` lines ignored. Every token line has
    the columns of the first: a line that lost one would make another column its tag (a
    chunk tag such as `I-NP` learned as an entity class), so it is refused, naming it."""
    sentences, words, tags = [], [], []
    first = None  # (line number, columns) of the first token line
    with utf8_text(path) as f:
        for lineno, line in enumerate(f, 1):
            # columns part at spaces and tabs alone: a word may hold other white space (a
            # no-break space, as in "10\u00a0000"), which would otherwise split it into columns
            parts = COLUMN_GAP.split(line.strip(ASCII_SPACE)) if line.strip() else []
            if not parts or parts[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                continue
            if len(parts) < 2:
                raise ValueError(f"{path}:{lineno}: expected 'word ... tag', got {line.strip()!r}")
            first = first or (lineno, len(parts))
            if len(parts) != first[1]:
                raise ValueError(
                    f"{path}:{lineno}: {len(parts)} columns where line {first[0]} has "
                    f"{first[1]}; every token line is 'word ... tag' with the same columns, so "
                    f"the tag is the last: mend that line ({line.strip()!r})"
                )
            words.append(parts[0])
            tags.append(parts[-1])
    if words:
        sentences.append((words, tags))
    return sentences


@dataclass(frozen=True)
class SquadExample:
    qid: str
    question: str
    context: str
    answers: tuple[str, ...]
    answer_start: int  # character offset of the first answer in the context


def _field(obj, key: str, path: str, where: str):
    """obj[key], or one line naming the file, the place and the missing key."""
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: {where} is a {type(obj).__name__}, expected a JSON object")
    if key not in obj:
        raise ValueError(f"{path}: {where} has no key {key!r}; not a SQuAD v1.1 file")
    return obj[key]


def read_parquet(path: str, columns: tuple[str, ...] = (), advice: str = ""):
    """A Parquet file as a pyarrow table (its schema's metadata kept); a file pyarrow cannot read
    is refused in one line. With `columns`, those alone are read, and a file that lacks one is
    refused naming it, its columns and `advice`."""
    import pyarrow.parquet as pq

    try:
        if columns:
            names = pq.read_schema(path).names
            missing = [c for c in columns if c not in names]
            if missing:
                raise ColumnsMissing(
                    f"{path}: no column(s) {', '.join(missing)} among {names}; {advice}"
                )
        return pq.read_table(path, columns=list(columns) or None)
    except ColumnsMissing:
        raise
    except Exception as e:  # pyarrow raises several types for a file it cannot read
        raise ValueError(
            f"{path}: not a Parquet file pyarrow can read ({type(e).__name__}); download it again"
        ) from None


class ColumnsMissing(ValueError):
    """A Parquet file without a column its task reads (`read_parquet`)."""


V2_REFUSED = "only v1.1 is read by --task squad: pass --task squad2 for SQuAD 2.0"


def _squad_records(path: str, v2: bool = False) -> tuple[list, str]:
    """The file's JSON: the official nested layout (an object with `data`), a JSON list of flat
    records or JSON lines of them (as the `datasets` library exports SQuAD), or those records
    in Parquet (as the Hugging Face Hub publishes SQuAD). Returns the articles or records and
    which layout ("nested" | "flat")."""
    if path.endswith(".parquet"):
        return read_parquet(path).to_pylist(), "flat"
    with utf8_text(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as first_error:
        doc = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    doc.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ValueError(
                        f"{path}: neither JSON ({first_error}) nor JSON lines (line {lineno} "
                        "does not parse); expected SQuAD v1.1 JSON"
                    ) from None
    if isinstance(doc, dict) and "data" in doc:
        version = str(doc.get("version", ""))
        if version.lstrip("v").startswith("2") and not v2:
            raise ValueError(f"{path}: SQuAD {version} (unanswerable questions); {V2_REFUSED}")
        if not isinstance(doc["data"], list):
            raise ValueError(f"{path}: 'data' is not a list of articles")
        return doc["data"], "nested"
    if isinstance(doc, dict) and ("paragraphs" in doc or "version" in doc):
        raise ValueError(f"{path}: the top-level object has no key 'data'; not a SQuAD v1.1 file")
    if isinstance(doc, dict):
        doc = [doc]  # JSON lines holding a single record
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected SQuAD JSON (an object with 'data', or records)")
    return doc, "flat"


def _squad_example(path: str, where: str, qa: dict, context, v2: bool = False) -> SquadExample:
    if not isinstance(context, str):
        raise ValueError(f"{path}: {where}: the context is not a string")
    qid = str(_field(qa, "id", path, where))
    where = f"{where} (id {qid})"
    question = _field(qa, "question", path, where)
    if isinstance(qa, dict) and qa.get("is_impossible"):
        if v2:  # SQuAD 2.0's unanswerable question: no answer, whatever `answers` holds
            return SquadExample(qid, str(question), context, (), -1)
        raise ValueError(f"{path}: {where} is_impossible: a SQuAD 2.0 file; {V2_REFUSED}")
    if "answers" not in qa and "answers.text" in qa:  # flattened columns
        answers = {
            "text": qa["answers.text"],
            "answer_start": _field(qa, "answers.answer_start", path, where),
        }
    else:
        answers = _field(qa, "answers", path, where)
    if isinstance(answers, dict):  # the datasets layout: {"text": [...], "answer_start": [...]}
        texts = _field(answers, "text", path, f"{where} answers")
        starts = _field(answers, "answer_start", path, f"{where} answers")
    elif isinstance(answers, list):
        texts = [_field(a, "text", path, f"{where} answers[{i}]") for i, a in enumerate(answers)]
        starts = [
            _field(a, "answer_start", path, f"{where} answers[{i}]") for i, a in enumerate(answers)
        ]
    else:
        raise ValueError(f"{path}: {where}: 'answers' is neither a list nor an object")
    if not texts:
        if v2:
            return SquadExample(qid, str(question), context, (), -1)
        raise ValueError(
            f"{path}: {where} has no answers: a SQuAD 2.0 (unanswerable) question; {V2_REFUSED}"
        )
    if len(texts) != len(starts):
        raise ValueError(f"{path}: {where}: {len(texts)} answer texts but {len(starts)} starts")
    try:
        first_start = int(starts[0])
    except (TypeError, ValueError):
        raise ValueError(f"{path}: {where}: answer_start {starts[0]!r} is not an integer") from None
    return SquadExample(
        qid=qid,
        question=str(question),
        context=context,
        answers=tuple(str(t) for t in texts),
        answer_start=first_start,
    )


def read_squad(path: str, v2: bool = False) -> list[SquadExample]:
    """SQuAD v1.1 questions, from the official nested JSON or the flat records the `datasets`
    library exports (a JSON list, JSON lines or Parquet; `answers` as {"text": [...],
    "answer_start": [...]} or flattened `answers.text` / `answers.answer_start`). SQuAD 2.0 is
    refused unless `v2`, which reads its unanswerable questions (`is_impossible`, or no
    answers) as examples with no answer; a malformed file gives one line naming the file, the
    place and the missing key."""
    records, layout = _squad_records(path, v2)
    examples = []
    if layout == "flat":
        for i, rec in enumerate(records):
            context = _field(rec, "context", path, f"record {i}")
            examples.append(_squad_example(path, f"record {i}", rec, context, v2))
        return examples
    for a, article in enumerate(records):
        paragraphs = _field(article, "paragraphs", path, f"data[{a}]")
        for p, para in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(para, "context", path, where)
            for q, qa in enumerate(_field(para, "qas", path, where)):
                examples.append(_squad_example(path, f"{where}.qas[{q}]", qa, context, v2))
    return examples


def answer_is_aligned(ex: SquadExample) -> bool:
    """Whether `answer_start` points at the first answer's text in the context (white space
    compared loosely, as the paper's run_squad.py does); an unanswerable one has nothing to
    misplace."""
    if not ex.answers:
        return True
    text = ex.answers[0]
    if ex.answer_start < 0 or ex.answer_start + len(text) > len(ex.context):
        return False
    found = ex.context[ex.answer_start : ex.answer_start + len(text)]
    return found == text or " ".join(found.split()) == " ".join(text.split())
