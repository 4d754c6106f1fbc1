"""Shard-building speed and fidelity on real English prose, beside the reference, in one run.

Two corpora in the reference `text` layout (a sentence a line, a blank line between documents),
repeated as whole copies with distinct document ids: the kernel documentation reduced to prose
(`make corpora`) and Wikipedia prose rendered from the gensim exports (`bench/corpora.py`).
For each, with a vocab trained on one copy (`bert-shards vocab`, 30k pieces at most) that both
sides use, seq 128, dupe 5, masked LM 0.15, 20 predictions:

- the floor: HF `tokenizers` `encode_batch_fast` alone, one thread, on the slice below;
- the reference, `create_pretraining_data.py` of bert-tensorflow 1.0.4 (`runner.py` here, in
  the environment `bench/reference_env.sh` makes), on a slice of whole files (`--slice-mb`, 20):
  it holds its corpus in memory and is slow; if it is not installed, no ratio is printed;
- our build (`bert-shards build`, the CLI as it is) on the same slice with `--seeds` seeds: the
  fidelity table (`fidelity.py` here), and the first seed's rate;
- our build on at least `--mb` MB (200) with each worker count ("at scale"), `--rounds` times
  with the counts taken in turn, each count's fastest kept (`bench.rows.in_turn`); with 1 and 2,
  also two 1-worker builds of the same files started together: what two processes get out of the
  machine's cores, the most 2 workers of one build can get.

Rates are MB (10^6 bytes) of input text per CPU-second (user + sys of the whole process tree,
children included: the machine is shared, so wall time is noisy; wall is reported too). The ratio
to the reference and the share of the floor are quotients of rates measured in this one run on
the same slice: ours on the slice / the reference, ours on the slice / the floor. The builds at
scale get no ratio: the reference holds its input in memory and is run on the slice only, and
our fixed start-up, spread over 10x the text there, would flatter us against it.
Then the books layout: Punkt alone against the fast route (`pipeline.core.punkt_fast`), the
split + tokenizer floor, and builds with each worker count on `--books-mb` MB, in turn as
above. (Memory at scale: `bench/scale_bench.py`.)

Which files each side reads, and each side run and measured: `sides.py` here.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.reference.fidelity import against_reference
from bench.reference.sides import (
    CORPUS,
    REFERENCE_ENV,
    SEED,
    TEXT_CORPORA,
    build,
    corpus_files,
    interpreter,
    interpreters_note,
    raw_floor,
    read_text,
    reference_python,
    run_reference,
    slice_files,
    text_root,
    tokenizer_floor,
    train_vocab,
)
from bench.rows import in_turn, row, rows_for, scaling_rows, tries_note


@dataclass(frozen=True)
class BenchConfig:
    mb: float = 200  # our build: at least this much text
    slice_mb: float = 20  # the reference (and the fidelity builds): whole files up to this
    workers: tuple[int, ...] = (1, 2)  # our build on `mb`, with each worker count
    rounds: int = 2  # builds per worker count on `mb` (and books), taken in turn; fastest kept
    seeds: int = 4  # fidelity builds on the slice; 2+ measure the seed-to-seed spread
    corpora: tuple[str, ...] = ("kernel-docs", "wikipedia")
    books_mb: float = 200  # the books-layout builds (kernel docs), as large as the text ones

    def __post_init__(self) -> None:
        if self.mb <= 0 or self.slice_mb <= 0 or self.seeds < 1 or not self.workers:
            raise ValueError("--mb and --slice-mb must be > 0, --seeds >= 1, --workers not empty")
        if self.rounds < 1:
            raise ValueError("--rounds must be >= 1")
        unknown = set(self.corpora) - set(TEXT_CORPORA)
        if unknown:
            raise ValueError(f"unknown corpora {sorted(unknown)}: choose from {TEXT_CORPORA}")


# --- the figures as rows of `make bench`'s table -----------------------------------------------


_row = rows_for("pipeline")


def speed_rows(
    corpus: str,
    floor: float,
    reference: float | None,
    ours: float,
    workers: int,
    mb: float,
    apart: str = "",
) -> list[dict]:
    """Ratios from one run's rates (MB per CPU-second), all three measured on the same slice of
    `mb` MB: ours (`workers` workers) / the reference, and ours / the tokenizer floor. Without a
    reference rate (not installed, or it failed) there is no ratio to it, only a note. `apart`
    (`sides.interpreters_note`) ends the ratio's note when the two ran other interpreters.

    Our builds on the ~200 MB input get no ratio: the reference is run on the slice only (it
    holds its corpus in memory), and a ratio against it on other input would set our start-up,
    spread over 10x the text, against its start-up on the slice."""
    same = f"both on the same {mb:.1f} MB slice, same run"
    if reference is None:
        ratio = _row(
            f"{corpus}: ratio to the reference",
            "n/a",
            "",
            "reference not run (bench/reference_env.sh did not install it): no ratio",
        )
    else:
        note = (
            f"ours on the slice ({workers} worker(s)) / the reference: {ours:.3f} / "
            f"{reference:.3f} MB per CPU-second, {same}{apart}"
        )
        ratio = _row(
            f"{corpus}: ours / the reference, same slice", round(ours / reference, 1), "x", note
        )
    share = _row(
        f"{corpus}: ours on the slice, share of the tokenizer floor",
        round(100 * ours / floor),
        "%",
        f"{ours:.3f} / {floor:.3f} MB per CPU-second, {same}",
    )
    return [ratio, share]


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


# --- the runs ----------------------------------------------------------------------------------


def peak(measured) -> str:
    """A build's peak memory as the notes give it: GiB, and whether PSS or RSS (bench.procmem)."""
    return f"{measured.peak / 2**30:.2f} GiB {measured.memory}"


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
        _row(f"{corpus}: vocab training", round(vocab_s, 1), "s", f"{n_vocab:,} pieces, one copy"),
        _row(f"{corpus}: floor, encode_batch_fast", round(floor, 3), "MB/CPU-s", f"{mb:.1f} MB"),
    ]
    python, ref, ref_rate, apart = reference_python(), None, None, ""
    if python is None:
        print(f"pipeline: no reference environment in {REFERENCE_ENV}: no ratio", file=sys.stderr)
    else:
        ref = run_reference(python, files, f"{work}/reference", vocab)
        apart = interpreters_note("the reference", interpreter(python), interpreter())
        ref_rate = mb / ref.cpu
        note = (
            f"{mb:.1f} MB, {ref.cpu:.0f} CPU-s, {ref.wall:.0f} s wall (TensorFlow start-up "
            f"included), peak {ref.peak_rss / 2**30:.2f} GiB RSS of its one process; both taken "
            "when its main returned, before the runner reads its tokenizer's ids"
        )
        rows.append(_row(f"{corpus}: the reference", round(ref_rate, 3), "MB/CPU-s", note))
    sets, slice_workers = [], max(cfg.workers)
    for k in range(cfg.seeds):
        out = f"{work}/slice-{k}"
        measured, manifest = build("text", files, out, vocab, slice_workers, SEED + k)
        sets.append(out)
        if k == 0:
            slice_rate = mb / measured.cpu
            inst = sum(s["rows"] for s in manifest["shards"])
            note = (
                f"{mb:.1f} MB, {slice_workers} worker(s), {measured.cpu:.0f} CPU-s, "
                f"{measured.wall:.0f} s wall, {inst} rows, peak {peak(measured)}"
            )
            rows.append(
                _row(f"{corpus}: ours on the slice", round(slice_rate, 3), "MB/CPU-s", note)
            )
    rows += speed_rows(corpus, floor, ref_rate, slice_rate, slice_workers, mb, apart)
    rows += scale_rows(corpus, cfg, root, vocab, work)
    if ref is not None:
        rows += fidelity_rows(corpus, *against_reference(ref.tfrecord, ref.token_ids, sets, SEED))
    return rows


