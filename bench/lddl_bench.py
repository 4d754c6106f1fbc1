"""NVIDIA's LDDL beside our build, on the same documents, in one run (`make bench`'s `lddl` area).

LDDL (`lddl==0.1.0`, the data side of DeepLearningExamples' BERT) runs in the environment
`bench/lddl_env.sh` makes (DATA/lddl-env, never .venv), through `bench/lddl_run.py`, as a new
user would run it on one machine: `preprocess_bert_pretrain --schedule local` with one worker
process of one thread, `--sample-ratio 1.0` (its default, 0.9, drops a tenth of the documents),
`--masking` (static masks, as ours), seq 128, dupe 5, masked LM 0.15, the same vocab as ours.
It reads `source/*.txt` with a document a line (`<id> <text>`), the layout its own
`_shard_books` writes: every non-empty line of a book, stripped, joined with spaces.

Per corpus, the same documents both ways: the kernel docs' books (`make corpora`) and the
Wikipedia prose our reader renders from gensim's export (`bench/corpora.py`), each as
whole copies with distinct ids up to `--mb` MB. Ours reads the books layout (`--format books`,
1 worker): both sides split sentences with Punkt, tokenize, make pairs and mask. Rates are MB
of the books text per CPU-second of the whole process tree (LDDL's dask scheduler, nanny and
worker included; ours with Beam's start-up); wall and peak memory beside them. Then the
figures of the fidelity table, computed the same way on both sides' rows.

    python -m bench.lddl_bench [--mb 60] [--corpora kernel-docs wikipedia]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.procmem import Measured, run_measured
from bench.reference.sides import (
    CORPUS,
    DATA,
    SEED,
    TEXT_CORPORA,
    build,
    env_python,
    first_copies,
    interpreter,
    interpreters_note,
    text_root,
    train_vocab,
    txt_files,
)
from bench.rows import row

LDDL_ENV = os.environ.get("LDDL_ENV", f"{DATA}/lddl-env")
RUNNER = Path(__file__).with_name("lddl_run.py")
CAP = 20  # our max predictions per row


def lddl_python(env_dir: str = LDDL_ENV) -> str | None:
    """The LDDL environment's interpreter, or None when `bench/lddl_env.sh` has not finished."""
    return env_python(env_dir)


# --- the same documents in both layouts -----------------------------------------------------


def books_copies(corpus: str, mb: float, work: str) -> tuple[list[str], int]:
    """Whole copies of the corpus in the books layout until at least `mb` MB: (copy folders,
    bytes). The kernel docs' copies are `make corpora`'s; Wikipedia's are written here."""
    if corpus == "kernel-docs":
        copies = sorted(glob.glob(f"{CORPUS}/books/copy-*"))
        if not copies:
            raise SystemExit(f"no corpus under {CORPUS}/books: run `make corpora` first")
    else:
        from bench.corpora import wiki_documents

        docs = wiki_documents(Path(DATA) / "gensim")
        text_root("wikipedia")  # the same export our side-by-side bench reads
        copies = []
        per_copy = sum(len(("\n\n".join(d.paragraphs) + "\n").encode()) for d in docs)
        for k in range(max(1, int(np.ceil(mb * 1e6 / per_copy)))):
            folder = Path(work) / "wiki-books" / f"copy-{k:03d}"
            for d in docs:
                target = folder / f"{d.path}.txt"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("\n\n".join(d.paragraphs) + "\n", encoding="utf-8")
            copies.append(str(folder))
    return first_copies(copies, mb)


def lddl_source(copies: list[str], out: str, files: int = 4) -> str:
    """LDDL's input: `files` text files, a book a line, `<id> <every non-empty line of the
    book, stripped, joined with spaces>` (its `_shard_books`), books dealt round-robin."""
    books = [p for c in copies for p in txt_files(c)]
    os.makedirs(out, exist_ok=True)
    for k in range(files):
        lines = []
        for path in books[k::files]:
            with open(path, encoding="utf-8-sig", newline="\n") as f:
                text = [ln.strip() for ln in f if ln.strip()]
            book_id = os.path.relpath(path, os.path.dirname(copies[0])).replace("/", "_")
            lines.append(" ".join([book_id.replace(" ", "_"), *text]))
        with open(f"{out}/{k}.txt", "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines))
    return out


def run_lddl(python: str, source: str, sink: str, vocab: str, work: str, mb: float) -> Measured:
    """LDDL measured; stopped after 120 s plus 60 s per MB (a dask worker that fails to start
    leaves the driver waiting for ever)."""
    cmd = [
        "timeout",
        str(int(120 + 60 * mb)),
        python,
        str(RUNNER),
        "--schedule",
        "local",
        "--local-n-workers",
        "1",
    ]
    cmd += ["--local-threads-per-worker", "1", "--books", source, "--sink", sink]
    cmd += ["--vocab-file", vocab, "--target-seq-length", "128", "--duplicate-factor", "5"]
    cmd += ["--masked-lm-ratio", "0.15", "--sample-ratio", "1.0", "--masking"]
    cmd += ["--seed", str(SEED)]
    env = {
        **os.environ,
        "NLTK_DATA": f"{os.path.dirname(python)}/../nltk_data",
        "TMPDIR": work,  # dask's worker space
        "RAYON_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": "",
    }
    return run_measured(cmd, env)


# --- rows, both sides -----------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    rows: int
    lengths: np.ndarray  # pieces per row, [CLS] and [SEP]s included
    random_next: np.ndarray
    selected: np.ndarray  # selected pieces per row
    kinds: tuple[int, int, int]  # selected pieces: [MASK], unchanged, another piece


def lddl_rows(sink: str) -> Rows:
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in sorted(glob.glob(f"{sink}/**/*.parquet", recursive=True))]
    lengths, random_next, selected = [], [], []
    n_mask = n_keep = n_all = 0
    for t in tables:
        cols = t.to_pydict()
        columns = ("A", "B", "is_random_next", "num_tokens", "masked_lm_positions")
        columns += ("masked_lm_labels",)
        for a, b, rnd, n, pos, labels in zip(*(cols[c] for c in columns), strict=True):
            tokens = ["[CLS]", *a.split(" "), "[SEP]", *b.split(" "), "[SEP]"]
            positions = np.load(_bytes_io(pos))
            labels = labels.split(" ") if labels else []
            for p, label in zip(positions, labels, strict=True):
                got = tokens[p]
                n_mask += got == "[MASK]"
                n_keep += got != "[MASK]" and got == label
            n_all += len(labels)
            lengths.append(n)
            random_next.append(rnd)
            selected.append(len(labels))
    return Rows(
        len(lengths),
        np.array(lengths),
        np.array(random_next, bool),
        np.array(selected),
        (n_mask, n_keep, n_all - n_mask - n_keep),
    )


