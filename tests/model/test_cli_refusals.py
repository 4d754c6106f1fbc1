"""A mistake on `bert-model`'s command line is refused before any work, in one line that names
the one flag (or file) that is wrong and its value, and leaves nothing behind: no run directory,
no lock file, no traceback, never a default in place of the value given."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer

from model.cli import build_parser, main, train_config
from model.finetune.features import span_features
from model.finetune.readers import SquadExample
from model.folders import unwritable_line
from model.run_dir import removed_unless_used
from model.run_lock import LOCK_NAME, RunLock
from tests.helpers import read_only_folder
from tests.model.helpers import VOCAB, finetune_args, write_sst2
from tests.model.helpers import one_line_error as _one_line


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--batch-size", "0"], "--batch-size must be at least 1 (got 0)"),  # not the preset's
        (["--lr", "0"], "--lr must be > 0 (got 0.0)"),  # not the preset's
        (["--lr", "-1"], "--lr must be > 0 (got -1.0)"),
        (["--lr", "nan"], "--lr must be a finite number (got nan)"),
        (["--warmup", "-5"], "--warmup must be 0 or more (got -5)"),
        (["--weight-decay", "-1"], "--weight-decay must be 0 or more (got -1.0)"),
        (["--clip", "-1"], "--clip must be 0 (no clipping) or more (got -1.0)"),
        (
            ["--peak-tflops", "-3"],
            "--peak-tflops must be 0 (looked up by the GPU's name) or more (got -3.0)",
        ),
        (
            ["--peak-tflops", "989"],  # the mfu figure it sets is computed on CUDA only
            "--peak-tflops is a GPU's peak for the mfu figure, which a --device cpu run does not "
            "compute: drop it, or train with --device cuda",
        ),
        (["--steps", "0"], "--steps must be at least 1 (got 0)"),
        (["--layers", "-1"], "--layers must be 0 or more (got -1)"),
        (
            ["--hidden", "128", "--heads", "3"],
            "--hidden 128 does not split into 3 attention heads: give a hidden size that 3 "
            "divides, or --heads that divides 128 (BERT's heads are 64 wide)",
        ),
        (
            ["--layers", "2", "--init", "some/bert"],
            "--layers 2 shapes a new model, and --init some/bert brings its own: drop it, or "
            "--init",
        ),
        (["--accum", "0"], "--accum must be at least 1 (got 0)"),
        (["--workers", "-1"], "--workers must be 0 or more (got -1)"),
        (["--shuffle-window", "0"], "--shuffle-window must be at least 1 (got 0)"),
        (["--log-every", "0"], "--log-every must be at least 1 (got 0)"),
        (["--ckpt-every", "0"], "--ckpt-every must be at least 1 (got 0)"),
        (["--keep-every", "-2"], "--keep-every must be 0 (last.pt alone) or more (got -2)"),
        (["--holdout", "-1"], "--holdout must be 0 or more (got -1)"),
        (["--eval-batches", "-1"], "--eval-batches must be at least 1 (got -1)"),
        (["--eval-batches", "0"], "--eval-batches must be at least 1 (got 0)"),  # else 0 / 0
        (["--eval-every", "-1"], "--eval-every must be 0 (at the end only) or more (got -1)"),
        (
            ["--eval-every", "5", "--holdout", "0"],
            "--eval-every 5 evaluates the held-out shards, and --holdout 0 holds none out: give "
            "--holdout 1 or more, or drop --eval-every",
        ),
        (["--seed", "-1"], "--seed must be from 0 to 4294967295 (got -1)"),
        (["--attention-dropout", "1"], "--attention-dropout must lie in [0, 1) (got 1.0)"),
    ],
)
def test_pretrain_names_the_one_bad_flag_and_its_value(shards_dir, tmp_path, capsys, flags, says):
    run = tmp_path / "run"
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "1", *flags]
    assert main(args) == 2
    assert _one_line(capsys) == f"bert-model pretrain: error: {says}"
    assert not run.exists()


def test_more_loader_workers_than_four_per_cpu_are_refused(
    shards_dir, tmp_path, capsys, monkeypatch
):
    """Counted against the CPUs the process may use, shared by torchrun's ranks on the machine."""
    from model import batches

    monkeypatch.setattr(batches, "cpu_count", lambda: 2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    run = tmp_path / "run"
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "1", "--workers"]
    assert main([*args, "9"]) == 2
    assert _one_line(capsys) == (
        "bert-model pretrain: error: --workers 9: this machine gives training 2 CPU(s), and each "
        "DataLoader worker is a process with its own memory; give at most 8 per rank (4 per "
        "CPU), or 0 to load in the training process"
    )
    batches.refuse_too_many_workers(8)  # 4 per CPU: allowed
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert main([*args, "5"]) == 2
    assert "at most 4 per rank (4 per CPU, shared by the 2 ranks on this machine)" in _one_line(
        capsys
    )
    assert not run.exists()