def scale_rows(corpus: str, cfg: BenchConfig, root: str, vocab: str, work: str) -> list[dict]:
    """Our build on at least `cfg.mb` MB with each worker count, `cfg.rounds` times in turn,
    each count's fastest kept; with 1 and 2 workers, the scaling rows beside two 1-worker
    builds started together."""
    dirs, size = corpus_files("text", cfg.mb, root)

    def at_scale(w: int, k: int):
        out = f"{work}/big-{w}-{k}"
        measured, manifest = build("text", dirs, out, vocab, w)
        shutil.rmtree(out, ignore_errors=True)  # the shards are several times the text
        return measured, sum(s["rows"] for s in manifest["shards"])

    rows, walls, tries = [], {}, {}
    for w, runs in in_turn(at_scale, cfg.workers, cfg.rounds).items():
        measured, inst = min(runs, key=lambda r: r[0].wall)
        walls[w], tries[w] = measured.wall, [m.wall for m, _ in runs]
        note = (
            f"{size / 1e6:.0f} MB, {measured.cpu:.0f} CPU-s, {measured.wall:.0f} s wall "
            f"({size / 1e6 / measured.wall / w:.3f} MB per wall-second per worker), "
            f"{inst / measured.wall:,.0f} rows/s, peak {peak(measured)}; no ratio to the "
            "reference, which is run on the slice only"
        )
        rate = round(size / 1e6 / measured.cpu, 3)
        rows.append(_row(f"{corpus}: ours at scale, {w} worker(s)", rate, "MB/CPU-s", note))
    if 1 in walls and 2 in walls:
        pair = side_by_side(dirs, vocab, work)
        rows += scaling_rows(_row, corpus, walls, pair, f"{size / 1e6:.0f} MB", tries)
    return rows