def _bytes_io(b: bytes):
    import io

    return io.BytesIO(b)


def our_rows(out: str) -> Rows:
    from bench.reference.fidelity import row_figures, shard_set_columns

    cols, mask_id = shard_set_columns(out)
    f = row_figures(cols, mask_id)
    return Rows(f.rows, f.lengths, f.random_next, np.diff(cols.masked_offsets), f.kinds)


def figures(r: Rows, mb: float) -> dict[str, float]:
    selected = max(int(r.selected.sum()), 1)
    return {
        "instances per MB": r.rows / mb,
        "mean row length (pieces)": float(np.mean(r.lengths)),
        "share of rows under 64 pieces": float(np.mean(r.lengths < 64)),
        "random-next share (rows)": float(np.mean(r.random_next)),
        "masked pieces per row": float(np.mean(r.selected)),
        f"share of rows with more than {CAP} masked": float(np.mean(r.selected > CAP)),
        "[MASK] share of selected pieces": r.kinds[0] / selected,
        "unchanged share of selected pieces": r.kinds[1] / selected,
        "random-piece share of selected pieces": r.kinds[2] / selected,
    }


# --- the bench ------------------------------------------------------------------------------


def corpus_rows(corpus: str, mb: float, python: str, tmp: str) -> list[dict]:
    work = f"{tmp}/{corpus}"
    os.makedirs(work, exist_ok=True)
    copies = sorted(glob.glob(f"{text_root(corpus)}/copy-*"))[:1]
    vocab, _ = train_vocab(copies, f"{work}/vocab")
    books, size = books_copies(corpus, mb, work)
    size_mb = size / 1e6
    source = lddl_source(books, f"{work}/source")
    lddl = run_lddl(python, source, f"{work}/lddl-out", vocab, work, size_mb)
    ours, _ = build("books", books, f"{work}/ours", vocab, 1)
    name = f"{corpus} as books"
    rows = []
    for side, m in (("LDDL, 1 worker", lddl), ("ours, 1 worker", ours)):
        note = (
            f"{size_mb:.1f} MB, {m.cpu:.0f} CPU-s, {m.wall:.0f} s wall, "
            f"peak {m.peak / 2**30:.2f} GiB {m.memory}"
        )
        rows.append(row(f"{name}: {side}", round(size_mb / m.cpu, 3), "MB/CPU-s", note, "lddl"))
    rows.append(
        row(
            f"{name}: ours / LDDL, per CPU-second",
            round(lddl.cpu / ours.cpu, 1),
            "x",
            f"{lddl.cpu:.0f} against {ours.cpu:.0f} CPU-s, same run; wall "
            f"{lddl.wall:.0f} against {ours.wall:.0f} s"
            + interpreters_note("LDDL", interpreter(python), interpreter()),
            "lddl",
        )
    )
    theirs = figures(lddl_rows(f"{work}/lddl-out"), size_mb)
    mine = figures(our_rows(f"{work}/ours"), size_mb)
    for figure, value in mine.items():
        note = f"LDDL {theirs[figure]:.4f}"
        rows.append(row(f"{name}: {figure}", round(value, 4), "", note, "lddl"))
    shutil.rmtree(work, ignore_errors=True)
    return rows


def run(mb: float = 60.0, corpora: tuple[str, ...] = TEXT_CORPORA) -> list[dict]:
    python = lddl_python()
    if python is None:
        print(f"lddl: no LDDL environment in {LDDL_ENV} (bench/lddl_env.sh)", file=sys.stderr)
        note = "bench/lddl_env.sh did not install LDDL: no figures"
        return [row("LDDL side by side", "n/a", "", note, "lddl")]
    tmp = tempfile.mkdtemp(prefix="bench-lddl-", dir=os.environ.get("BENCH_TMP"))
    try:
        return [r for corpus in corpora for r in corpus_rows(corpus, mb, python, tmp)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=60.0, help="MB of books text per corpus")
    ap.add_argument("--corpora", nargs="+", choices=TEXT_CORPORA, default=list(TEXT_CORPORA))
    args = ap.parse_args(argv)
    if args.mb <= 0:
        ap.error("--mb must be > 0")
    for r in run(args.mb, tuple(args.corpora)):
        print(f"{r['metric']:<64} {r['value']!s:>10} {r['unit']:<9} {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