def test_an_empty_run_is_refused_not_replaced_by_the_default(
    shards_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default run, runs/tiny-NAME, would go here
    assert main(["pretrain", "--shards", shards_dir, "--run", "", "--steps", "1"]) == 2
    assert _one_line(capsys) == "bert-model pretrain: error: --run must name a directory (got '')"
    assert os.listdir(tmp_path) == []


def test_clip_0_turns_clipping_off_and_is_kept():
    assert train_config(build_parser().parse_args(["pretrain", "--clip", "0"])).clip == 0


FINETUNE = ["finetune", "--task", "squad", "--max-seq-length", "16", "--max-query-length", "4"]


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--doc-stride", "0"], "--doc-stride must be at least 1 (got 0)"),  # else endless
        (["--max-query-length", "0"], "--max-query-length must be at least 1 (got 0)"),
        (["--max-answer-length", "0"], "--max-answer-length must be at least 1 (got 0)"),
        (["--log-every", "0"], "--log-every must be at least 1 (got 0)"),  # else after training
        (["--max-seq-length", "0"], "--max-seq-length must be at least 8 (got 0)"),  # not 384
        (["--weight-decay", "-1"], "--weight-decay must be 0 or more (got -1.0)"),
        (["--epochs", "0"], "--epochs must be > 0 (got 0.0)"),
        (["--epochs", "inf"], "--epochs must be a finite number (got inf)"),
        (["--batch-size", "0"], "--batch-size must be at least 1 (got 0)"),
        (["--accum", "0"], "--accum must be at least 1 (got 0)"),
        (
            ["--batch-size", "4", "--accum", "8"],
            "--accum 8 splits each batch of --batch-size 4 into 8 micro-batches, more than it has "
            "rows: give at most 4",
        ),
        (["--lr", "-1"], "--lr must be > 0 (got -1.0)"),
        (["--warmup-ratio", "1"], "--warmup-ratio must lie in [0, 1) (got 1.0)"),
        (["--seed", "-1"], "--seed must be from 0 to 4294967295 (got -1)"),
        (["--run", ""], "--run must name a directory (got '')"),
    ],
)
def test_finetune_names_the_one_bad_flag_and_its_value(tmp_path, capsys, flags, says):
    run = tmp_path / "run"
    data, ckpt = str(tmp_path / "squad"), str(tmp_path / "last.pt")
    args = [*FINETUNE, "--data", data, "--ckpt", ckpt, "--run", str(run), *flags]
    assert main(args) == 2
    assert _one_line(capsys) == f"bert-model finetune: error: {says}"
    assert not run.exists()


@pytest.mark.parametrize(
    "command, flag",
    [
        ("pretrain", "--run"),  # trained, and written to a local folder `gs:`
        ("pretrain", "--init"),
        ("pretrain", "--shard-cache"),
        ("finetune", "--data"),
        ("finetune", "--ckpt"),
        ("finetune", "--run"),
        ("export", "--ckpt"),
        ("export", "--out"),
    ],
)
def test_a_url_where_a_local_path_is_read_or_written_is_refused(
    tmp_path, capsys, monkeypatch, command, flag
):
    monkeypatch.chdir(tmp_path)
    given = {
        "pretrain": {"--shards": "gs://bucket/set", "--run": "run", "--steps": "1"},
        "finetune": {"--task": "sst2", "--data": "data", "--ckpt": "last.pt", "--run": "run"},
        "export": {"--ckpt": "last.pt", "--out": "export"},
    }[command]
    given[flag] = "gs://bucket/x"
    assert main([command, *(x for item in given.items() for x in item)]) == 2
    assert _one_line(capsys) == (
        f"bert-model {command}: error: {flag} gs://bucket/x: a URL, but {flag} names a local "
        "file or folder; give a path on this machine (copy from a bucket first, and results to "
        "it after)"
    )
    assert os.listdir(tmp_path) == []  # no folder `gs:`, no run