def side_by_side(dirs: list[str], vocab: str, work: str) -> list[float]:
    """Wall seconds of two 1-worker builds of the same files started together: what two
    processes get out of this machine's cores, the most 2 workers of one build can get."""
    outs = [f"{work}/pair-{k}" for k in (0, 1)]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda out: build("text", dirs, out, vocab, 1)[0], outs))
    for out in outs:
        shutil.rmtree(out, ignore_errors=True)
    return [m.wall for m in runs]


def split_rates(dirs: list[str]) -> tuple[float, float, int]:
    """MB per CPU-second of NLTK's `PunktSentenceTokenizer.tokenize` and of the fast route
    (`pipeline.core.punkt_fast`, its caches empty at the start) on the paragraphs of the first copy
    alone (distinct text: no decision is remembered from another copy), one process, with the
    collector and pages set as the build's steps set them; and the bytes. Both give the same
    sentences (checked here too)."""
    import gc
    import time

    from pipeline.core.punkt_fast import FastPunkt
    from pipeline.core.sentences import english_tokenizer
    from pipeline.stages.base import worker_settings

    texts = read_text(dirs[:1])
    size = sum(len(t.encode()) for t in texts)
    paragraphs = [" ".join(p.split()) for t in texts for p in t.split("\n\n") if p.strip()]
    tok = english_tokenizer()
    worker_settings()
    rates = []
    for split in (tok.tokenize, FastPunkt(tok).tokenize):
        gc.collect()
        start = time.process_time()
        out = [split(p) for p in paragraphs]
        rates.append((size / 1e6 / (time.process_time() - start), out))
    if rates[0][1] != rates[1][1]:
        raise RuntimeError("the fast route's sentences differ from Punkt's")
    return rates[0][0], rates[1][0], size


