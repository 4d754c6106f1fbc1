"""Shard-building throughput and memory on real English prose (DESIGN section 7).

Corpora come from `make corpora` (Debian's kernel documentation as prose, in the reference
`text` layout and the `books` layout, repeated with distinct document ids). Figures:
- the floors: tokenization alone (`encode_batch_fast`, one thread) and, for raw formats,
  Punkt sentence splitting plus tokenization, in MB/s per core;
- end-to-end `bert-shards build` (seq 128, dupe 5, a 30k vocab given) with 1 and 2 workers:
  MB/s per core, instances/s, peak memory of the whole process tree;
- peak memory for several corpus sizes, and the largest corpus one 24 GB machine takes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

from bench.procmem import run_measured

# Per-core figures: the tokenizer's Rust thread pool gets one thread; it reads this variable
# when it starts, and nothing here imports `tokenizers` before this line runs.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
DATA = os.environ.get("DATA", "data")
CORPUS = f"{DATA}/corpora/kernel-docs-200mb"
REFERENCE_MB_S_PER_CORE = (
    0.22  # DESIGN section 7: the reference script, measured on this machine kind
)


def corpus_files(layout: str, mb: float) -> tuple[list[str], int]:
    """Whole copies of the corpus until at least `mb` MB; (copy directories, bytes)."""
    copies = sorted(glob.glob(f"{CORPUS}/{layout}/copy-*"))
    if not copies:
        raise SystemExit(f"no corpus under {CORPUS}/{layout}: run `make corpora` first")
    chosen, size = [], 0
    for c in copies:
        chosen.append(c)
        size += sum(os.path.getsize(p) for p in glob.glob(f"{c}/**/*.txt", recursive=True))
        if size >= mb * 1e6:
            break
    return chosen, size


def read_text(dirs: list[str]) -> list[str]:
    return [
        open(p, encoding="utf-8").read()
        for d in dirs
        for p in sorted(glob.glob(f"{d}/**/*.txt", recursive=True))
    ]


def tokenizer_floor(vocab_path: str, dirs: list[str], size: int) -> float:
    """MB/s of encode_batch_fast alone on the reference layout, one thread."""
    from pipeline.tokenize import wordpiece_tokenizer
    from schemas.vocab import Vocab

    lines = [ln for text in read_text(dirs) for ln in text.splitlines() if ln.strip()]
    tok = wordpiece_tokenizer(Vocab.load(vocab_path), True)._tokenizer
    start = time.perf_counter()
    for i in range(0, len(lines), 20_000):
        tok.encode_batch_fast(lines[i : i + 20_000], add_special_tokens=False)
    return size / 1e6 / (time.perf_counter() - start)


def raw_floor(vocab_path: str, dirs: list[str], size: int) -> float:
    """MB/s of Punkt sentence splitting plus tokenization on the books layout, one thread."""
    from pipeline.sentences import split_paragraphs
    from pipeline.tokenize import wordpiece_tokenizer
    from schemas.vocab import Vocab

    tok = wordpiece_tokenizer(Vocab.load(vocab_path), True)._tokenizer
    books = read_text(dirs)
    start = time.perf_counter()
    for text in books:
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
        tok.encode_batch_fast(split_paragraphs(paragraphs), add_special_tokens=False)
    return size / 1e6 / (time.perf_counter() - start)


def build(fmt: str, dirs: list[str], out: str, vocab: str, workers: int) -> tuple[float, int, dict]:
    cmd = [
        sys.executable,
        "-m",
        "pipeline.cli",
        "build",
        "--format",
        fmt,
        "--out",
        out,
        "--vocab",
        vocab,
        "--workers",
        str(workers),
        "--input",
        ",".join(dirs),
    ]
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    wall, peak, _ = run_measured(cmd, env)
    with open(f"{out}/manifest.json") as f:
        manifest = json.load(f)
    return wall, peak, manifest


def train_vocab(dirs: list[str], out: str) -> tuple[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "pipeline.cli",
        "vocab",
        "--format",
        "text",
        "--out",
        out,
        "--input",
        ",".join(dirs),
    ]
    wall, _, _ = run_measured(cmd)
    return f"{out}/vocab.txt", wall


def row(metric: str, value, unit: str, note: str = "") -> dict:
    return {"area": "pipeline", "metric": metric, "value": value, "unit": unit, "note": note}


def memory_fit(series: list[tuple[float, float]], machine_gib: float = 24.0) -> list[dict]:
    """Least-squares line through (MB, GiB) and the corpus that fills 90% of the machine."""
    if len(series) < 2:
        return []
    import numpy as np

    mb, gib = np.array(series).T
    slope, base = (float(x) for x in np.polyfit(mb, gib, 1))
    out = [
        row(
            "peak memory growth (DirectRunner)",
            round(slope * 1000, 2),
            "GiB per GB",
            f"fit over {len(series)} sizes; {base:.2f} GiB at zero",
        )
    ]
    if slope > 0:
        out.append(
            row(
                "largest corpus for 24 GiB (DirectRunner)",
                round((0.9 * machine_gib - base) / slope / 1000, 1),
                "GB of text",
                "90% of memory; beyond that, Dataflow",
            )
        )
    return out


def run(
    mb: float = 25, sizes: tuple[float, ...] = (), workers: tuple[int, ...] = (1, 2)
) -> list[dict]:
    tmp = tempfile.mkdtemp(prefix="bench-pipeline-")
    text_dirs, text_size = corpus_files("text", mb)
    vocab, vocab_s = train_vocab(text_dirs[:1], f"{tmp}/vocab")
    rows = [
        row(
            "vocab training (30k, kernel docs)",
            round(vocab_s, 1),
            "s",
            f"{text_size / len(text_dirs) / 1e6:.1f} MB sample, whole run incl. reading",
        )
    ]
    rows += text_rows(text_dirs, text_size, vocab, workers, tmp)
    rows += books_rows(mb, vocab, max(workers), tmp)
    rows += memory_rows(sizes, vocab, max(workers), tmp)
    return rows


def text_rows(dirs, size: int, vocab: str, workers, tmp: str) -> list[dict]:
    """The tokenizer floor, then builds of the reference format with each worker count."""
    floor = tokenizer_floor(vocab, dirs, size)
    rows = [row("floor: encode_batch_fast, 1 thread", round(floor, 2), "MB/s/core", "text")]
    walls = {}
    for w in workers:
        wall, peak, m = build("text", dirs, f"{tmp}/text-{w}", vocab, w)
        walls[w] = wall
        inst = sum(s["rows"] for s in m["shards"])
        per_core = size / 1e6 / wall / w
        rows += [
            row(
                f"text format, {w} worker(s): throughput",
                round(per_core, 3),
                "MB/s/core",
                f"{size / 1e6:.0f} MB, {wall:.0f} s wall, "
                f"{per_core / REFERENCE_MB_S_PER_CORE:.1f}x the reference per core",
            ),
            row(
                f"text format, {w} worker(s): instances",
                round(inst / wall),
                "instances/s",
                f"{inst} instances",
            ),
            row(
                f"text format, {w} worker(s): peak memory",
                round(peak / 2**30, 2),
                "GiB",
                "process tree",
            ),
        ]
    if 1 in walls and 2 in walls:
        rows.append(row("speed-up 2 workers vs 1", round(walls[1] / walls[2], 2), "x", "text"))
    return rows


def books_rows(mb: float, vocab: str, w: int, tmp: str) -> list[dict]:
    """The raw-format floor (Punkt + tokenizer), then a build of the books layout."""
    dirs, size = corpus_files("books", mb)
    floor = raw_floor(vocab, dirs, size)
    wall, _, _ = build("books", dirs, f"{tmp}/books", vocab, w)
    return [
        row("floor: Punkt + encode_batch_fast, 1 thread", round(floor, 2), "MB/s/core", "books"),
        row(
            f"books format, {w} worker(s): throughput",
            round(size / 1e6 / wall / w, 3),
            "MB/s/core",
            f"{size / 1e6:.0f} MB, {wall:.0f} s wall",
        ),
    ]


def memory_rows(sizes, vocab: str, w: int, tmp: str) -> list[dict]:
    """Peak memory of builds of several corpus sizes, and the line through them."""
    rows, series = [], []
    for size_mb in sizes:
        dirs, size = corpus_files("text", size_mb)
        wall, peak, _ = build("text", dirs, f"{tmp}/mem-{size_mb}", vocab, w)
        series.append((size / 1e6, peak / 2**30))
        rows.append(
            row(
                f"peak memory, {size / 1e6:.0f} MB text, {w} workers",
                round(peak / 2**30, 2),
                "GiB",
                f"{wall:.0f} s wall",
            )
        )
    return rows + memory_fit(series)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=25, help="corpus size for throughput")
    ap.add_argument(
        "--sizes", type=float, nargs="*", default=[], help="corpus sizes (MB) for the memory series"
    )
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    args = ap.parse_args(argv)
    for r in run(args.mb, tuple(args.sizes), tuple(args.workers)):
        print(f"{r['metric']:<50} {r['value']:>10} {r['unit']:<12} {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