@pytest.mark.parametrize("flag", ["--doc-stride", "--max-query-length", "--max-answer-length"])
def test_squads_flags_beside_another_task_are_refused(tmp_path, capsys, flag):
    """They shape SQuAD's windows, questions and answers; another task would ignore them."""
    run = tmp_path / "run"
    args = ["finetune", "--task", "sst2", "--data", str(tmp_path), "--ckpt", str(tmp_path / "c")]
    assert main([*args, "--run", str(run), flag, "64"]) == 2
    assert _one_line(capsys) == (
        f"bert-model finetune: error: {flag} shapes SQuAD's windows, questions or answers, and "
        "--task sst2 has none: drop it, or pass --task squad"
    )
    assert not run.exists()


def test_span_features_refuse_a_window_that_never_moves(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(VOCAB.to_text())
    tok = BertWordPieceTokenizer(str(vocab), lowercase=True)
    ex = SquadExample("q", "who ?", "john lives in paris", ("paris",), 14)
    with pytest.raises(ValueError, match=r"^--doc-stride must be at least 1 \(got 0\)$"):
        span_features(tok, [ex], max_len=32, stride=0, max_query=8)


def _a_file(tmp_path) -> str:
    path = tmp_path / "taken"
    path.write_text("someone's file\n")
    return str(path)


def test_export_to_a_file_is_refused_in_one_line(pretrained_run, tmp_path, capsys):
    out = _a_file(tmp_path)
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 2
    assert _one_line(capsys) == (
        f"bert-model export: error: --out {out} is a file, not a directory; choose another "
        "--out DIR (make: EXPORT=DIR)"
    )
    assert open(out).read() == "someone's file\n"


def test_export_under_a_file_is_refused_in_one_line(pretrained_run, tmp_path, capsys):
    above = _a_file(tmp_path)
    out = os.path.join(above, "export")
    assert main(["export", "--ckpt", os.path.join(pretrained_run, "last.pt"), "--out", out]) == 2
    assert _one_line(capsys) == (
        f"bert-model export: error: --out {out}: {above} is a file, not a directory, so nothing "
        "can be made under it; choose another --out DIR (make: EXPORT=DIR)"
    )


def test_finetune_into_a_file_is_refused_in_one_line(pretrained_run, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "sst2"), np.random.default_rng(0))
    run = _a_file(tmp_path)
    assert main(finetune_args("sst2", data, pretrained_run, run)) == 2
    assert _one_line(capsys) == (
        f"bert-model finetune: error: --run {run} is a file, not a directory; choose another "
        "--run DIR (make: ARGS='--run DIR')"  # make finetune's RUN names the checkpoint's run
    )


def test_pretrain_into_a_file_is_refused_in_one_line(shards_dir, tmp_path, capsys):
    run = _a_file(tmp_path)
    assert main(["pretrain", "--shards", shards_dir, "--run", run, "--steps", "1"]) == 2
    assert _one_line(capsys) == (
        f"bert-model pretrain: error: --run {run} is a file, not a directory; choose another "
        "--run DIR (make: RUN=DIR)"
    )
    assert open(run).read() == "someone's file\n"


