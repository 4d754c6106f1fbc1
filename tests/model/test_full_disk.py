"""A disk that fills while a command writes (the metrics, a checkpoint, an export's files):
one line naming the file and how to go on once there is space, the last checkpoint whole; and
under torchrun, the line of a rank whose collective the stopped rank's end broke."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from model.cli import main
from schemas.vocab import Vocab
from tests.helpers import tmpfs
from tests.model.helpers import VOCAB, one_line_error


def test_a_disk_that_fills_while_pretraining_is_one_line_saying_how_to_go_on(
    shards_dir, tmp_path, capsys
):
    """A checkpoint the disk cannot hold stopped pre-training with torch's own traceback
    (`RuntimeError: ... unexpected pos`, the OSError it met as its context). Now one line names
    the checkpoint and says how to go on: the same command before the first checkpoint, with
    --resume from the last one after it; the last one is left whole."""
    with tmpfs(tmp_path / "fs", "size=256k", "no other test fills a disk") as where:
        run = f"{where}/run"
        args = ["pretrain", "--shards", shards_dir, "--run", run, "--ckpt-every", "2"]
        assert main([*args, "--steps", "2"]) == 1
        assert one_line_error(capsys) == (
            f"bert-model pretrain: error: {run}/last.pt: No space left on device; free some "
            "space there, then run the same command again"
        )
        assert not [n for n in os.listdir(run) if n.startswith("last.pt")]
        subprocess.run(["mount", "-o", "remount,size=64m", where], check=True)
        assert main([*args, "--steps", "2"]) == 0
        size = os.path.getsize(f"{run}/last.pt")
        used = shutil.disk_usage(where).used
        subprocess.run(["mount", "-o", f"remount,size={used + size // 2}", where], check=True)
        capsys.readouterr()
        assert main([*args, "--steps", "4", "--resume"]) == 1
        assert one_line_error(capsys) == (
            f"bert-model pretrain: error: {run}/last.pt: No space left on device; free some "
            "space there, then run the same command with --resume (make: ARGS=--resume) to "
            f"continue from {run}/last.pt, written every --ckpt-every steps"
        )
        assert os.path.getsize(f"{run}/last.pt") == size  # step 2's, whole
        subprocess.run(["mount", "-o", "remount,size=64m", where], check=True)
        assert main([*args, "--steps", "4", "--resume"]) == 0


def test_an_export_that_fills_the_disk_is_one_line_naming_its_weights(
    pretrained_run, tmp_path, capsys
):
    """safetensors' own error (`SafetensorError: ... (os error 28)`) was a traceback."""
    with tmpfs(tmp_path / "fs", "size=64k", "no other export fills a disk") as where:
        out = f"{where}/hf"
        args = ["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]
        assert main(args) == 1
        assert one_line_error(capsys) == (
            f"bert-model export: error: {out}/model.safetensors: No space left on device; free "
            "some space there, then run the same command again"
        )
        assert os.listdir(out) == []
        subprocess.run(["mount", "-o", "remount,size=64m", where], check=True)
        assert main(args) == 0


def test_a_disk_that_fills_while_copying_the_vocab_or_logging_events_is_one_line(
    shards_dir, tmp_path, capsys, make_shards
):
    """The run's vocab.txt copied onto a full disk said `None: No space left on device`, and
    TensorBoard's events on one printed their writer thread's traceback beside a line naming no
    file. Each now names what it was writing."""
    pieces = tuple(f"piece{i}" for i in range(3000))  # a vocab.txt of about 30 KB
    big = make_shards(str(tmp_path / "big"), vocab=Vocab((*VOCAB.pieces, *pieces)))
    with tmpfs(tmp_path / "fs", "size=16k", "no other test fills a disk") as where:
        run = f"{where}/run"
        assert main(["pretrain", "--shards", big, "--run", run, "--steps", "2"]) == 1
        assert one_line_error(capsys) == (
            f"bert-model pretrain: error: {run}/vocab.txt: No space left on device; free some "
            "space there, then run the same command again"
        )
    with tmpfs(tmp_path / "fs2", "size=40k", "no other test fills a disk") as where:
        run = f"{where}/run"
        args = ["pretrain", "--shards", shards_dir, "--run", run, "--steps", "2000"]
        args += ["--log-every", "1", "--ckpt-every", "100000", "--holdout", "0", "--batch-size"]
        assert main([*args, "2", "--tensorboard"]) == 1
        said = one_line_error(capsys)  # the events or the metrics, whichever filled it
        assert re.fullmatch(
            f"bert-model pretrain: error: {run}/(tensorboard|metrics.jsonl): No space left on "
            "device; free some space there, then run the same command again",
            said,
        ), said


def test_a_rank_whose_collective_another_ranks_end_broke_says_one_line(monkeypatch, capsys):
    """Under torchrun, rank 0 stopped by a full disk says why and ends; rank 1's collective
    then failed (gloo: `Connection closed by peer`) with a traceback of its own. That rank now
    says one line pointing at the other's. Tried by hand with torchrun, two ranks on gloo and a
    small tmpfs; here with the error raised where the run would be."""
    import model.cli

    broken = RuntimeError(
        "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:46783"
    )

    def run(args):
        raise broken

    monkeypatch.setattr(model.cli, "_run", run)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(["pretrain", "--steps", "1"]) == 1
    assert one_line_error(capsys) == (
        "bert-model pretrain: rank 1 stopped: another rank ended first (its line says why)"
    )
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: the error is its own, as it is
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        main(["pretrain", "--steps", "1"])
