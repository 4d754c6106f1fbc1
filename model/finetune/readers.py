"""Fine-tuning data: readers for GLUE-style TSV, CoNLL-style token tags and SQuAD v1.1 JSON,
and their conversion to model features with a WordPiece tokenizer.

A feature is a dict: `ids`, `types` (token ids and segment ids, `[CLS] ... [SEP]` included)
and `label`: a class index (sequence tasks), a list of tag indices with -100 where no tag is
predicted (token tasks: only a word's first piece carries its tag), or (start, end) token
positions (span tasks; (0, 0) when the answer is not in this window).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass

from tokenizers import BertWordPieceTokenizer

from model.config import flag_hint

IGNORE = -100


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


ENTAILMENT = ("entailment", "not_entailment")
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
}
TASKS = (*GLUE_TASKS, "ner", "squad")


def check_task(task: str) -> None:
    """Refuse a task name that is not one of `TASKS`."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def data_files(task: str, directory: str, names: list[tuple[str, ...]]) -> tuple[str, str]:
    """(train, dev) paths of a task directory: the first of each of the (train, dev) `names`
    that exists, else a refusal naming them."""
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


def read_tsv(
    path: str,
    columns: tuple[str, ...],
    labels: tuple[str, ...] | None = None,
    names: tuple[str, ...] | None = None,
) -> tuple[list[tuple[str, ...]], int]:
    """The named columns of a TSV with a header row, and how many malformed rows were skipped
    (GLUE files hold a few rows with stray tabs). `names` are the columns of a file with no
    header row (CoLA's train and dev). With `labels`, the last column must be one of them
    exactly (`1.0`, ` 1` or `abc` are not `1`): anything else is refused naming the line;
    `labels=()` asks for a finite number instead (STS-B's score)."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(names) if names else next(reader, None)  # names: no header row
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
        for row in reader:
            if len(row) != len(header):
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


def read_conll(path: str) -> list[tuple[list[str], list[str]]]:
    """Sentences as (words, tags): one `word ... tag` line per token (the tag is the last
    column), a blank line between sentences, `-DOCSTART-` lines ignored."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts or parts[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                continue
            if len(parts) < 2:
                raise ValueError(f"{path}:{lineno}: expected 'word ... tag', got {line.strip()!r}")
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


def _squad_records(path: str) -> tuple[list, str]:
    """The file's JSON: the official nested layout (an object with `data`), a JSON list of flat
    records or JSON lines of them (as the `datasets` library exports SQuAD). Returns the
    articles or records and which layout ("nested" | "flat")."""
    with open(path, encoding="utf-8") as f:
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
        if version.lstrip("v").startswith("2"):
            raise ValueError(f"{path}: SQuAD {version} (unanswerable questions) is not supported")
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


