"""GLUE and SQuAD in the Hugging Face Hub's layout (`model.finetune.hub`): Parquet files by
split, the `datasets` column names, GLUE's labels as class indices. The same rows fine-tune,
score and label their test splits exactly as the tasks' own files do; what cannot be read is
refused in one line naming the file and row."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model.cli import main
from model.finetune.hub import HUB_TASKS
from model.finetune.readers import GLUE_TASKS, read_conll, read_tsv
from tests.model.helpers import (
    finetune_args,
    one_line_error,
    without_timing,
    write_conll,
    write_mnli,
    write_squad,
    write_sst2,
    write_stsb,
)

WRITERS = {"sst2": write_sst2, "stsb": write_stsb, "mnli": write_mnli}


def hub_table(task: str, rows: list[tuple[str, ...]], ids: list[int] | None = None) -> pa.Table:
    """Rows as GLUE's TSV reader gives them (texts, label) in the Hub's columns: the label as
    its class index (STS-B's score as float32), -1 in a test split (`ids` given)."""
    hub = HUB_TASKS[task]
    columns = {c: [r[i] for r in rows] for i, c in enumerate(hub.text_columns)}
    if ids is not None:
        columns["label"] = pa.array([-1] * len(rows), pa.int64())
    elif hub.labels:
        columns["label"] = pa.array([hub.labels.index(r[-1]) for r in rows], pa.int64())
    else:
        columns["label"] = pa.array([float(r[-1]) for r in rows], pa.float32())
    columns["idx"] = pa.array(ids if ids is not None else range(len(rows)), pa.int32())
    return with_classes(pa.table(columns), hub.names)


def with_classes(table: pa.Table, names: tuple[str, ...]) -> pa.Table:
    """The table with the features `datasets` records in the files it writes: the label's
    class names by index (a `ClassLabel`; a float32 score where `names` is empty)."""
    label = {"names": list(names), "_type": "ClassLabel"} if names else {"dtype": "float32"}
    features = {"label": label, "idx": {"dtype": "int32", "_type": "Value"}}
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    return table.replace_schema_metadata(meta)


def write_both(task: str, where) -> tuple[str, str]:
    """The same task data as GLUE's TSV files and in the Hub's layout (MNLI's training split
    in two shards, and its two test splits beside the TSV test files)."""
    tsv = WRITERS[task](str(where / "tsv"), np.random.default_rng(4))
    hub = where / "hub"
    hub.mkdir()
    spec, splits = GLUE_TASKS[task], HUB_TASKS[task]
    files = {"train.tsv": "train", spec.dev_file: splits.dev}
    for (_, name), (_, split) in zip(spec.extra_dev, splits.extra_dev, strict=True):
        files[name] = split  # MNLI's mismatched dev split
    for name, split in files.items():
        rows, _ = read_tsv(os.path.join(tsv, name), (*spec.text_columns, spec.label_column))
        shards = 2 if task == "mnli" and split == "train" else 1
        for k, part in enumerate(np.array_split(np.arange(len(rows)), shards)):
            table = hub_table(task, [rows[i] for i in part])
            pq.write_table(table, hub / f"{split}-{k:05d}-of-{shards:05d}.parquet")
    for (name, _), split in zip(spec.test_files, splits.test, strict=True):
        second = ("the film was bad .",) if len(spec.text_columns) == 2 else ()
        texts = [(f"the film was {a} .", *second) for a in ("good", "old", "bad")]
        ids = [100 + 3 * i for i in range(len(texts))]
        header = [spec.test_index, "genre", *spec.text_columns]
        lines = ["\t".join(header)] + [
            "\t".join((str(i), "g", *t)) for i, t in zip(ids, texts, strict=True)
        ]
        with open(os.path.join(tsv, name), "w") as f:
            f.write("\n".join(lines) + "\n")
        pq.write_table(hub_table(task, texts, ids), hub / f"{split}-00000-of-00001.parquet")
    return tsv, str(hub)


def run_files(run: str) -> dict[str, str]:
    """A run's prediction and score files, and its metrics without their timings."""
    out = {}
    for name in sorted(os.listdir(run)):
        if name.endswith((".tsv", ".json")) and name != "best.json":
            with open(os.path.join(run, name)) as f:
                out[name] = f.read()
    with open(os.path.join(run, "metrics.jsonl")) as f:
        out["metrics"] = without_timing([json.loads(line) for line in f])
    return out


@pytest.mark.parametrize("task", list(WRITERS))
def test_the_hubs_parquet_fine_tunes_scores_and_labels_as_the_tsv_files(
    task, pretrained_run, tmp_path
):
    tsv, hub = write_both(task, tmp_path)
    predict = ("--predict",)
    runs = {}
    for name, data in (("tsv", tsv), ("hub", hub)):
        runs[name] = run = str(tmp_path / f"run-{name}")
        assert main(finetune_args(task, data, pretrained_run, run, "--epochs", "2", *predict)) == 0
    made = run_files(runs["hub"])
    assert made == run_files(runs["tsv"])
    servers = [server for _, server in GLUE_TASKS[task].test_files]
    assert set(made) == {"metrics", "dev_predictions.tsv", "results.json", *servers} | (
        {"dev_predictions_mm.tsv"} if task == "mnli" else set()
    )
    for server in servers:  # the test splits' own ids
        assert [r.split("\t")[0] for r in made[server].splitlines()] == [
            "index",
            "100",
            "103",
            "106",
        ]
    if task == "mnli":  # the mismatched dev split scored too
        assert "accuracy_mm" in json.loads(made["results.json"])


def test_what_cannot_be_read_is_refused_in_one_line(pretrained_run, tmp_path, capsys):
    _, hub = write_both("sst2", tmp_path)
    train = os.path.join(hub, "train-00000-of-00001.parquet")
    rows = [("a film .", "1"), ("the plot .", "0")]

    def refused(task: str = "sst2", *extra: str) -> str:
        args = finetune_args(task, hub, pretrained_run, str(tmp_path / "r"), *extra)
        assert main(args) == 2
        return one_line_error(capsys)

    line = refused("mrpc")
    assert f"{train}: no column(s) sentence1, sentence2 among ['sentence', 'label', 'idx']" in line
    assert "is this the right --task TASK" in line
    table = hub_table("sst2", rows)
    pq.write_table(table.set_column(1, "label", pa.array([1, 3], pa.int64())), train)
    assert f"{train}: row 2: label 3 is not a class of the task: 0 or 1" in refused()
    pq.write_table(table.set_column(0, "sentence", pa.array(["a", None])), train)
    assert f"{train}: row 2 has no text in sentence" in refused()
    with open(train, "wb") as f:
        f.write(b"PAR1 not really")
    assert f"{train}: not a Parquet file pyarrow can read" in refused()
    # a file whose classes are in another order than the Hub's SST-2: index 1 is not positive
    pq.write_table(with_classes(table, ("positive", "negative")), train)
    line = refused()
    assert f"{train}: its label classes are positive, negative by index, not the Hub's " in line
    assert "negative, positive for --task sst2" in line
    pq.write_table(table, train)
    os.unlink(os.path.join(hub, "test-00000-of-00001.parquet"))
    assert f"{hub}: no test.parquet for --predict to label" in refused("sst2", "--predict")
    os.unlink(os.path.join(hub, "validation-00000-of-00001.parquet"))
    assert (
        f"{hub}: no validation.parquet, validation-*.parquet or validation/*.parquet" in refused()
    )
    assert not (tmp_path / "r").exists()


def test_squad_from_the_hubs_parquet_is_squad_from_its_json(pretrained_run, tmp_path, capsys):
    """`rajpurkar/squad`'s layout: flat records (`answers` a struct of lists) by split, the
    training split here in two shards."""
    data = write_squad(str(tmp_path / "json"), np.random.default_rng(2))
    hub = tmp_path / "hub"
    hub.mkdir()
    for name, split in (("train-v1.1.json", "train"), ("dev-v1.1.json", "validation")):
        with open(os.path.join(data, name)) as f:
            articles = json.load(f)["data"]
        records = [
            {
                "id": qa["id"],
                "title": article["title"],
                "context": paragraph["context"],
                "question": qa["question"],
                "answers": {
                    "text": [a["text"] for a in qa["answers"]],
                    "answer_start": [a["answer_start"] for a in qa["answers"]],
                },
            }
            for article in articles
            for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        ]
        shards = np.array_split(np.arange(len(records)), 2 if split == "train" else 1)
        for k, part in enumerate(shards):
            table = pa.Table.from_pylist([records[i] for i in part])
            pq.write_table(table, hub / f"{split}-{k:05d}-of-{len(shards):05d}.parquet")
    extra = ("--epochs", "2", "--max-seq-length", "32", "--doc-stride", "8")
    runs = [str(tmp_path / "run-json"), str(tmp_path / "run-hub")]
    for source, run in zip((data, str(hub)), runs, strict=True):
        assert main(finetune_args("squad", source, pretrained_run, run, *extra)) == 0
    made = run_files(runs[1])
    assert made == run_files(runs[0])
    assert set(made) == {"metrics", "predictions.json", "nbest_predictions.json", "results.json"}
    os.unlink(hub / "validation-00000-of-00001.parquet")
    capsys.readouterr()
    assert main(finetune_args("squad", str(hub), pretrained_run, str(tmp_path / "r"))) == 2
    assert (
        f"{hub}: no validation.parquet, validation-*.parquet or validation/*.parquet"
        in one_line_error(capsys)
    )


CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def conll_table(sentences: list, names: list[str] | None = CONLL_TAGS) -> pa.Table:
    """Sentences as `eriktks/conll2003` holds them: a `-DOCSTART-` row first, tags as class
    indices, their names in the features `datasets` records (none if `names` is None)."""
    rows = [(["-DOCSTART-"], ["O"]), *sentences]
    table = pa.table(
        {
            "id": [str(i) for i in range(len(rows))],
            "tokens": [words for words, _ in rows],
            "ner_tags": [[CONLL_TAGS.index(t) for t in tags] for _, tags in rows],
        }
    )
    if names is None:
        return table
    tags = {"feature": {"names": names, "_type": "ClassLabel"}, "_type": "Sequence"}
    meta = {"info": {"features": {"ner_tags": tags}}}
    return table.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})


