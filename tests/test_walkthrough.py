"""The README's walkthrough, end to end on the bundled sample: shards -> validate -> pretrain ->
export -> fine-tune (every sample task) -> load the export with `transformers`.

The steps call each CLI's `main([...])` with the arguments `make` passes (checked against
`make -n`), with fewer steps than the walkthrough's defaults so that the whole takes seconds.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT, SAMPLE_INPUT, build_shards

README = os.path.join(ROOT, "README.md")
SAMPLE_TASKS = {"sst2": "accuracy", "ner": "f1", "squad": "f1"}


def walkthrough_block() -> str:
    """The shell block under the README's `## Walkthrough` heading."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Walkthrough", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 1)[1].split("```", 1)[0]


def walkthrough_python(block: str) -> str:
    """The Python program the walkthrough feeds to the venv's interpreter (`<<'EOF'`)."""
    return block.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]


def walkthrough_make_lines(block: str) -> list[list[str]]:
    """Each `make ...` command of the walkthrough, as argv (comments dropped)."""
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("make ")]


def test_the_readme_walkthrough_runs_shards_to_transformers_in_order():
    block = walkthrough_block()
    targets = [argv[1] for argv in walkthrough_make_lines(block)]
    assert len(targets) == 8, targets
    first = {t: targets.index(t) for t in ("shards", "validate", "pretrain", "export", "finetune")}
    assert sorted(first, key=first.get) == ["shards", "validate", "pretrain", "export", "finetune"]
    tasks = {a.split("=", 1)[1] for argv in walkthrough_make_lines(block) for a in argv[2:]}
    assert {"ner", "squad"} <= tasks  # TASK=ner, TASK=squad besides the default sst2
    program = walkthrough_python(block)
    assert "AutoTokenizer.from_pretrained" in program and "AutoModel.from_pretrained" in program


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_walkthrough_make_line_expands_on_a_fresh_clone():
    """`make -n` of every walkthrough line: the sample's files are where make looks for them,
    and each command is the CLI call the end-to-end test below makes."""
    venv = sys.prefix
    for argv in walkthrough_make_lines(walkthrough_block()):
        cmd = ["make", "-n", "--no-print-directory", f"VENV={venv}"]
        cmd += ["-o", f"{venv}/.installed-stamp", *argv[1:]]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (argv, r.stderr)
        if argv[1] == "finetune":
            task = next((a[5:] for a in argv if a.startswith("TASK=")), "sst2")
            data = f"sample/finetune/{task}"
            assert f"--task {task} --data '{data}'" in r.stdout, r.stdout
            assert os.path.isdir(os.path.join(ROOT, data))


@pytest.fixture
def one_thread():
    """One intra-op thread: the cores are shared, and a tiny model is no faster on more."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_walkthrough_end_to_end_on_the_sample(tmp_path, one_thread, capsys, monkeypatch):
    from model.cli import main as model_main
    from schemas.cli import main as schemas_main

    transformers = pytest.importorskip("transformers")
    out, run = str(tmp_path / "out" / "sample"), str(tmp_path / "runs" / "tiny-sample")

    # make shards (the sample, as `make shards` builds it, on one worker)
    assert build_shards(out, inputs=SAMPLE_INPUT) == 0
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    # the README's figures are this build's
    instances = manifest["counts"]["total"]["instances"]
    stated = re.search(r"make shards .*: 1 shard, ([\d,]+) instances", walkthrough_block())
    assert len(manifest["shards"]) == 1 and stated and stated.group(1) == f"{instances:,}"
    # make validate; make inspect ARGS='--n 2 --shard 0', as the walkthrough shows
    assert schemas_main(["validate", out, "--no-hash"]) == 0
    assert schemas_main(["inspect", out, "--n", "2", "--shard", "0"]) == 0
    # make pretrain, a few steps of the tiny preset
    pretrain = ["pretrain", "--shards", out, "--run", run, "--model", "tiny", "--steps", "4"]
    assert model_main([*pretrain, "--batch-size", "8", "--eval-batches", "2"]) == 0
    ckpt = os.path.join(run, "last.pt")
    # make export, in a process of its own as make runs it: an import cycle that an earlier
    # import in this process would hide breaks it there
    export = os.path.join(run, "export")
    cmd = [sys.executable, "-m", "model.cli", "export", "--ckpt", ckpt, "--out", export]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # make finetune; make finetune TASK=ner; make finetune TASK=squad
    for task, metric in SAMPLE_TASKS.items():
        data = os.path.join(ROOT, "sample", "finetune", task)
        args = ["finetune", "--task", task, "--data", data, "--ckpt", ckpt, "--epochs", "1"]
        assert model_main([*args, "--batch-size", "16"]) == 0, capsys.readouterr().err
        with open(os.path.join(run, f"finetune-{task}", "results.json"), encoding="utf-8") as f:
            assert metric in json.load(f)
    capsys.readouterr()

    # the walkthrough's Python program, on this run's export, offline
    program = walkthrough_python(walkthrough_block())
    assert "runs/tiny-sample/export" in program
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(compile(program.replace("runs/tiny-sample/export", export), README, "exec"), {})
    printed = capsys.readouterr().out
    assert re.search(r"torch\.Size\(\[1, \d+, 128\]\)", printed), printed  # tiny: hidden 128

    # and directly: the export's tokenizer gives the ids of the shards' own vocab
    tok = transformers.AutoTokenizer.from_pretrained(export)
    with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    ids = tok("The lighthouse keeper wrote in his diary.")["input_ids"]
    assert vocab[ids[0]] == "[CLS]" and vocab[ids[-1]] == "[SEP]"
    assert tok.pad_token == "[PAD]" and tok.mask_token == "[MASK]"
