"""The scale series: one local build per corpus size, measured for memory, disk and time.

    python -m bench.scale_bench --sizes 200 500 1000 2000 --workers 1 2
    python -m bench.scale_bench --sizes 200 2000 --trained-vocab

Each size is the kernel-docs prose repeated (whole copies under distinct paths, so distinct
document ids) to N MB in the reference format. Per run: wall seconds, CPU seconds of the whole
process tree, MB/s per CPU-second, the peak resident memory of the process tree (Beam's workers
are subprocesses), the peak size of the build's temporary area and the final shard bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.procmem import dir_bytes, measure_build
from bench.rows import row as bench_row

MB = 1 << 20
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
    # the build and the workers it reaped; the polled tree figure is a floor when it did not
    cpu = max(got.reaped_cpu, got.tree_cpu)
    text_bytes = dir_bytes(text)
    shard_bytes = dir_bytes(out / "shards")
    result = {
        "mb": round(text_bytes / MB, 1),
        "workers": workers,
        "vocab": "given" if vocab else "trained",
        "bucket_tokens": bucket_tokens,
        "wall_s": round(got.wall, 1),
        "cpu_s": round(cpu, 1),
        "mb_per_cpu_s": round(text_bytes / MB / max(cpu, 1e-9), 3),
        "peak_rss_gib": round(got.peak / (1 << 30), 3),
        "peak_process_gib": round(got.peak_one / (1 << 30), 3),
        "peak_tmp_gib": round(got.peak_sample / (1 << 30), 3),
        "shard_gib": round(shard_bytes / (1 << 30), 3),
        "tmp_over_shards": round(got.peak_sample / max(shard_bytes, 1), 2),
    }
    shutil.rmtree(out, ignore_errors=True)
    return result


def run(data: str = "data", sizes=(200, 500, 1000, 2000), workers=(2,), vocab=None) -> list[dict]:
    """`make bench`'s scale series, as rows of bench.run's table (one per size and workers)."""
    rows = []
    for mb in sizes:
        text = corpus(Path(data), mb)
        for w in workers:
            got = run_one(text, Path("out/bench-scale"), w, vocab, 4_000_000)
            note = (
                f"{got['mb']} MB, {w} worker(s), vocab {got['vocab']}: {got['wall_s']} s wall, "
                f"{got['cpu_s']} CPU s, peak process {got['peak_process_gib']} GiB, "
                f"peak temp {got['peak_tmp_gib']} GiB ({got['tmp_over_shards']}x the shards)"
            )
            metric = f"peak memory, {mb} MB, {w} worker(s)"
            rows.append(bench_row(metric, got["peak_rss_gib"], "GiB", note, "scale"))
            print(json.dumps(got), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("DATA", "data"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 500, 1000, 2000])
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--bucket-tokens", type=int, nargs="+", default=[4_000_000])
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
