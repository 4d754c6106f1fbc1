"""One clear line for the common mistakes of `bert-model`, not a traceback or a wrong word."""

from __future__ import annotations

import pytest

from model.cli import main
from model.finetune.config import FinetuneConfig


def test_export_without_a_checkpoint_says_missing_and_how_to_make_one(tmp_path, capsys):
    ckpt = tmp_path / "runs" / "tiny-sample" / "last.pt"
    out = tmp_path / "export"
    assert main(["export", "--ckpt", str(ckpt), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"bert-model export: error: no checkpoint at {ckpt}; `make pretrain` writes one "
        "(or pass CKPT=...)"
    )
    assert "damaged" not in err
    assert not out.exists()


def test_export_with_a_folder_for_a_checkpoint_says_what_the_folder_is(tmp_path, capsys):
    def said(ckpt) -> str:
        assert main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "e")]) == 2
        return capsys.readouterr().err.strip().removeprefix("bert-model export: error: ")

    assert said(tmp_path) == (
        f"--ckpt {tmp_path} is a folder; export takes a checkpoint file, a pre-training run's "
        "last.pt or a fine-tuning run's best.pt, --ckpt RUN/last.pt (make: CKPT=RUN/last.pt)"
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text("{}")
    assert said(run) == (
        f"--ckpt {run} is a pre-training run folder; pass its checkpoint, --ckpt "
        f"{run}/last.pt (make: CKPT={run}/last.pt)"
    )
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / "model.safetensors").write_bytes(b"")
    assert said(exported).startswith(
        f"--ckpt {exported} holds a Hugging Face model directory (model.safetensors); export "
        "takes a checkpoint file"
    )
    assert not (tmp_path / "e").exists()


def test_refusals_that_name_a_flag_also_give_its_make_spelling(shards_dir, tmp_path, capsys):
    from model.config import flag_hint

    assert flag_hint("--resume") == "--resume (make: ARGS=--resume)"
    assert flag_hint("--run", "DIR") == "--run DIR (make: RUN=DIR)"
    assert flag_hint("--batch-size", "8") == "--batch-size 8 (make: ARGS='--batch-size 8')"
    run = tmp_path / "run"
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "1"]
    assert main([*args, "--batch-size", "8", "--eval-batches", "1"]) == 0
    capsys.readouterr()
    assert main([*args, "--batch-size", "8"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bert-model pretrain: error: {run / 'last.pt'} exists: pass --resume (make: "
        "ARGS=--resume) to continue that run, or choose another --run DIR (make: RUN=DIR)"
    )
    assert main([*args, "--batch-size", "7", "--accum", "2"]) == 2
    assert "choose a multiple of 2, e.g. --batch-size 6 (make: ARGS='--batch-size 6')" in (
        capsys.readouterr().err
    )
    # the multiple nearest the batch asked for, not the smallest: 32 over 7 micro-batches
    for asked, accum, nearest in (("32", "7", "35"), ("30", "7", "28"), ("5", "7", "7")):
        assert main([*args, "--batch-size", asked, "--accum", accum]) == 2
        assert f"e.g. --batch-size {nearest} (make:" in capsys.readouterr().err


def test_finetune_refuses_an_unknown_precision_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["finetune", "--task", "sst2", "--data", str(tmp_path), "--ckpt", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--run", str(run), "--precision", "fp8"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # no usage block
    assert err[-1].startswith(
        "bert-model finetune: error: argument --precision: invalid choice: 'fp8'"
    )
    assert all(name in err[-1] for name in ("auto", "bf16", "fp16", "fp32"))
    assert not run.exists()
    # The config itself, built without the command line, refuses it naming the flag.
    with pytest.raises(
        ValueError, match=r"^--precision must be auto, bf16, fp16 or fp32 \(got 'fp8'\)$"
    ):
        FinetuneConfig(task="sst2", data="d", ckpt="c", run=str(run), precision="fp8")


@pytest.mark.parametrize("local_rank, said", [(None, True), ("0", True), ("1", False)])
def test_a_mistake_in_the_command_line_is_said_by_the_first_process_of_a_machine(
    monkeypatch, capsys, local_rank, said
):
    """Under torchrun every process parses the same command line; the first of each machine
    (LOCAL_RANK 0) says its mistake, the others end with the same status in silence."""
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    with pytest.raises(SystemExit) as e:
        main(["pretrain", "--shards", "out/sample", "--stpes", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("bert-model pretrain: error: ") if said else err == ""
