"""Export speed against the set's size and against the build that made the set, and TensorFlow's
own reading of the TFRecord export.

Builds one set (1 worker, seq 128, dupe 5) from the real corpus `make corpora` fetches
(DATA/corpora/kernel-docs, books and text; the bundled sample/ when it is absent, and the row
says so), then exports it to each format in a fresh process. Per format: CPU seconds (the
export's whole process: validation, reading, padding, encoding, hashing, writing), MB per CPU-s
of the set's shard bytes, the export's CPU against the build's (target: at most 20%), its peak
memory beside the largest shard and the bytes written. When the bench's TensorFlow environment
exists (`bench.reference.sides.REFERENCE_ENV`: $REFERENCE_ENV, else DATA/bench-env, made by
`make bench`), `bench/export_tf_check.py` reads the TFRecords with `run_pretraining.py`'s own
`input_fn_builder` there and every feature of every row is compared with the Arrow rows. The
set and the exports are written in a temporary folder under $BENCH_TMP (else the system's).

    python -m bench.export_bench [--data data] [--keep DIR] [--reference-env DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from bench.procmem import run_measured
from bench.reference.sides import REFERENCE_ENV, env_python
from bench.rows import rows_for
from schemas.reader import ShardSet
from schemas.shard import ShardColumns

FORMATS = ("hdf5", "tfrecord", "mds")
TARGET_SHARE = 0.20  # export CPU at most this share of the build's
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_row = rows_for("export", digits=3)


def source_inputs(data: str) -> tuple[str, str]:
    """The build's --input and what it is."""
    corpus = os.path.join(data, "corpora", "kernel-docs")
    if os.path.isdir(os.path.join(corpus, "books")) and os.path.isdir(os.path.join(corpus, "text")):
        return f"books:{corpus}/books,text:{corpus}/text", "kernel-docs (real text, books + text)"
    sample = os.path.join(ROOT, "sample")
    return f"books:{sample}/books,text:{sample}/text", "sample/ (no real corpus: make corpora)"


def build(inputs: str, out: str):
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs, "--out", out]
    cmd += ["--workers", "1", "--max-seq-length", "128", "--dupe-factor", "5", "--num-shards", "8"]
    return run_measured(cmd, {**os.environ, "RAYON_NUM_THREADS": "1"})


def export(out: str, dest: str, fmt: str):
    cmd = [sys.executable, "-m", "schemas.cli", "export", out, dest, "--format", fmt]
    return run_measured(cmd)


def expected(out: str) -> dict[str, np.ndarray]:
    """The set's rows in run_pretraining.py's fixed-length layout, one row at a time from the
    Arrow offsets (not through the export's own padding)."""
    ss = ShardSet.open(out)
    seq, preds = ss.shard_config.max_seq_length, ss.shard_config.max_predictions_per_seq
    n = ss.num_rows
    want = {
        "input_ids": np.zeros((n, seq), np.int32),
        "input_mask": np.zeros((n, seq), np.int32),
        "segment_ids": np.zeros((n, seq), np.int32),
        "masked_lm_positions": np.zeros((n, preds), np.int32),
        "masked_lm_ids": np.zeros((n, preds), np.int32),
        "masked_lm_weights": np.zeros((n, preds), np.float32),
        "next_sentence_labels": np.zeros((n, 1), np.int32),
    }
    r = 0
    for i in range(len(ss)):
        c = ShardColumns.from_table(ss.table(i))
        off, moff = c.input_offsets, c.masked_offsets
        for j in range(c.num_rows):
            a, b, m, e = off[j], off[j + 1], moff[j], moff[j + 1]
            want["input_ids"][r, : b - a] = c.input_ids[a:b]
            want["input_mask"][r, : b - a] = 1
            want["segment_ids"][r, c.segment_b_start[j] : b - a] = 1
            want["masked_lm_positions"][r, : e - m] = c.masked_positions[m:e]
            want["masked_lm_ids"][r, : e - m] = c.masked_labels[m:e]
            want["masked_lm_weights"][r, : e - m] = 1.0
            want["next_sentence_labels"][r, 0] = int(c.is_random_next[j])
            r += 1
    return want