def test_pretrain_into_an_unwritable_folder_is_refused_before_work(
    shards_dir, tmp_path, capsys, monkeypatch
):
    """Modes as an ordinary user meets them (root's `os.access` says yes to every mode)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: str(p) != str(locked) and real(p, m))
    run = str(locked / "run")
    assert main(["pretrain", "--shards", shards_dir, "--run", run, "--steps", "1"]) == 2
    assert _one_line(capsys) == (
        f"bert-model pretrain: error: --run {run} cannot be made: {locked} is not writable; "
        "choose another --run DIR (make: RUN=DIR) or fix its rights"
    )
    assert os.listdir(locked) == []


def test_pretrain_onto_a_read_only_filesystem_is_refused_saying_so(shards_dir, tmp_path, capsys):
    with read_only_folder(tmp_path / "ro") as ro:
        run = f"{ro}/run"
        assert main(["pretrain", "--shards", shards_dir, "--run", run, "--steps", "1"]) == 2
        assert _one_line(capsys) == (
            f"bert-model pretrain: error: --run {run} cannot be made: {ro} is on a read-only "
            "filesystem; choose another --run DIR (make: RUN=DIR) or remount it writable"
        )


@pytest.mark.parametrize("where", ["TMPDIR", "TORCHINDUCTOR_CACHE_DIR"])
def test_compile_on_the_cpu_under_a_path_with_a_space_is_refused_before_work(
    shards_dir, tmp_path, capsys, monkeypatch, where
):
    """torch hands g++ inductor's paths unquoted: the first compiled step would end in a
    compile error of many lines (seen with TMPDIR="/tmp/with space")."""
    import tempfile

    spaced = tmp_path / "with space"
    spaced.mkdir()
    if where == "TMPDIR":
        monkeypatch.setattr(tempfile, "tempdir", str(spaced))
    else:  # refused before anything is written under either
        monkeypatch.setattr(tempfile, "tempdir", "/tmp")
        monkeypatch.setenv(where, str(spaced))
    said = (
        f"--compile on the CPU: torch's inductor cannot compile C++ under {where} "
        f"'{spaced}', whose path holds a space; set {where} to a folder without one, or leave "
        "out --compile"
    )
    run = str(tmp_path / "run")
    assert main(["pretrain", "--shards", shards_dir, "--run", run, "--compile"]) == 2
    assert _one_line(capsys) == f"bert-model pretrain: error: {said}"
    assert not os.path.exists(run)
    tuned = str(tmp_path / "tuned")
    args = finetune_args("sst2", str(tmp_path / "data"), str(tmp_path / "pre"), tuned)
    assert main([*args, "--compile"]) == 2
    assert _one_line(capsys) == f"bert-model finetune: error: {said}"
    assert not os.path.exists(tuned)


def test_a_filesystem_turned_read_only_while_writing_is_one_line():
    line = unwritable_line(OSError(errno.EROFS, os.strerror(errno.EROFS), "/mnt/run/last.pt"))
    assert line == (
        "/mnt/run/last.pt: Read-only file system; choose another folder or remount it writable"
    )


@pytest.mark.skipif(
    not os.path.isdir("/sys/kernel") or os.geteuid() != 0,
    reason="as root, on sysfs (an ordinary user is refused before work, as above)",
)
def test_a_folder_the_filesystem_refuses_is_one_line(shards_dir, capsys):
    """sysfs refuses a new folder even to root: the error the filesystem gives, in one line."""
    run = "/sys/kernel/bert-model-run"
    assert main(["pretrain", "--shards", shards_dir, "--run", run, "--steps", "1"]) == 1
    line = _one_line(capsys)
    assert line.startswith(f"bert-model pretrain: error: {run}: "), line
    assert line.endswith("; choose another folder or fix its rights"), line


@pytest.mark.parametrize("shards", ["a file", "not a set"])
def test_a_refused_shard_set_leaves_no_run_directory(tmp_path, capsys, shards):
    path = tmp_path / "shards"
    if shards == "a file":
        path.write_text("x\n")
    else:
        path.mkdir()
        (path / "vocab.txt").write_text(VOCAB.to_text())
    run = tmp_path / "runs" / "r"
    assert main(["pretrain", "--shards", str(path), "--run", str(run), "--steps", "1"]) == 2
    assert str(path) in _one_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_a_refusal_after_the_lock_leaves_no_run_directory(shards_dir, tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "1"]
    assert main([*args, "--batch-size", "7", "--accum", "2"]) == 2  # refused by the loader
    assert "--batch-size 7 does not divide" in _one_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_a_directory_that_was_there_is_kept(shards_dir, tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    args = ["pretrain", "--shards", shards_dir, "--run", str(run), "--steps", "1"]
    assert main([*args, "--batch-size", "7", "--accum", "2"]) == 2
    capsys.readouterr()
    assert run.is_dir()


def test_a_directory_another_run_has_locked_is_not_removed(tmp_path):
    run = str(tmp_path / "r")
    with pytest.raises(ValueError, match="refused"):
        with removed_unless_used(run):
            RunLock(run).acquire()  # the other run: it made the directory and holds it
            raise ValueError("refused")
    assert os.listdir(run) == [LOCK_NAME]


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["pretrain", "--bogus"],
            "bert-model pretrain: error: unknown flag --bogus; see bert-model pretrain --help",
        ),
        (
            ["pretrain", "--stesp", "3"],
            "bert-model pretrain: error: unknown flag --stesp (did you mean --steps?); see "
            "bert-model pretrain --help",
        ),
        (
            ["pretrain", "--steps", "abc"],
            "bert-model pretrain: error: argument --steps: invalid int value: 'abc'; see "
            "bert-model pretrain --help",
        ),
        (
            ["export", "--ckpt", "c", "--out", "o", "--bogus"],
            "bert-model export: error: unknown flag --bogus (did you mean --out?); see "
            "bert-model export --help",
        ),
    ],
)
def test_unknown_flags_and_bad_types_are_one_line(capsys, argv, line):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert _one_line(capsys) == line


@pytest.mark.parametrize("command", ["pretrain", "finetune", "export"])
def test_help_still_works(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: bert-model {command}")
