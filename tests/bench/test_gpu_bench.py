"""bench/gpu.sh and bench.gpu_bench: the CPU fallback runs end to end and writes sane JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.gpu_bench import GPU_CASES, RESULT_NAME, flops_per_step, table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_cpu_fallback_writes_sane_json(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    proc = subprocess.run(
        [os.path.join(ROOT, "bench", "gpu.sh"), "--cpu", "--steps", "2", "--warmup", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU fallback" in proc.stdout
    assert "tiny-128" in proc.stdout  # the table
    report = json.loads((out / RESULT_NAME).read_text())
    assert report["cpu_fallback"] is True
    assert report["peak_bf16_tflops"] is None
    assert report["steps"] == 2 and report["warmup"] == 1
    row, packed = report["results"]
    assert "error" not in row and "error" not in packed
    assert row["model"] == "tiny" and row["precision"] == "fp32" and row["compile"] is False
    assert row["pack"] is False and row["rows_per_sequence"] == 1
    # Packed: full-width sequences, (almost) no padding, at least one row in each. (The
    # synthetic rows are mostly full length: the padded batches hardly pad either.)
    assert packed["case"] == "tiny-128-packed" and packed["pack"] is True
    assert packed["tokens_per_s"] / packed["seq_per_s"] == 128
    assert packed["padding_share"] < 0.05
    assert packed["rows_per_sequence"] >= 1 and packed["rows_per_s"] >= packed["seq_per_s"]
    assert packed["real_tflops_per_s"] > 0 and packed["mfu_real_tokens"] is None
    assert row["seq"] == 128 and row["batch"] == 8 and row["steps"] == 2
    assert row["parameters"] > row["non_embedding_parameters"] > 0
    assert row["step_ms"] > 0 and row["seq_per_s"] > 0 and row["tflops_per_s"] > 0
    assert row["real_tokens_per_s"] <= row["tokens_per_s"]
    # tokens per sequence: a padded batch is at most the shards' length
    assert 8 <= row["tokens_per_s"] / row["seq_per_s"] <= row["seq"]
    assert 0 <= row["padding_share"] < 1
    assert 0 <= row["loader_wait_share"] < 1
    assert row["mfu"] is None and row["mfu_model_formula"] is None  # no MFU on a CPU
    assert row["peak_mem_gib"] is None


def test_gpu_cases_and_flops():
    names = {c.name for c in GPU_CASES}
    assert names == {
        "base-128",
        "base-128-compile",
        "base-512",
        "base-512-compile",
        "large-128",
        "large-128-compile",
        "base-128-packed",
        "base-128-packed-compile",
        "base-512-packed",
        "base-512-packed-compile",
    }
    # base: 85M non-embedding weights -> about 6 x 85M FLOPs per token at seq 128
    per_token = flops_per_step(85_000_000, 12, 768, 128, 128) / 128
    assert 6 * 85e6 < per_token < 6 * 85e6 * 1.05
    row = {
        "case": "base-128",
        "precision": "bf16",
        "batch": 256,
        "step_ms": 100.0,
        "seq_per_s": 2560.0,
        "tokens_per_s": 327680.0,
        "tflops_per_s": 170.0,
        "mfu": 0.5,
        "peak_mem_gib": 20.0,
        "loader_wait_share": 0.01,
    }
    assert "50.0%" in table([row])
