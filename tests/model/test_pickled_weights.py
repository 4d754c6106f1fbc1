"""A torch file that holds pickled code is refused in one line wherever a file is read (export,
`--init DIR`, `--ckpt DIR` or FILE, `--resume`), its code never runs, and the line never advises
turning the safety off: convert the weights to safetensors."""

from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest
import torch

from model.cli import main
from model.run_dir import load_checkpoint
from model.safe_load import PickledCodeError, load_weights
from tests.model.helpers import write_sst2


class RunsCode:
    """Unpickling this calls os.system: what a hostile `pytorch_model.bin` does."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def hostile(tmp_path) -> tuple[str, str]:
    """(a torch file whose unpickling runs `touch MARKER`, MARKER)."""
    marker = str(tmp_path / "code-ran")
    path = str(tmp_path / "pytorch_model.bin")
    torch.save({"weight": torch.zeros(2), "payload": RunsCode(marker)}, path)
    return path, marker


@pytest.fixture(scope="module")
def exported(pretrained_run, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("hf") / "hf")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 0
    return out


@pytest.fixture
def hostile_hf(exported, hostile, tmp_path) -> str:
    """The export with its safetensors replaced by the hostile pickle."""
    directory = str(tmp_path / "hostile-hf")
    shutil.copytree(exported, directory)
    os.remove(os.path.join(directory, "model.safetensors"))
    shutil.copy(hostile[0], os.path.join(directory, "pytorch_model.bin"))
    return directory


def one_line_refusal(capsys, command: str, path: str, marker: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"bert-model {command}: error: {path}: holds pickled code")
    assert "it names posix.system" in err and "never loaded" in err and "safetensors" in err
    assert "weights_only" not in err and "trust" not in err and "Traceback" not in err
    assert not os.path.exists(marker)


def test_export_of_a_pickled_file(hostile, tmp_path, capsys):
    path, marker = hostile
    assert main(["export", "--ckpt", path, "--out", str(tmp_path / "e")]) == 2
    one_line_refusal(capsys, "export", path, marker)
    assert not (tmp_path / "e").exists()


def test_init_from_a_directory_with_a_pickled_bin(
    hostile_hf, hostile, shards_dir, tmp_path, capsys
):
    args = ["pretrain", "--shards", shards_dir, "--run", str(tmp_path / "run")]
    assert main([*args, "--init", hostile_hf, "--steps", "1"]) == 2
    one_line_refusal(capsys, "pretrain", os.path.join(hostile_hf, "pytorch_model.bin"), hostile[1])


def test_finetune_from_a_pickled_directory_or_file(hostile_hf, hostile, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    for ckpt, named in (
        (hostile_hf, os.path.join(hostile_hf, "pytorch_model.bin")),
        (hostile[0],) * 2,
    ):
        args = ["finetune", "--task", "sst2", "--data", data, "--run", str(tmp_path / "ft")]
        assert main([*args, "--ckpt", ckpt]) == 2
        one_line_refusal(capsys, "finetune", named, hostile[1])


def test_resume_from_a_pickled_last_pt(shards_dir, hostile, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(hostile[0], run / "last.pt")
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "2", "--resume"]
    assert main(args) == 2
    one_line_refusal(capsys, "pretrain", str(run / "last.pt"), hostile[1])


def test_a_plain_pickle_is_refused_and_a_damaged_file_is_called_damaged(tmp_path, hostile):
    legacy = str(tmp_path / "legacy.pt")  # pickle.dump, not torch's zip: torch stops at an opcode
    with open(legacy, "wb") as f:
        pickle.dump({"x": RunsCode(hostile[1])}, f)
    with pytest.raises(PickledCodeError, match=r"legacy\.pt: holds a pickle that is not plain"):
        load_weights(legacy)
    cut = str(tmp_path / "cut.pt")
    torch.save({"w": torch.ones(4)}, cut)
    with open(cut, "r+b") as f:
        f.truncate(os.path.getsize(cut) // 2)
    for mmap in (False, True):
        with pytest.raises(ValueError, match=r"cut\.pt: damaged or truncated") as caught:
            load_checkpoint(cut, mmap=mmap)
        assert not isinstance(caught.value, PickledCodeError)
    with pytest.raises(PickledCodeError, match=r"pytorch_model\.bin: holds pickled code"):
        load_weights(hostile[0], mmap=True)
    assert not os.path.exists(hostile[1])


def mapped_from(tensor: torch.Tensor, path: str) -> bool:
    """Whether the tensor's bytes lie in a mapping of the file at `path` (Linux's
    /proc/self/maps): pages the process reads only as they are used."""
    ptr, real = tensor.data_ptr(), os.path.realpath(path)
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == real:
                low, high = (int(x, 16) for x in fields[0].split("-"))
                if low <= ptr < high:
                    return True
    return False


def test_a_mapped_load_maps_the_file_and_reads_a_legacy_file_whole(tmp_path):
    """`mmap`: the tensors are the file's pages, read as they are used; torch's legacy format
    (not a zip) cannot be mapped and is read whole, as without it."""
    state = {"model": {"w": torch.arange(6.0)}, "optimizer": {"m": torch.ones(4)}}
    zipped, legacy = str(tmp_path / "new.pt"), str(tmp_path / "old.pt")
    torch.save(state, zipped)
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    for path in (zipped, legacy):
        for mmap in (False, True):
            got = load_weights(path, mmap=mmap)
            torch.testing.assert_close(got, state)
            assert mapped_from(got["model"]["w"], path) == (mmap and path == zipped)


def test_a_runs_checkpoint_is_mapped_where_its_model_alone_is_read(
    pretrained_run, shards_dir, tmp_path, monkeypatch
):
    """evaluate, export and fine-tuning from `--ckpt` read a run's model, not its optimizer's
    state (with AdamW twice the model's bytes): last.pt is mapped, its pages read as used."""
    ckpt = os.path.join(pretrained_run, "last.pt")
    seen, real_load = [], torch.load

    def load(path, *args, **kwargs):
        got = real_load(path, *args, **kwargs)
        if path == ckpt:
            seen.append(all(mapped_from(t, ckpt) for t in got["model"].values()))
        return got

    monkeypatch.setattr(torch, "load", load)
    assert main(["evaluate", "--ckpt", ckpt, "--shards", shards_dir, "--eval-batches", "1"]) == 0
    assert main(["export", "--ckpt", ckpt, "--out", str(tmp_path / "hf")]) == 0
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    args = ["finetune", "--task", "sst2", "--data", data, "--ckpt", ckpt, "--epochs", "1"]
    assert main([*args, "--run", str(tmp_path / "ft")]) == 0
    assert seen == [True, True, True]
