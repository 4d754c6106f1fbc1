"""Readers of the shards other than ours (docs/design.md, "Reading"): polars, an Arrow
implementation of its own (Rust), reads every shard of a set, and Hugging Face `datasets`
loads a shard set's folder as it is, in shard order, with the same rows as pyarrow's, kept in
its cache or streamed. `datasets.Dataset.from_file`, which reads Arrow's stream format, refuses
a shard (the docs say so).

`datasets` brings pandas, which Beam imports whenever it can, in every process that imports it
(docs/benchmarks.md): the Makefile installs `datasets` into its own folder beside the venv
(`HF_DATASETS_DIR`), put on the path of this test's child process alone."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from tests.helpers import ROOT

HF_DATASETS_DIR = os.path.join(sys.prefix, "hf-datasets")

SCRIPT = r"""
import json, sys
import datasets

cache, outs = sys.argv[1], sys.argv[2:]
for out in outs:
    kept = datasets.load_dataset(out, cache_dir=cache)
    streamed = datasets.load_dataset(out, streaming=True)
    first = sorted(__import__("glob").glob(out + "/shards/*.arrow"))[0]
    try:
        datasets.Dataset.from_file(first)
        from_file = "read"
    except Exception as e:
        from_file = type(e).__name__
    print(json.dumps({
        "splits": sorted(kept),
        "kept": kept["train"].to_list(),
        "streamed": list(streamed["train"]),
        "features": {k: str(v) for k, v in kept["train"].features.items()},
        "from_file": from_file,
    }))
"""


def pyarrow_rows(out: str) -> list[dict]:
    """Every row of the set in shard order, as pyarrow reads the shards."""
    files = sorted(glob.glob(os.path.join(out, "shards", "*.arrow")))
    return pa.concat_tables(pa.ipc.open_file(f).read_all() for f in files).to_pylist()


@pytest.mark.parametrize("name", ["sample_shards", "synthetic_shards", "wide_shards"])
def test_polars_reads_every_shard_as_pyarrow_does(request, name):
    polars = pytest.importorskip("polars", reason="polars is in the dev extra: make venv")
    out = request.getfixturevalue(name)
    files = sorted(glob.glob(os.path.join(out, "shards", "*.arrow")))
    assert len(files) > 1
    rows = [r for f in files for r in polars.read_ipc(f).to_dicts()]
    assert rows == pyarrow_rows(out)
    counted = polars.scan_ipc(os.path.join(out, "shards", "*.arrow")).select(polars.len())
    assert counted.collect().item() == len(rows)
    ids = polars.read_ipc(files[0]).schema["input_ids"]
    assert str(ids.inner) == ("UInt32" if name == "wide_shards" else "UInt16")


def test_hugging_face_datasets_loads_the_sets_folder(sample_shards, synthetic_shards, tmp_path):
    """Both sets in one child process (importing `datasets` and pandas takes seconds)."""
    assert os.path.isdir(HF_DATASETS_DIR), (
        f"{HF_DATASETS_DIR} is missing: `make venv` installs datasets there"
    )
    outs = [sample_shards, synthetic_shards]
    home = tmp_path / "hf"
    env = {
        **os.environ,
        "PYTHONPATH": HF_DATASETS_DIR,
        "HF_HOME": str(home),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "cache"), *outs],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for out, got in zip(outs, printed, strict=True):
        rows = pyarrow_rows(out)
        assert len(rows) > 1000
        assert got["splits"] == ["train"]
        assert got["kept"] == rows
        assert got["streamed"] == rows
        assert got["features"]["input_ids"] == "List(Value('uint16'))"
        assert got["features"]["is_random_next"] == "Value('bool')"
        assert got["from_file"] == "ArrowInvalid"
