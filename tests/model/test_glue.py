"""`bert-model glue`: the tasks fine-tuned one after another from one checkpoint, each in its own
run folder, and the table of their scores (GLUE's reported metrics, the average without WNLI)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from model.cli import main
from model.finetune.glue import summary
from tests.model.helpers import one_line_error, results, write_sst2, write_stsb


def test_glue_fine_tunes_each_task_and_writes_the_table(pretrained_run, tmp_path, capsys):
    """SST-2 in download_glue_data.py's folder name, STS-B in the Hub's."""
    data = tmp_path / "glue_data"
    write_sst2(str(data / "SST-2"), np.random.default_rng(0))
    write_stsb(str(data / "stsb"), np.random.default_rng(1))
    run = tmp_path / "glue"
    ckpt = os.path.join(pretrained_run, "last.pt")
    args = ["glue", "--data", str(data), "--ckpt", ckpt, "--tasks", "sst2,stsb", "--run", str(run)]
    assert main([*args, "--epochs", "1"]) == 0
    with open(run / "glue.json") as f:
        table = json.load(f)
    sst2, stsb = results(str(run / "sst2")), results(str(run / "stsb"))
    assert table["scores"]["sst2"] == pytest.approx(100 * sst2["accuracy"])
    assert table["scores"]["stsb"] == pytest.approx(50 * (stsb["pearson"] + stsb["spearman"]))
    assert table["average"] == pytest.approx(sum(table["scores"].values()) / 2)
    assert table["dev"] == {"sst2": sst2, "stsb": stsb} and table["ckpt"] == ckpt
    said = capsys.readouterr().out.strip().splitlines()
    assert said[-1] == f"glue average {table['average']:.2f} over sst2, stsb"


def test_the_table_averages_glues_metrics_without_wnli():
    table = summary(
        {
            "mrpc": {"f1": 0.8, "accuracy": 0.7},
            "mnli": {"accuracy": 0.8, "accuracy_mm": 0.82},
            "cola": {"mcc": 0.5, "accuracy": 0.9},  # CoLA's score is its MCC alone
            "wnli": {"accuracy": 0.56},
        }
    )
    want = {"mrpc": 75.0, "mnli": 81.0, "cola": 50.0, "wnli": 56.0}
    assert table["scores"] == pytest.approx(want)
    assert table["average"] == pytest.approx((75.0 + 81.0 + 50.0) / 3)
    assert table["averaged"] == ["mrpc", "mnli", "cola"]


def test_a_missing_task_folder_or_unknown_task_is_refused_before_any_run(
    pretrained_run, tmp_path, capsys
):
    data = tmp_path / "glue_data"
    write_sst2(str(data / "SST-2"), np.random.default_rng(0))
    run = tmp_path / "glue"
    ckpt = os.path.join(pretrained_run, "last.pt")
    base = ["glue", "--data", str(data), "--ckpt", ckpt, "--run", str(run)]
    assert main([*base, "--tasks", "sst2,rte"]) == 2
    assert one_line_error(capsys) == (
        f"bert-model glue: error: --data {data} holds no folder RTE or rte for rte; put the "
        "task's files there, or leave it out with --tasks"
    )
    assert main([*base, "--tasks", "sst2,squad"]) == 2
    assert "squad is no GLUE task; give some of cola,sst2" in one_line_error(capsys)
    assert main([*base, "--tasks", "sst2", "--restarts", "0"]) == 2
    assert one_line_error(capsys) == "bert-model glue: error: --restarts must be at least 1 (got 0)"
    assert not run.exists() and not (data / "SST-2" / "finetune-glue").exists()


def test_random_restarts_keep_each_tasks_best_seed_on_dev(pretrained_run, tmp_path, capsys):
    """The BERT paper's restarts: each seed's run in its folder, the best on dev in the table."""
    data = tmp_path / "glue_data"
    write_sst2(str(data / "SST-2"), np.random.default_rng(0))
    run = tmp_path / "glue"
    ckpt = os.path.join(pretrained_run, "last.pt")
    args = ["glue", "--data", str(data), "--ckpt", ckpt, "--tasks", "sst2", "--run", str(run)]
    assert main([*args, "--epochs", "1", "--restarts", "2", "--seed", "5"]) == 0
    with open(run / "glue.json") as f:
        table = json.load(f)
    each = {seed: results(str(run / "sst2" / f"seed-{seed}")) for seed in (5, 6)}
    tried = table["restarts"]["sst2"]
    assert tried["scores"] == {str(s): pytest.approx(100 * m["accuracy"]) for s, m in each.items()}
    best = max(each, key=lambda s: each[s]["accuracy"])
    assert tried["best_seed"] == best and table["dev"]["sst2"] == each[best]
    assert table["scores"]["sst2"] == pytest.approx(max(tried["scores"].values()))
    assert not (run / "sst2" / "results.json").exists()  # only in the seeds' folders
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("glue sst2")]
    scores = ", ".join(f"{100 * m['accuracy']:.2f}" for m in each.values())
    line = f"glue sst2  {table['scores']['sst2']:6.2f} (best of 2, seed {best}: {scores})"
    assert said == [line]
