"""`bert-schemas` needs neither Beam nor torch (docs/design.md): in a fresh interpreter where
importing Beam, torch, the tokenizer, NLTK, `pipeline` or `model` fails, every `schemas` module
imports, and `validate`, `inspect` and `export` run on a finished set. The blocker records every
attempt, so an import caught by a `try` is found too."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT

BLOCKER = r"""
import importlib, importlib.abc, pkgutil, sys

tried = []


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            tried.append(name)
            raise ImportError(f"{name} is blocked")
        return None


sys.meta_path.insert(0, Blocker())
"""

SCRIPT = (
    'BLOCKED = ("apache_beam", "torch", "tokenizers", "nltk", "pipeline", "model", "transformers")'
    + BLOCKER
    + r"""
import schemas
from schemas.cli import main

for info in pkgutil.walk_packages(schemas.__path__, "schemas."):
    importlib.import_module(info.name)
out, dest = sys.argv[1], sys.argv[2]
for args in (
    ["validate", out],
    ["inspect", out, "--n", "2"],
    ["export", out, dest + "/tf", "--format", "tfrecord"],
    ["export", out, dest + "/mds", "--format", "mds"],
    ["export", out, dest + "/h5", "--format", "hdf5"],
):
    assert main(args) == 0, args
    print("ran", args[0], flush=True)
print("tried", sorted(tried))
"""
)


def run_blocked(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_validate_inspect_and_export_run_without_beam_or_torch(sample_shards, tmp_path):
    done = run_blocked(SCRIPT, sample_shards, str(tmp_path))
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("ran ")] == [
        "ran validate",
        "ran inspect",
    ] + ["ran export"] * 3
    assert lines[-1] == "tried []"
    for name in ("tf", "mds", "h5"):
        assert "export.json" in os.listdir(tmp_path / name)


# `bert-shards`' entry point, for the commands it forwards to `bert-schemas`: Beam, torch, the
# tokenizer and NLTK blocked, the pipeline's own modules allowed
FORWARDED = (
    'BLOCKED = ("apache_beam", "torch", "tokenizers", "nltk", "model", "transformers")'
    + BLOCKER
    + r"""
from pipeline.shell.entry import main

out, dest = sys.argv[1], sys.argv[2]
for args in (
    ["validate", out, "--no-hash"],
    ["inspect", out, "--n", "1"],
    ["export", out, dest + "/tf", "--format", "tfrecord"],
):
    assert main(args) == 0, args
    print("ran", args[0], flush=True)
print("tried", sorted(tried), sorted(m for m in sys.modules if m.startswith("pipeline.")))
"""
)


def test_bert_shards_forwards_validate_inspect_and_export_without_beam(sample_shards, tmp_path):
    """What `bert-shards validate|inspect|export` run is `bert-schemas`' code: they start
    without importing Beam or the pipeline's stages."""
    lines = run_blocked(FORWARDED, sample_shards, str(tmp_path)).stdout.splitlines()
    ran = [line for line in lines if line.startswith("ran ")]
    assert ran == ["ran validate", "ran inspect", "ran export"]
    assert lines[-1] == "tried [] ['pipeline.shell', 'pipeline.shell.entry']"
    assert "export.json" in os.listdir(tmp_path / "tf")
