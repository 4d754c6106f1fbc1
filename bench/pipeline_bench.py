"""Shard-building speed and fidelity on real English prose, beside the reference, in one run.

Two corpora in the reference `text` layout (a sentence a line, a blank line between documents),
repeated as whole copies with distinct document ids: the kernel documentation reduced to prose
(`make corpora`) and Wikipedia prose rendered from the gensim exports (`bench/reference_corpora`).
For each, with a vocab trained on one copy (`bert-shards vocab`, 30k pieces at most) that both
sides use, seq 128, dupe 5, masked LM 0.15, 20 predictions:

- the floor: HF `tokenizers` `encode_batch_fast` alone, one thread, on the slice below;
- the reference, `create_pretraining_data.py` of bert-tensorflow 1.0.4 (`bench/reference.py` in
  the environment `bench/reference_env.sh` makes), on a slice of whole files (`--slice-mb`, 20):
  it holds its corpus in memory and is slow; if it is not installed, no ratio is printed;
- our build (`bert-shards build`, the CLI as it is) on the same slice with `--seeds` seeds: the
  fidelity table (`bench/fidelity.py`);
- our build on at least `--mb` MB (200) with each worker count.

Rates are MB of input text per CPU-second (user + sys of the whole process tree, children
included: the machine is shared, so wall time is noisy; wall is reported too). The ratio to the
reference and the share of the floor are quotients of those rates, all from this one run.
Then the books layout against Punkt + tokenizer, and peak memory for several corpus sizes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.procmem import CLK_TCK, PAGE, proc_stats, tree

# Per-core figures: the tokenizer's Rust thread pool gets one thread; it reads this variable
# when it starts, and nothing here imports `tokenizers` before this line runs.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
DATA = os.environ.get("DATA", "data")
CORPUS = f"{DATA}/corpora/kernel-docs-200mb"
REFERENCE_ENV = os.environ.get("REFERENCE_ENV", f"{DATA}/bench-env")
RUNNER = Path(__file__).with_name("reference.py")
SEED = 12345


@dataclass(frozen=True)
class BenchConfig:
    mb: float = 200  # our build: at least this much text
    slice_mb: float = 20  # the reference (and the fidelity builds): whole files up to this
    workers: tuple[int, ...] = (1, 2)  # our build on `mb`, once per worker count
    seeds: int = 4  # fidelity builds on the slice; 2+ measure the seed-to-seed spread
    corpora: tuple[str, ...] = ("kernel-docs", "wikipedia")
    books_mb: float = 25  # the books-layout build (kernel docs)
    sizes: tuple[float, ...] = ()  # peak-memory series

    def __post_init__(self) -> None:
        if self.mb <= 0 or self.slice_mb <= 0 or self.seeds < 1 or not self.workers:
            raise ValueError("--mb and --slice-mb must be > 0, --seeds >= 1, --workers not empty")
        unknown = set(self.corpora) - set(TEXT_CORPORA)
        if unknown:
            raise ValueError(f"unknown corpora {sorted(unknown)}: choose from {TEXT_CORPORA}")


# --- measuring a process tree -------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    wall: float  # seconds
    cpu: float  # user + sys seconds of the process and all its descendants
    peak: int  # bytes resident in the tree at its largest
    output: str


def run_measured(cmd: list[str], env: dict | None = None) -> Measured:
    """Run `cmd`; its wall time, the CPU time of its process tree and the tree's peak memory.

    CPU is the larger of two counts: the kernel's for reaped descendants (getrusage of
    children) and the sum of every process seen in the tree, polled from /proc (which also
    sees workers that outlive their parent and are never reaped by it).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peak, seen, done = 0, {}, threading.Event()

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            table = proc_stats()
            pids = tree(proc.pid, table)
            peak = max(peak, sum(int(table[p][21]) * PAGE for p in pids))
            seen.update({p: (int(table[p][11]) + int(table[p][12])) / CLK_TCK for p in pids})
            time.sleep(0.2)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    done.set()
    watcher.join()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out.decode()[-3000:]}")
    return Measured(wall, max(reaped, sum(seen.values())), peak, out.decode())


# --- corpora ------------------------------------------------------------------------------------

TEXT_CORPORA = ("kernel-docs", "wikipedia")