def tf_parity(out: str, dest: str, work: str, env_dir: str = REFERENCE_ENV) -> dict:
    """TensorFlow's reading of the TFRecord export against the rows, in the bench environment
    `env_dir` (the reference's); a bench row."""
    python = env_python(env_dir)
    if python is None:
        note = f"no bench environment in {env_dir} (bench/reference_env.sh did not finish)"
        return _row("tfrecord read by run_pretraining.input_fn", "not run", "", note)
    ss = ShardSet.open(out)
    cfg = ss.shard_config
    files = sorted(os.path.join(dest, f) for f in os.listdir(dest) if f.endswith(".tfrecord"))
    npz = os.path.join(work, "tf.npz")
    cmd = [python, os.path.join(ROOT, "bench", "export_tf_check.py"), "--out", npz]
    cmd += ["--seq", str(cfg.max_seq_length), "--preds", str(cfg.max_predictions_per_seq)]
    cmd += ["--rows", str(ss.num_rows), *files]
    run_measured(cmd, {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    got = dict(np.load(npz))
    want = expected(out)
    differ = [k for k in want if k not in got or not np.array_equal(got[k], want[k])]
    rows = len(got.get("input_ids", []))
    note = (
        f"all {len(want)} features of all {ss.num_rows:,} rows equal the Arrow rows"
        if not differ and rows == ss.num_rows
        else f"DIFFER: {', '.join(differ) or 'row count'} ({rows:,} of {ss.num_rows:,} rows read)"
    )
    return _row("tfrecord read by run_pretraining.input_fn", rows, "rows", note)


def format_rows(
    fmt: str, out: str, dest: str, build_cpu: float, set_bytes: int, largest: int
) -> list[dict]:
    """One format's export of the set in `out` into `dest`: its CPU, speed, share of the build's
    CPU and peak memory."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    m = export(out, dest, fmt)
    with open(os.path.join(dest, "export.json")) as f:
        summary = json.load(f)
    written = sum(e["bytes"] for e in summary["files"])
    share = m.cpu / build_cpu
    verdict = "meets" if share <= TARGET_SHARE else "MISSES"
    return [
        _row(
            f"{fmt} export",
            m.cpu,
            "CPU-s",
            f"{len(summary['files'])} files, {written / 1e6:.1f} MB written; {m.wall:.1f} s wall",
        ),
        _row(f"{fmt} export speed", set_bytes / 1e6 / m.cpu, "MB/CPU-s", "shard bytes"),
        _row(
            f"{fmt} export / build",
            100 * share,
            "% CPU",
            f"{verdict} the target of at most {100 * TARGET_SHARE:.0f}%",
        ),
        _row(
            f"{fmt} export peak memory",
            m.peak / 1e6,
            "MB",
            f"{m.memory}; largest shard {largest / 1e6:.1f} MB (the process, Python and numpy "
            "included)",
        ),
    ]


def work_dir(keep: str | None = None) -> str:
    """Where the set and its exports are written: `keep`, else a new folder under $BENCH_TMP
    (the system's temporary folder without it)."""
    return keep or tempfile.mkdtemp(prefix="export-bench-", dir=os.environ.get("BENCH_TMP"))


def run(data: str = "data", keep: str | None = None, env_dir: str = REFERENCE_ENV) -> list[dict]:
    inputs, what = source_inputs(data)
    work = work_dir(keep)
    os.makedirs(work, exist_ok=True)
    try:
        out = os.path.join(work, "set")
        if os.path.exists(out):
            shutil.rmtree(out)
        built = build(inputs, out)
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        set_bytes = sum(s["bytes"] for s in manifest["shards"])
        largest = max(s["bytes"] for s in manifest["shards"])
        rows_n = sum(s["rows"] for s in manifest["shards"])
        rows = [
            _row(
                "build of the exported set (1 worker)",
                built.cpu,
                "CPU-s",
                f"{what}; {rows_n:,} rows, {len(manifest['shards'])} shards, "
                f"{set_bytes / 1e6:.1f} MB of shards; {built.wall:.1f} s wall",
            )
        ]
        checked = run_measured([sys.executable, "-m", "schemas.cli", "validate", out])
        rows.append(
            _row(
                "validate alone (part of every export)",
                checked.cpu,
                "CPU-s",
                "with sha256, as its own command (start-up included)",
            )
        )
        for fmt in FORMATS:
            rows += format_rows(fmt, out, os.path.join(work, fmt), built.cpu, set_bytes, largest)
        rows.append(tf_parity(out, os.path.join(work, "tfrecord"), work, env_dir))
        return rows
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.environ.get("DATA", "data"))
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep the set and exports")
    ap.add_argument(
        "--reference-env", default=REFERENCE_ENV, help=f"TensorFlow's environment ({REFERENCE_ENV})"
    )
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    rows = run(args.data, args.keep, args.reference_env)
    for r in rows:
        print(f"{r['metric']:<44} {r['value']!s:>12} {r['unit']:<10} {r['note']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
