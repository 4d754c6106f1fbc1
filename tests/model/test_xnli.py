"""`--task xnli`: multilingual BERT's evaluation. Trained on MultiNLI's English `train.tsv`,
scored on XNLI 1.0's `xnli.dev.tsv` and `xnli.test.tsv` (their labels are public), overall and
per language (the `language` column), each file's predictions written beside its gold labels."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest

from model.cli import main
from tests.model.helpers import finetune_args, results, write_mnli

# XNLI 1.0's columns, in its order (the files hold a header row)
XNLI_COLUMNS = (
    "language",
    "gold_label",
    "sentence1_binary_parse",
    "sentence2_binary_parse",
    "sentence1_parse",
    "sentence2_parse",
    "sentence1",
    "sentence2",
    "promptID",
    "pairID",
    "genre",
    "label1",
    "label2",
    "label3",
    "label4",
    "label5",
    "sentence1_tokenized",
    "sentence2_tokenized",
    "match",
)
WORDS = {"en": ("good", "bad"), "de": ("gut", "schlecht")}


def read_tsv_rows(path: str) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter="\t"))


def write_xnli(directory: str) -> str:
    """MultiNLI-style `train.tsv` (English), and XNLI's dev (6 rows a language) and test (3)."""
    write_mnli(directory, np.random.default_rng(4), mismatched=False)
    os.remove(os.path.join(directory, "dev_matched.tsv"))
    for name, n in (("xnli.dev.tsv", 6), ("xnli.test.tsv", 3)):
        with open(os.path.join(directory, name), "w", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(XNLI_COLUMNS)
            for language, (yes, no) in WORDS.items():
                for i in range(n):
                    label = ("entailment", "contradiction", "neutral")[i % 3]
                    b = {"entailment": yes, "contradiction": no}.get(label, "alt")
                    row = dict.fromkeys(XNLI_COLUMNS, "-")
                    row.update(language=language, gold_label=label, pairID=str(i))
                    row.update(sentence1=f"der film war {yes} .", sentence2=f"der film war {b} .")
                    writer.writerow([row[c] for c in XNLI_COLUMNS])
    return directory


def test_xnli_scores_dev_and_test_overall_and_per_language(pretrained_run, tmp_path):
    data = write_xnli(str(tmp_path / "XNLI"))
    run = str(tmp_path / "xnli")
    assert main(finetune_args("xnli", data, pretrained_run, run, "--epochs", "1")) == 0
    scores = results(run)
    assert set(scores) == {
        "accuracy",
        "accuracy_de",
        "accuracy_en",
        "accuracy_test",
        "accuracy_de_test",
        "accuracy_en_test",
    }
    for suffix, file, n in (
        ("", "dev_predictions.tsv", 6),
        ("_test", "dev_predictions_test.tsv", 3),
    ):
        rows = read_tsv_rows(os.path.join(run, file))[1:]
        right = [r[1] == r[2] for r in rows]  # index, prediction, label; languages in file order
        assert len(rows) == 2 * n
        assert scores[f"accuracy{suffix}"] == pytest.approx(np.mean(right))
        assert scores[f"accuracy_en{suffix}"] == pytest.approx(np.mean(right[:n]))
        assert scores[f"accuracy_de{suffix}"] == pytest.approx(np.mean(right[n:]))


def test_xnli_has_no_server_to_predict_for(pretrained_run, tmp_path, capsys):
    data = write_xnli(str(tmp_path / "XNLI"))
    args = finetune_args("xnli", data, pretrained_run, str(tmp_path / "run"), "--predict")
    assert main(args) == 2
    said = capsys.readouterr().err
    assert "--predict labels GLUE test files for the GLUE server; --task xnli has none" in said


def test_xnli_from_parquet_is_refused_naming_its_tsv(pretrained_run, tmp_path, capsys):
    """The Hub's layout (a train split in Parquet, no train.tsv) is read for GLUE's tasks; XNLI
    is read from its own TSV files."""
    data = tmp_path / "hub"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"PAR1")
    args = finetune_args("xnli", str(data), pretrained_run, str(tmp_path / "run"))
    assert main(args) == 2
    said = capsys.readouterr().err
    assert f"--data {data}: Parquet splits, and --task xnli reads TSV files or the Hub's" in said
    assert said.rstrip().endswith("its train.tsv and xnli.dev.tsv, or of en/, de/, ...")


def as_hub(tsv: str, hub: str) -> str:
    """The same rows in the Hub's layout (`facebook/xnli`): a folder per language's config,
    `premise`, `hypothesis` and the label's index (entailment, neutral, contradiction)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    classes = ("entailment", "neutral", "contradiction")
    train = read_tsv_rows(os.path.join(tsv, "train.tsv"))
    splits = {("en", "train"): [(r[1], r[2], r[3]) for r in train[1:]]}
    for name, split in (("xnli.dev.tsv", "validation"), ("xnli.test.tsv", "test")):
        rows = read_tsv_rows(os.path.join(tsv, name))
        at = {c: rows[0].index(c) for c in ("language", "sentence1", "sentence2", "gold_label")}
        for r in rows[1:]:
            row = (r[at["sentence1"]], r[at["sentence2"]], r[at["gold_label"]])
            splits.setdefault((r[at["language"]], split), []).append(row)
    for (language, split), rows in splits.items():
        os.makedirs(os.path.join(hub, language), exist_ok=True)
        table = pa.table(
            {
                "premise": [r[0] for r in rows],
                "hypothesis": [r[1] for r in rows],
                "label": [classes.index(r[2]) for r in rows],
            }
        )
        pq.write_table(table, os.path.join(hub, language, f"{split}-00000-of-00001.parquet"))
    return hub


def test_the_hubs_layout_scores_as_xnlis_own_files(pretrained_run, tmp_path):
    """A folder of the Hub's language configs (English trains, every language scores) gives
    the scores of the same rows in XNLI's own files."""
    data = write_xnli(str(tmp_path / "XNLI"))
    hub = as_hub(data, str(tmp_path / "hub"))
    runs = {}
    for name, folder in (("tsv", data), ("hub", hub)):
        runs[name] = str(tmp_path / name)
        assert main(finetune_args("xnli", folder, pretrained_run, runs[name], "--epochs", "1")) == 0
    assert results(runs["hub"]) == pytest.approx(results(runs["tsv"]))
    assert set(results(runs["hub"])) >= {"accuracy_de", "accuracy_en_test"}
