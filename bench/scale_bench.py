"""The scale series: one local build per corpus size, measured for memory, disk and time.

    python -m bench.scale_bench --sizes 200 500 1000 2000 --workers 1 2
    python -m bench.scale_bench --sizes 200 2000 --trained-vocab

Each size is the kernel-docs prose repeated (whole copies under distinct paths, so distinct
document ids) to N MB in the reference format. Per run: wall seconds, CPU seconds of the whole
process tree, MB of text per CPU-second, the peak memory of the process tree (PSS where the
kernel gives it, else RSS: `bench.procmem`; Beam's workers are subprocesses), the peak size of
the build's temporary area and the final shard bytes. MB are 10^6 bytes, as everywhere in the
bench; memory and disk are in GiB (2^30 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from bench.procmem import dir_bytes, measure_build
from bench.rows import row as bench_row
from pipeline.build import BuildConfig

MB = 1e6  # decimal, as the other areas; GiB = 2**30 for memory and disk
GIB = 1 << 30
BUCKET_TOKENS = next(f.default for f in fields(BuildConfig) if f.name == "bucket_tokens")
KERNEL_DOCS = "debian/linux-doc/usr/share/doc/linux-doc-6.1/Documentation"


def corpus(data: Path, mb: int) -> Path:
    """DATA/corpora/kernel-docs-<mb>mb/text, made on first use (hard-linked copies)."""
    out = data / "corpora" / f"kernel-docs-{mb}mb"
    if not (out / "text").is_dir():
        cmd = [sys.executable, "-m", "bench.corpora", "--input", str(data / KERNEL_DOCS)]
        subprocess.run(cmd + ["--out", str(out), "--repeat-to-mb", str(mb)], check=True)
    return out / "text"


def run_one(text: Path, out: Path, workers: int, vocab: str | None, bucket_tokens: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", f"text:{text}"]
    cmd += ["--out", str(out), "--workers", str(workers), "--max-seq-length", "128"]
    cmd += ["--dupe-factor", "5", "--overwrite", "--bucket-tokens", str(bucket_tokens)]
    if vocab:
        cmd += ["--vocab", vocab]
    got = measure_build(cmd, out / "shards" / ".building")
    result = result_of(got, dir_bytes(text), dir_bytes(out / "shards"))
    result.update(workers=workers, vocab="given" if vocab else "trained")
    result["bucket_tokens"] = bucket_tokens
    shutil.rmtree(out, ignore_errors=True)
    return result


def result_of(got, text_bytes: int, shard_bytes: int) -> dict:
    """One build's figures from its measurement: MB (10^6 bytes) of text, and GiB of memory
    and disk."""
    # the build and the workers it reaped; the polled tree figure is a floor when it did not
    cpu = max(got.reaped_cpu, got.tree_cpu)
    return {
        "mb": round(text_bytes / MB, 1),
        "wall_s": round(got.wall, 1),
        "cpu_s": round(cpu, 1),
        "mb_per_cpu_s": round(text_bytes / MB / max(cpu, 1e-9), 3),
        "memory": got.memory,
        "peak_gib": round(got.peak / GIB, 3),
        "peak_process_gib": round(got.peak_one / GIB, 3),
        "peak_tmp_gib": round(got.peak_sample / GIB, 3),
        "shard_gib": round(shard_bytes / GIB, 3),
        "tmp_over_shards": round(got.peak_sample / max(shard_bytes, 1), 2),
    }


def note_of(got: dict) -> str:
    """The note of a scale row."""
    return (
        f"{got['mb']} MB (10^6 bytes), {got['workers']} worker(s), vocab {got['vocab']}: "
        f"{got['wall_s']} s wall, {got['cpu_s']} CPU s ({got['mb_per_cpu_s']} MB/CPU-s), "
        f"memory as {got['memory']}: peak process {got['peak_process_gib']} GiB, "
        f"peak temp {got['peak_tmp_gib']} GiB ({got['tmp_over_shards']}x the shards)"
    )


def run(data: str = "data", sizes=(200, 500, 1000, 2000), workers=(2,), vocab=None) -> list[dict]:
    """`make bench`'s scale series, as rows of bench.run's table (one per size and workers)."""
    rows = []
    for mb in sizes:
        text = corpus(Path(data), mb)
        for w in workers:
            got = run_one(text, Path("out/bench-scale"), w, vocab, BUCKET_TOKENS)
            metric = f"peak memory, {mb} MB, {w} worker(s)"
            rows.append(bench_row(metric, got["peak_gib"], "GiB", note_of(got), "scale"))
            print(json.dumps(got), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("DATA", "data"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 500, 1000, 2000])
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--bucket-tokens", type=int, nargs="+", default=[BUCKET_TOKENS])
    ap.add_argument("--vocab", default=None, help="a vocab.txt to build with (else trained)")
    ap.add_argument("--scratch", default="out/bench-scale")
    ap.add_argument("--json", default="bench/results/scale.json")
    args = ap.parse_args(argv)
    data = Path(args.data)
    rows = []
    for mb in args.sizes:
        text = corpus(data, mb)
        for workers in args.workers:
            for bucket_tokens in args.bucket_tokens:
                row = run_one(text, Path(args.scratch), workers, args.vocab, bucket_tokens)
                rows.append(row)
                print(json.dumps(row), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
