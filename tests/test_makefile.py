"""The Makefile, the stable interface: every path it passes is quoted (a space in OUT must not
split it), and `make pretrain` builds the sample only into the sample's own OUT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(*args: str, dry: bool = True) -> subprocess.CompletedProcess:
    """Run make in the repo on this interpreter's venv; `-o STAMP` keeps make from
    (re)installing it, whatever the stamp's age."""
    venv = sys.prefix
    cmd = ["make", "--no-print-directory", f"VENV={venv}", "-o", f"{venv}/.installed-stamp"]
    cmd += ["-n"] if dry else []
    return subprocess.run(cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=120)


SPACED = {
    "OUT": "out/with space",
    "INPUT": "text:my corpus/*.txt",
    "VOCAB": "my vocab.txt",
    "RUN": "runs/my run",
    "DATA": "glue data/SST-2",
    "CKPT": "runs/my run/last.pt",
    "EXPORT": "export/my model",
    "TEMP": "gs://bucket/my tmp",
}


@pytest.mark.parametrize(
    "target, expected",
    [
        (
            "shards",
            ["--input 'text:my corpus/*.txt'", "--out 'out/with space'", "--vocab 'my vocab.txt'"],
        ),
        ("vocab", ["--input 'text:my corpus/*.txt'", "--out 'out/with space'"]),
        ("validate", ["validate 'out/with space'"]),
        ("inspect", ["inspect 'out/with space'"]),
        ("finetune", ["--data 'glue data/SST-2'", "--ckpt 'runs/my run/last.pt'"]),
        ("export", ["--ckpt 'runs/my run/last.pt'", "--out 'export/my model'"]),
    ],
)
def test_paths_with_spaces_are_quoted(target, expected):
    r = make(target, *(f"{k}={v}" for k, v in SPACED.items()))
    assert r.returncode == 0, r.stderr
    for piece in expected:
        assert piece in r.stdout, (piece, r.stdout)


def test_dataflow_temp_location_is_quoted():
    r = make("shards", "RUNNER=DataflowRunner", f"TEMP={SPACED['TEMP']}", f"OUT={SPACED['OUT']}")
    assert r.returncode == 0, r.stderr
    assert "--temp_location 'gs://bucket/my tmp'" in r.stdout


def test_pretrain_quotes_out_and_run_and_checks_the_quoted_manifest():
    r = make("pretrain", f"OUT={SPACED['OUT']}", f"RUN={SPACED['RUN']}")
    assert r.returncode == 0, r.stderr
    assert "test -f 'out/with space/manifest.json'" in r.stdout
    assert "--shards 'out/with space' --run 'runs/my run'" in r.stdout


def test_bench_quotes_data():
    r = make("bench", "DATA=my data")
    assert r.returncode == 0, r.stderr
    assert "test -d 'my data/corpora/kernel-docs-200mb'" in r.stdout


@pytest.mark.parametrize(
    "out, model, run",
    [
        ("out/sample", "tiny", "runs/tiny-sample"),
        ("out/mycorpus", "base", "runs/base-mycorpus"),
        ("out/my corpus/", "tiny", "runs/tiny-my corpus"),
    ],
)
def test_run_follows_out_and_model(out, model, run):
    r = make("export", f"OUT={out}", f"MODEL={model}")
    assert r.returncode == 0, r.stderr
    assert f"--ckpt '{run}/last.pt' --out '{run}/export'" in r.stdout


def test_default_pretrain_builds_the_sample_into_out_sample_only():
    r = make("pretrain")
    assert r.returncode == 0, r.stderr
    assert "test -f 'out/sample/manifest.json' || make shards OUT='out/sample'" in r.stdout


def test_pretrain_without_a_manifest_stops_and_builds_nothing(tmp_path):
    out = tmp_path / "my corpus"
    r = make("pretrain", f"OUT={out}", "STEPS=1", dry=False)
    assert r.returncode != 0
    assert "no shard set" in r.stderr and "make shards INPUT=" in r.stderr, r.stderr
    assert f"OUT='{out}'" in r.stderr
    assert "pipeline.cli build" not in r.stdout + r.stderr
    assert not out.exists()


def test_pretrain_with_other_input_does_not_build_into_the_default_out():
    """The default OUT with the user's INPUT is not the sample: no build on the way either."""
    r = make("pretrain", "INPUT=text:mine/*.txt")
    assert r.returncode == 0, r.stderr
    assert "|| make shards" not in r.stdout and "pipeline.cli build" not in r.stdout
    assert "no shard set" in r.stdout  # the dry run prints the refusal's recipe line
