"""Files the model package writes get the mode any new file gets under the umask (0644 under
the usual 022), not the 0600 of a temporary file renamed into place."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from model.cli import main
from schemas.manifest import atomic_write_text, new_file_mode
from tests.model.helpers import finetune_args, write_sst2


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def modes(directory: str) -> dict[str, int]:
    return {
        name: stat.S_IMODE(os.stat(os.path.join(directory, name)).st_mode)
        for name in os.listdir(directory)
        if os.path.isfile(os.path.join(directory, name))
    }


def test_write_text_follows_the_umask(tmp_path, umask_022):
    path = str(tmp_path / "results.json")
    assert atomic_write_text(path, "{}\n") == path and new_file_mode() == 0o644
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    os.umask(0o027)
    atomic_write_text(path, "{}\n")  # an existing file is replaced; the mode follows the umask
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_every_file_of_a_pretraining_finetuning_and_export_run_is_0644(
    shards_dir, tmp_path, umask_022
):
    run = str(tmp_path / "run")
    args = ["pretrain", "--shards", shards_dir, "--run", run, "--steps", "2", "--batch-size", "8"]
    assert main([*args, "--eval-batches", "1"]) == 0
    assert set(modes(run)) >= {"last.pt", "metrics.jsonl", "train_config.json", "eval.json"}
    assert set(modes(run).values()) == {0o644}, modes(run)
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    with open(os.path.join(data, "dev.tsv")) as f:
        rows = [line.rsplit("\t", 1)[0] for line in f.read().splitlines()[1:]]
    with open(os.path.join(data, "test.tsv"), "w") as f:
        f.write("index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, s in enumerate(rows)))
    tuned = str(tmp_path / "tuned")
    assert main(finetune_args("sst2", data, run, tuned, "--epochs", "1", "--predict")) == 0
    want = {"results.json", "best.json", "dev_predictions.tsv", "SST-2.tsv", "model.pt", "best.pt"}
    assert set(modes(tuned)) >= want and set(modes(tuned).values()) == {0o644}, modes(tuned)
    out = str(tmp_path / "export")
    assert main(["export", "--ckpt", os.path.join(run, "last.pt"), "--out", out]) == 0
    assert set(modes(out)) == {
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    assert set(modes(out).values()) == {0o644}, modes(out)