def books_rows(
    mb: float, vocab: str, workers: tuple[int, ...], tmp: str, rounds: int = 1
) -> list[dict]:
    """Punkt alone and the fast route alone, the raw-format floor (the split + tokenizer), then
    builds of the books layout with each worker count, `rounds` times in turn (`in_turn`)."""
    dirs, size = corpus_files("books", mb)
    nltk_rate, fast_rate, split_size = split_rates(dirs)
    floor = raw_floor(vocab, dirs, size)
    note = f"{split_size / 1e6:.1f} MB, one copy; the fast route {fast_rate / nltk_rate:.1f}x"
    rows = [
        _row("split: NLTK PunktSentenceTokenizer alone", round(nltk_rate, 3), "MB/CPU-s", note),
        _row("split: the fast route alone, same sentences", round(fast_rate, 3), "MB/CPU-s", note),
        _row("floor: split + encode_batch_fast, 1 thread", round(floor, 3), "MB/CPU-s", "books"),
    ]

    def books_build(w: int, k: int):
        out = f"{tmp}/books-{w}-{k}"
        measured, _ = build("books", dirs, out, vocab, w)
        shutil.rmtree(out, ignore_errors=True)
        return measured

    walls, tries = {}, {}
    for w, runs in in_turn(books_build, workers, rounds).items():
        measured = min(runs, key=lambda m: m.wall)
        tries[w] = [m.wall for m in runs]
        rate, walls[w] = size / 1e6 / measured.cpu, measured.wall
        note = (
            f"{size / 1e6:.0f} MB, {measured.cpu:.0f} CPU-s, {measured.wall:.0f} s wall, peak "
            f"{peak(measured)}; {floor / rate:.1f}x the floor's time"
        )
        rows.append(_row(f"books format, {w} worker(s)", round(rate, 3), "MB/CPU-s", note))
    if 1 in walls and 2 in walls:
        note = f"{walls[1]:.1f} s with 1 worker, {walls[2]:.1f} s with 2" + tries_note(tries)
        rows.append(
            _row("books: 2 workers against 1, wall", round(walls[1] / walls[2], 2), "x", note)
        )
    return rows


def run(cfg: BenchConfig = BenchConfig()) -> list[dict]:
    tmp = tempfile.mkdtemp(prefix="bench-pipeline-", dir=os.environ.get("BENCH_TMP"))
    rows = []
    try:
        for corpus in cfg.corpora:
            rows += corpus_rows(corpus, cfg, tmp)
        if cfg.books_mb:
            vocab = f"{tmp}/kernel-docs/vocab/vocab.txt"
            if not os.path.isfile(vocab):
                copy = sorted(glob.glob(f"{CORPUS}/text/copy-*"))[:1]
                vocab, _ = train_vocab(copy, f"{tmp}/vocab")
            rows += books_rows(cfg.books_mb, vocab, cfg.workers, tmp, cfg.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the slices' shards and the reference's records
    return rows


def add_args(ap: argparse.ArgumentParser, prefix: str = "") -> None:
    d = BenchConfig()
    ap.add_argument(f"--{prefix}mb", type=float, default=d.mb, help="MB of text for our build")
    ap.add_argument(
        f"--{prefix}slice-mb", type=float, default=d.slice_mb, help="MB for the reference"
    )
    ap.add_argument(f"--{prefix}workers", type=int, nargs="+", default=list(d.workers))
    ap.add_argument(
        f"--{prefix}rounds", type=int, default=d.rounds, help="builds per worker count at scale"
    )
    ap.add_argument(
        f"--{prefix}seeds", type=int, default=d.seeds, help="our builds on the slice (fidelity)"
    )
    ap.add_argument(f"--{prefix}corpora", nargs="+", choices=TEXT_CORPORA, default=list(d.corpora))
    ap.add_argument(
        f"--{prefix}books-mb", type=float, default=d.books_mb, help="books build (0: none)"
    )


def config_from(args, prefix: str = "") -> BenchConfig:
    def get(name: str):
        return getattr(args, prefix.replace("-", "_") + name)

    return BenchConfig(
        mb=get("mb"),
        slice_mb=get("slice_mb"),
        workers=tuple(get("workers")),
        rounds=get("rounds"),
        seeds=get("seeds"),
        corpora=tuple(get("corpora")),
        books_mb=get("books_mb"),
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