def _squad_example(path: str, where: str, qa: dict, context) -> SquadExample:
    if not isinstance(context, str):
        raise ValueError(f"{path}: {where}: the context is not a string")
    qid = str(_field(qa, "id", path, where))
    where = f"{where} (id {qid})"
    question = _field(qa, "question", path, where)
    if isinstance(qa, dict) and qa.get("is_impossible"):
        raise ValueError(f"{path}: {where} is_impossible: a SQuAD 2.0 file; only v1.1 is supported")
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
        raise ValueError(
            f"{path}: {where} has no answers: a SQuAD 2.0 (unanswerable) question; only v1.1 "
            "is supported"
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


def read_squad(path: str) -> list[SquadExample]:
    """SQuAD v1.1 questions, from the official nested JSON or the flat records the `datasets`
    library exports (a JSON list or JSON lines; `answers` as {"text": [...], "answer_start":
    [...]} or flattened `answers.text` / `answers.answer_start`). SQuAD 2.0 is refused, and a
    malformed file gives one line naming the file, the place and the missing key."""
    records, layout = _squad_records(path)
    examples = []
    if layout == "flat":
        for i, rec in enumerate(records):
            context = _field(rec, "context", path, f"record {i}")
            examples.append(_squad_example(path, f"record {i}", rec, context))
        return examples
    for a, article in enumerate(records):
        paragraphs = _field(article, "paragraphs", path, f"data[{a}]")
        for p, para in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(para, "context", path, where)
            for q, qa in enumerate(_field(para, "qas", path, where)):
                examples.append(_squad_example(path, f"{where}.qas[{q}]", qa, context))
    return examples


def answer_is_aligned(ex: SquadExample) -> bool:
    """Whether `answer_start` points at the first answer's text in the context (white space
    compared loosely, as the paper's run_squad.py does)."""
    text = ex.answers[0]
    if ex.answer_start < 0 or ex.answer_start + len(text) > len(ex.context):
        return False
    found = ex.context[ex.answer_start : ex.answer_start + len(text)]
    return found == text or " ".join(found.split()) == " ".join(text.split())


def load_tokenizer(vocab_path: str, lowercase: bool) -> BertWordPieceTokenizer:
    if not os.path.exists(vocab_path):
        raise FileNotFoundError(
            f"{vocab_path} does not exist: fine-tuning tokenizes with the vocab.txt that "
            "pre-training copies beside its checkpoint"
        )
    return BertWordPieceTokenizer(vocab_path, lowercase=lowercase)


def sequence_features(
    tok: BertWordPieceTokenizer, texts: list[tuple[str, ...]], labels: list[int], max_len: int
) -> list[dict]:
    """`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, truncated longest-first to `max_len`
    (`truncated` names the limit in a feature that was cut, see `truncation`)."""
    tok.enable_truncation(max_len)
    tok.no_padding()
    encodings = tok.encode_batch([t[0] if len(t) == 1 else (t[0], t[1]) for t in texts])
    cut = f"--max-seq-length {max_len}"
    return [
        {"ids": e.ids, "types": e.type_ids, "label": y, "truncated": cut if e.overflowing else None}
        for e, y in zip(encodings, labels, strict=True)
    ]


def token_features(
    tok: BertWordPieceTokenizer, sentences: list[list[str]], tags: list[list[int]], max_len: int
) -> list[dict]:
    """Words -> pieces; a word's tag sits on its first piece, -100 elsewhere. `word_of` maps
    each position to its word (-1: none) for reading predictions back; the words of a sentence
    cut at `max_len` pieces are never tagged (`truncated`, see `truncation`)."""
    tok.enable_truncation(max_len)
    tok.no_padding()
    encodings = tok.encode_batch(sentences, is_pretokenized=True)
    cut = f"--max-seq-length {max_len}"
    features = []
    for e, word_tags in zip(encodings, tags, strict=True):
        label, word_of, prev = [IGNORE] * len(e.ids), [-1] * len(e.ids), None
        for i, w in enumerate(e.word_ids):
            if w is not None and w != prev:
                label[i], word_of[i] = word_tags[w], w
            prev = w
        truncated = cut if e.overflowing else None
        features.append(
            {
                "ids": e.ids,
                "types": e.type_ids,
                "label": label,
                "word_of": word_of,
                "truncated": truncated,
            }
        )
    return features


def truncation(features: list[dict]) -> tuple[int, int, str | None]:
    """(examples, examples that lost pieces to a length limit, that limit: a flag and its
    value). A SQuAD question gives several features (windows) but is one example."""
    examples = {f.get("example", i): f.get("truncated") for i, f in enumerate(features)}
    cut = [limit for limit in examples.values() if limit]
    return len(examples), len(cut), next(iter(cut), None)


def truncation_report(train: list[dict], dev: list[dict]) -> tuple[dict | None, str | None]:
    """The examples cut to fit, for results.json, and the one line that says so; (None, None)
    when none was."""
    (n_train, cut_train, limit_train), (n_dev, cut_dev, limit_dev) = map(truncation, (train, dev))
    limit = limit_train or limit_dev
    if limit is None:
        return None, None
    report = {"train": cut_train, "dev": cut_dev, "limit": limit}
    note = (
        f"{cut_train:,} of {n_train:,} training and {cut_dev:,} of {n_dev:,} dev examples were "
        f"cut to {limit}: the model never sees the rest of them"
    )
    return report, note


def _answer_tokens(offsets: list[tuple[int, int]], ex: SquadExample) -> tuple[int, int]:
    """First and last context token of the first answer (-1, -1 if it has none)."""
    if ex.answer_start < 0:
        return -1, -1
    start, end = ex.answer_start, ex.answer_start + len(ex.answers[0])
    inside = [i for i, (a, b) in enumerate(offsets) if b > start and a < end]
    return (inside[0], inside[-1]) if inside else (-1, -1)


def span_features(
    tok: BertWordPieceTokenizer,
    examples: list[SquadExample],
    max_len: int,
    stride: int,
    max_query: int,
) -> list[dict]:
    """`[CLS] question [SEP] context window [SEP]`, windows `stride` tokens apart. Each feature
    keeps its example index, the offset of its first context token and the windows' character
    offsets, for turning predicted positions back into answer text."""
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    features = []
    cut = f"--max-query-length {max_query}"
    for n, ex in enumerate(examples):
        question = tok.encode(ex.question, add_special_tokens=False).ids
        truncated = cut if len(question) > max_query else None  # the context is read in windows
        question = question[:max_query]
        context = tok.encode(ex.context, add_special_tokens=False)
        room = max_len - len(question) - 3
        if room < 1:
            raise ValueError(
                f"--max-seq-length {max_len} leaves no room for the context after the question; "
                f"raise it ({flag_hint('--max-seq-length', '384')}) or lower --max-query-length"
            )
        first, last = _answer_tokens(context.offsets, ex)
        start = 0
        while True:
            stop = min(start + room, len(context.ids))
            shift = len(question) + 2 - start  # context token i sits at position i + shift
            label = (first + shift, last + shift) if start <= first and last < stop else (0, 0)
            ids = [cls_id, *question, sep_id, *context.ids[start:stop], sep_id]
            types = [0] * (len(question) + 2) + [1] * (stop - start + 1)
            features.append(
                {
                    "ids": ids,
                    "types": types,
                    "label": label,
                    "example": n,
                    "context_start": len(question) + 2,
                    "offsets": context.offsets[start:stop],
                    "truncated": truncated,
                }
            )
            if stop >= len(context.ids):
                break
            start += min(stride, room)
    return features