def text_root(corpus: str) -> str:
    """The folder of copies (copy-000/ ...) of a corpus in the text layout; built if needed."""
    if corpus == "wikipedia":
        from bench import reference_corpora

        return str(reference_corpora.build(DATA, 200.0))
    return f"{CORPUS}/text"


def _txt_files(folder: str) -> list[str]:
    return sorted(glob.glob(f"{folder}/**/*.txt", recursive=True))


def corpus_files(layout: str, mb: float, root: str | None = None) -> tuple[list[str], int]:
    """Whole copies of the corpus until at least `mb` MB; (copy directories, bytes)."""
    copies = sorted(glob.glob(f"{root or f'{CORPUS}/{layout}'}/copy-*"))
    if not copies:
        raise SystemExit(f"no corpus under {root or CORPUS}: run `make corpora` first")
    chosen, size = [], 0
    for c in copies:
        chosen.append(c)
        size += sum(os.path.getsize(p) for p in _txt_files(c))
        if size >= mb * 1e6:
            break
    return chosen, size


def slice_files(root: str, mb: float) -> tuple[list[str], int]:
    """Whole files, copy after copy, until at least `mb` MB; (files, bytes)."""
    chosen, size = [], 0
    for path in _txt_files(root):
        chosen.append(path)
        size += os.path.getsize(path)
        if size >= mb * 1e6:
            break
    return chosen, size


def read_text(paths: list[str]) -> list[str]:
    """The text of files, or of every .txt under folders."""
    files = [f for p in paths for f in ([p] if os.path.isfile(p) else _txt_files(p))]
    return [open(p, encoding="utf-8").read() for p in files]


# --- floors ---------------------------------------------------------------------------------


def tokenizer_floor(vocab_path: str, paths: list[str], size: int) -> float:
    """MB per CPU-second of encode_batch_fast alone on text-layout lines, one thread."""
    from pipeline.tokenize import wordpiece_tokenizer
    from schemas.vocab import Vocab

    lines = [ln for text in read_text(paths) for ln in text.splitlines() if ln.strip()]
    tok = wordpiece_tokenizer(Vocab.load(vocab_path), True)._tokenizer
    start = time.process_time()
    for i in range(0, len(lines), 20_000):
        tok.encode_batch_fast(lines[i : i + 20_000], add_special_tokens=False)
    return size / 1e6 / (time.process_time() - start)


def raw_floor(vocab_path: str, dirs: list[str], size: int) -> float:
    """MB per CPU-second of Punkt splitting plus tokenization on the books layout, one thread."""
    from pipeline.sentences import split_paragraphs
    from pipeline.tokenize import wordpiece_tokenizer
    from schemas.vocab import Vocab

    tok = wordpiece_tokenizer(Vocab.load(vocab_path), True)._tokenizer
    books = read_text(dirs)
    start = time.process_time()
    for text in books:
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
        tok.encode_batch_fast(split_paragraphs(paragraphs), add_special_tokens=False)
    return size / 1e6 / (time.process_time() - start)


# --- the two builders ---------------------------------------------------------------------------


def rooted(path: str) -> str:
    """An input pattern for one copy's file or folder whose document ids keep the copy's name.

    Ids are relative to an input's folder (to the part before its first glob character), so
    `copy-003/part-00000.txt` given as a file would have the same ids as every other copy's
    `part-00000.txt` (and the build refuses an id twice); `[c]opy-003/...` matches the same
    path with ids relative to the corpus folder above the copies.
    """
    parts = path.rstrip("/").split("/")
    at = max(i for i, part in enumerate(parts) if part.startswith("copy-"))
    parts[at] = f"[{parts[at][0]}]{parts[at][1:]}"
    return "/".join(parts) + ("/**" if os.path.isdir(path) else "")


def build(
    fmt: str, inputs: list[str], out: str, vocab: str, workers: int, seed: int = SEED
) -> tuple[Measured, dict]:
    cmd = [sys.executable, "-m", "pipeline.cli", "build", "--format", fmt, "--out", out]
    cmd += ["--vocab", vocab, "--workers", str(workers), "--seed", str(seed)]
    patterns = ",".join(rooted(p) for p in inputs)
    cmd += ["--max-seq-length", "128", "--dupe-factor", "5", "--input", patterns]
    measured = run_measured(cmd, {**os.environ, "RAYON_NUM_THREADS": "1"})
    with open(f"{out}/manifest.json") as f:
        return measured, json.load(f)