def test_conll_from_the_hubs_parquet_is_conll_from_its_text_files(pretrained_run, tmp_path, capsys):
    """The training split in the Hub's Parquet conversion layout (`train/0000.parquet`), dev
    as its data files name them; the same runs, file for file."""
    data = write_conll(str(tmp_path / "text"), np.random.default_rng(1))
    hub = tmp_path / "hub"
    (hub / "train").mkdir(parents=True)
    train = read_conll(os.path.join(data, "train.txt"))
    pq.write_table(conll_table(train), hub / "train" / "0000.parquet")
    dev = hub / "validation-00000-of-00001.parquet"
    pq.write_table(conll_table(read_conll(os.path.join(data, "dev.txt"))), dev)
    runs = [str(tmp_path / "run-text"), str(tmp_path / "run-hub")]
    for source, run in zip((data, str(hub)), runs, strict=True):
        assert main(finetune_args("ner", source, pretrained_run, run, "--epochs", "2")) == 0
    made = run_files(runs[1])
    assert made == run_files(runs[0]) and "results.json" in made
    with open(os.path.join(runs[1], "dev_predictions.txt")) as a:
        with open(os.path.join(runs[0], "dev_predictions.txt")) as b:
            assert a.read() == b.read()
    # refused in one line: no record of the tags' names, a tag beyond them, lengths unequal
    cases = [
        (conll_table(train, names=None), "no record of the names of ner_tags' classes"),
        (
            conll_table(train, names=CONLL_TAGS[:3]),
            "row 2: tag 3 is not one of ner_tags' 3 classes",
        ),
        (conll_table([(["a", "b"], ["O"])]), "row 2: 2 tokens but 1 ner_tags"),
    ]
    for table, said in cases:
        pq.write_table(table, hub / "train" / "0000.parquet")
        assert main(finetune_args("ner", str(hub), pretrained_run, str(tmp_path / "r"))) == 2
        assert f"{hub / 'train' / '0000.parquet'}: {said}" in one_line_error(capsys)