def train_vocab(inputs: list[str], out: str) -> tuple[str, float]:
    cmd = [sys.executable, "-m", "pipeline.cli", "vocab", "--format", "text", "--out", out]
    measured = run_measured(cmd + ["--input", ",".join(inputs)])
    return f"{out}/vocab.txt", measured.wall


def reference_python(env_dir: str = REFERENCE_ENV) -> str | None:
    """The bench environment's interpreter, or None when `bench/reference_env.sh` has not
    finished installing the reference there."""
    python = os.path.join(env_dir, "bin", "python")
    ok = os.path.isfile(os.path.join(env_dir, ".installed")) and os.access(python, os.X_OK)
    return python if ok else None


@dataclass(frozen=True)
class ReferenceRun:
    cpu: float  # CPU seconds of the reference, start-up included, when its main returned
    wall: float
    tree: Measured  # the whole process, writing the tokenizer's ids included
    tfrecord: str
    token_ids: str


def run_reference(python: str, files: list[str], out: str, vocab: str) -> ReferenceRun:
    os.makedirs(out, exist_ok=True)
    tfrecord, ids, report = f"{out}/ref.tfrecord", f"{out}/ids.npy", f"{out}/report.json"
    flags = {
        "input_file": ",".join(files),
        "output_file": tfrecord,
        "vocab_file": vocab,
        "do_lower_case": "True",
        "max_seq_length": 128,
        "max_predictions_per_seq": 20,
        "masked_lm_prob": 0.15,
        "dupe_factor": 5,
        "random_seed": SEED,
        "report_json": report,
        "token_ids": ids,
    }
    cmd = [python, str(RUNNER), *(f"--{k}={v}" for k, v in flags.items())]
    tree = run_measured(cmd, {**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    with open(report) as f:
        r = json.load(f)
    return ReferenceRun(r["cpu_s"], r["wall_s"], tree, tfrecord, ids)


# --- rows ---------------------------------------------------------------------------------------


def row(metric: str, value, unit: str, note: str = "", area: str = "pipeline") -> dict:
    return {"area": area, "metric": metric, "value": value, "unit": unit, "note": note}


def speed_rows(
    corpus: str, floor: float, reference: float | None, ours: dict[int, float]
) -> list[dict]:
    """Ratios from one run's rates (MB per CPU-second): ours / the reference and ours / floor.
    Without a reference rate (not installed, or it failed) there is no ratio, only a note."""
    rows = []
    if reference is None:
        rows.append(
            row(
                f"{corpus}: ratio to the reference",
                "n/a",
                "",
                "reference not run (bench/reference_env.sh did not install it): no ratio",
            )
        )
    for w, rate in sorted(ours.items()):
        if reference is not None:
            note = f"{rate:.3f} / {reference:.3f} MB per CPU-second, same run"
            rows.append(
                row(
                    f"{corpus}: {w} worker(s) vs the reference",
                    round(rate / reference, 1),
                    "x",
                    note,
                )
            )
        rows.append(
            row(
                f"{corpus}: {w} worker(s), share of the tokenizer floor",
                round(100 * rate / floor),
                "%",
                f"{rate:.3f} / {floor:.3f} MB per CPU-second",
            )
        )
    return rows


def fidelity_rows(corpus: str, table: list[dict], checks: dict[str, tuple[int, int]]) -> list[dict]:
    """The fidelity table as bench rows (value: ours; the note: the reference and the test)."""
    rows = []
    for f in table:
        if f["test"].startswith("z"):
            unit = "pieces" if f["test"] == "z_rows" else f"the spread of {f['seeds']} seeds"
            test = f"z {f['z']:+.1f} by {unit}"
            if f["test"] == "z_seeds":
                test += f" (as if rows were independent: {f['z_rows']:+.1f})"
        else:
            test = (
                f"our seeds differ by up to {f['seed_ks_max']:.4f} (row-level p {f['p_rows']:.1g})"
            )
        within = "within" if f["within"] else "OUTSIDE"
        note = f"reference {f['reference']:.4f}; {test}; {within} sampling error"
        rows.append(row(f"{corpus}: {f['figure']}", round(f["ours"], 4), "", note, "fidelity"))
    for side, (checked, matched) in checks.items():
        rows.append(
            row(
                f"{corpus}: actual-next rows with the reference tokenizer's ids ({side})",
                round(100 * matched / max(checked, 1), 2),
                "%",
                f"{matched} of {checked} sampled rows: A and B each a run of its ids",
                "fidelity",
            )
        )
    return rows


def fidelity(
    ref: ReferenceRun, our_sets: list[str], seed: int = SEED, sample: int = 5000
) -> tuple[list[dict], dict[str, tuple[int, int]]]:
    """The reference's TFRecords against our shard sets (one per seed)."""
    import numpy as np

    from bench import fidelity as fid
    from schemas.vocab import Vocab

    ours, first = [], None
    for directory in our_sets:
        cols, mask_id = fid.shard_set_columns(directory)
        ours.append(fid.row_figures(cols, mask_id))
        first = cols if first is None else first
    vocab = Vocab.load(f"{our_sets[0]}/vocab.txt")
    ref_cols = fid.reference_columns(fid.read_reference([ref.tfrecord]))
    table = fid.compare(fid.row_figures(ref_cols, vocab.special_ids.mask), ours)
    index = fid.IdIndex(np.load(ref.token_ids))
    rng = np.random.default_rng(seed)
    checks = {
        "ours": fid.actual_next_match(first, index, sample, rng),
        "the reference itself": fid.actual_next_match(ref_cols, index, sample, rng),
    }
    return table, checks


def corpus_rows(corpus: str, cfg: BenchConfig, tmp: str) -> list[dict]:
    """Everything measured side by side on one corpus."""
    root = text_root(corpus)
    work = f"{tmp}/{corpus}"
    copies = sorted(glob.glob(f"{root}/copy-*"))
    vocab, vocab_s = train_vocab(copies[:1], f"{work}/vocab")
    n_vocab = sum(1 for _ in open(vocab, encoding="utf-8"))
    files, slice_size = slice_files(root, cfg.slice_mb)
    mb = slice_size / 1e6
    floor = tokenizer_floor(vocab, files, slice_size)
    rows = [
        row(f"{corpus}: vocab training", round(vocab_s, 1), "s", f"{n_vocab:,} pieces, one copy"),
        row(f"{corpus}: floor, encode_batch_fast", round(floor, 3), "MB/CPU-s", f"{mb:.1f} MB"),
    ]
    python, ref, ref_rate = reference_python(), None, None
    if python is None:
        print(f"pipeline: no reference environment in {REFERENCE_ENV}: no ratio", file=sys.stderr)
    else:
        ref = run_reference(python, files, f"{work}/reference", vocab)
        ref_rate = mb / ref.cpu
        note = (
            f"{mb:.1f} MB, {ref.cpu:.0f} CPU-s, {ref.wall:.0f} s wall "
            f"(TensorFlow start-up included), peak {ref.tree.peak / 2**30:.2f} GiB"
        )
        rows.append(row(f"{corpus}: the reference", round(ref_rate, 3), "MB/CPU-s", note))
    sets = []
    for k in range(cfg.seeds):
        out = f"{work}/slice-{k}"
        measured, manifest = build("text", files, out, vocab, max(cfg.workers), SEED + k)
        sets.append(out)
        if k == 0:
            inst = sum(s["rows"] for s in manifest["shards"])
            note = f"{mb:.1f} MB, {measured.cpu:.0f} CPU-s, {measured.wall:.0f} s wall, {inst} rows"
            rows.append(
                row(f"{corpus}: ours on the slice", round(mb / measured.cpu, 3), "MB/CPU-s", note)
            )
    rates = {}
    dirs, size = corpus_files("text", cfg.mb, root)
    for w in cfg.workers:
        measured, manifest = build("text", dirs, f"{work}/big-{w}", vocab, w)
        rates[w] = size / 1e6 / measured.cpu
        inst = sum(s["rows"] for s in manifest["shards"])
        note = (
            f"{size / 1e6:.0f} MB, {measured.cpu:.0f} CPU-s, {measured.wall:.0f} s wall "
            f"({size / 1e6 / measured.wall / w:.3f} MB/s per worker), {inst / measured.wall:,.0f} "
            f"rows/s, peak {measured.peak / 2**30:.2f} GiB"
        )
        rows.append(row(f"{corpus}: ours, {w} worker(s)", round(rates[w], 3), "MB/CPU-s", note))
        shutil.rmtree(f"{work}/big-{w}", ignore_errors=True)  # 200 MB of text: ~1 GB of shards
    rows += speed_rows(corpus, floor, ref_rate, rates)
    if ref is not None:
        rows += fidelity_rows(corpus, *fidelity(ref, sets))
    return rows


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


def books_rows(mb: float, vocab: str, w: int, tmp: str) -> list[dict]:
    """The raw-format floor (Punkt + tokenizer), then a build of the books layout."""
    dirs, size = corpus_files("books", mb)
    floor = raw_floor(vocab, dirs, size)
    measured, _ = build("books", dirs, f"{tmp}/books", vocab, w)
    rate = size / 1e6 / measured.cpu
    note = f"{size / 1e6:.0f} MB, {measured.wall:.0f} s wall; {floor / rate:.1f}x the floor's time"
    return [
        row("floor: Punkt + encode_batch_fast, 1 thread", round(floor, 3), "MB/CPU-s", "books"),
        row(
            f"books format, {w} worker(s)",
            round(rate, 3),
            "MB/CPU-s",
            note,
        ),
    ]


def memory_rows(sizes, vocab: str, w: int, tmp: str) -> list[dict]:
    """Peak memory of builds of several corpus sizes, and the line through them."""
    rows, series = [], []
    for size_mb in sizes:
        dirs, size = corpus_files("text", size_mb)
        measured, _ = build("text", dirs, f"{tmp}/mem-{size_mb}", vocab, w)
        series.append((size / 1e6, measured.peak / 2**30))
        rows.append(
            row(
                f"peak memory, {size / 1e6:.0f} MB text, {w} workers",
                round(measured.peak / 2**30, 2),
                "GiB",
                f"{measured.wall:.0f} s wall",
            )
        )
    return rows + memory_fit(series)


def run(cfg: BenchConfig = BenchConfig()) -> list[dict]:
    tmp = tempfile.mkdtemp(prefix="bench-pipeline-", dir=os.environ.get("BENCH_TMP"))
    rows = []
    for corpus in cfg.corpora:
        rows += corpus_rows(corpus, cfg, tmp)
    if cfg.books_mb or cfg.sizes:
        vocab = f"{tmp}/kernel-docs/vocab/vocab.txt"
        if not os.path.isfile(vocab):
            vocab, _ = train_vocab(sorted(glob.glob(f"{CORPUS}/text/copy-*"))[:1], f"{tmp}/vocab")
        if cfg.books_mb:
            rows += books_rows(cfg.books_mb, vocab, max(cfg.workers), tmp)
        rows += memory_rows(cfg.sizes, vocab, max(cfg.workers), tmp)
    return rows


def add_args(ap: argparse.ArgumentParser, prefix: str = "") -> None:
    d = BenchConfig()
    ap.add_argument(f"--{prefix}mb", type=float, default=d.mb, help="MB of text for our build")
    ap.add_argument(
        f"--{prefix}slice-mb", type=float, default=d.slice_mb, help="MB for the reference"
    )
    ap.add_argument(f"--{prefix}workers", type=int, nargs="+", default=list(d.workers))
    ap.add_argument(
        f"--{prefix}seeds", type=int, default=d.seeds, help="our builds on the slice (fidelity)"
    )
    ap.add_argument(f"--{prefix}corpora", nargs="+", choices=TEXT_CORPORA, default=list(d.corpora))
    ap.add_argument(
        f"--{prefix}books-mb", type=float, default=d.books_mb, help="books build (0: none)"
    )
    ap.add_argument(
        f"--{prefix}sizes", type=float, nargs="*", default=[], help="MB sizes, memory series"
    )


def config_from(args, prefix: str = "") -> BenchConfig:
    def get(name: str):
        return getattr(args, prefix.replace("-", "_") + name)

    return BenchConfig(
        mb=get("mb"),
        slice_mb=get("slice_mb"),
        workers=tuple(get("workers")),
        seeds=get("seeds"),
        corpora=tuple(get("corpora")),
        books_mb=get("books_mb"),
        sizes=tuple(get("sizes")),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_args(ap)
    try:
        cfg = config_from(ap.parse_args(argv))
    except ValueError as e:
        ap.error(str(e))
    for r in run(cfg):
        print(f"{r['metric']:<60} {r['value']!s:>10} {r['unit']:<9} {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
