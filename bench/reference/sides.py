"""Each side of the side-by-side bench: the text it reads (whole copies of a corpus, or a slice
of whole files, in the reference `text` layout or the books layout) and the side run and
measured: the tokenizer floors (in this process, one thread), our vocab and build (the
`bert-shards` CLI as it is) and the reference (`bench/reference/runner.py` in the environment
`bench/reference_env.sh` makes)."""

from __future__ import annotations

import functools
import glob
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.procmem import Measured, run_measured

# Per-core figures: the tokenizer's Rust thread pool gets one thread; it reads this variable
# when it starts, and nothing here imports `tokenizers` before this line runs.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
DATA = os.environ.get("DATA", "data")
CORPUS = f"{DATA}/corpora/kernel-docs-200mb"
TEXT_CORPORA = ("kernel-docs", "wikipedia")
REFERENCE_ENV = os.environ.get("REFERENCE_ENV", f"{DATA}/bench-env")
RUNNER = Path(__file__).with_name("runner.py")
SEED = 12345


# --- the text each side reads -------------------------------------------------------------------


def text_root(corpus: str) -> str:
    """The folder of copies (copy-000/ ...) of a corpus in the text layout; built if needed."""
    if corpus == "wikipedia":
        from bench.corpora import wiki_corpus

        return str(wiki_corpus(DATA, 200.0))
    return f"{CORPUS}/text"


def txt_files(folder: str) -> list[str]:
    """Every `.txt` below `folder`, sorted."""
    return sorted(glob.glob(f"{folder}/**/*.txt", recursive=True))


def corpus_files(layout: str, mb: float, root: str | None = None) -> tuple[list[str], int]:
    """Whole copies of the corpus until at least `mb` MB; (copy directories, bytes)."""
    copies = sorted(glob.glob(f"{root or f'{CORPUS}/{layout}'}/copy-*"))
    if not copies:
        raise SystemExit(f"no corpus under {root or CORPUS}: run `make corpora` first")
    return first_copies(copies, mb)


def first_copies(copies: list[str], mb: float) -> tuple[list[str], int]:
    """The first copy folders that together hold at least `mb` MB of `.txt`; (them, bytes)."""
    chosen, size = [], 0
    for c in copies:
        chosen.append(c)
        size += sum(os.path.getsize(p) for p in txt_files(c))
        if size >= mb * 1e6:
            break
    return chosen, size


def slice_files(root: str, mb: float) -> tuple[list[str], int]:
    """Whole files, copy after copy, until at least `mb` MB; (files, bytes)."""
    chosen, size = [], 0
    for path in txt_files(root):
        chosen.append(path)
        size += os.path.getsize(path)
        if size >= mb * 1e6:
            break
    if not chosen:
        raise SystemExit(f"no .txt files under {root}")
    return chosen, size


def read_text(paths: list[str]) -> list[str]:
    """The text of files, or of every .txt under folders."""
    files = [f for p in paths for f in ([p] if os.path.isfile(p) else txt_files(p))]
    return [open(p, encoding="utf-8").read() for p in files]


def rooted(path: str, root: str | None = None) -> str:
    """An input pattern for one file or folder whose document ids keep its path under `root`
    (by default the folder above the path's last `copy-` part, so that ids keep the copy's name).

    Ids are relative to an input's folder (to the part before its first glob character), so
    `copy-003/part-00000.txt` given as a file would have the same ids as every other copy's
    `part-00000.txt` (and the build refuses an id twice); `[c]opy-003/...` matches the same
    path with ids relative to the corpus folder above the copies.
    """
    if root is None:
        parts = path.rstrip("/").split("/")
        at = max(i for i, part in enumerate(parts) if part.startswith("copy-"))
        root, rel = "/".join(parts[:at]), "/".join(parts[at:])
    else:
        rel = os.path.relpath(path, root)
    prefix = f"{root}/" if root else ""
    return f"{prefix}[{rel[0]}]{rel[1:]}" + ("/**" if os.path.isdir(path) else "")


# --- each side run and measured -----------------------------------------------------------------


def tokenizer_floor(vocab_path: str, paths: list[str], size: int) -> float:
    """MB per CPU-second of encode_batch_fast alone on text-layout lines, one thread."""
    from pipeline.core.tokenize import bert_tokenizer
    from schemas.vocab import Vocab

    lines = [ln for text in read_text(paths) for ln in text.splitlines() if ln.strip()]
    tok = bert_tokenizer(Vocab.load(vocab_path), True)
    start = time.process_time()
    for i in range(0, len(lines), 20_000):
        tok.encode_batch_fast(lines[i : i + 20_000], add_special_tokens=False)
    return size / 1e6 / (time.process_time() - start)


def raw_floor(vocab_path: str, dirs: list[str], size: int) -> float:
    """MB per CPU-second of Punkt splitting plus tokenization on the books layout, one thread."""
    from pipeline.core.sentences import split_paragraphs
    from pipeline.core.tokenize import bert_tokenizer
    from schemas.vocab import Vocab

    tok = bert_tokenizer(Vocab.load(vocab_path), True)
    books = read_text(dirs)
    start = time.process_time()
    for text in books:
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
        tok.encode_batch_fast(split_paragraphs(paragraphs), add_special_tokens=False)
    return size / 1e6 / (time.process_time() - start)


def build(
    fmt: str,
    inputs: list[str],
    out: str,
    vocab: str,
    workers: int,
    seed: int = SEED,
    root: str | None = None,
) -> tuple[Measured, dict]:
    """Our build of `inputs` (seq 128, dupe 5), measured; and its manifest. `root`: see `rooted`."""
    cmd = [sys.executable, "-m", "pipeline", "build", "--format", fmt, "--out", out]
    cmd += ["--vocab", vocab, "--workers", str(workers), "--seed", str(seed)]
    patterns = ",".join(rooted(p, root) for p in inputs)
    cmd += ["--max-seq-length", "128", "--dupe-factor", "5", "--input", patterns]
    measured = run_measured(cmd, {**os.environ, "RAYON_NUM_THREADS": "1"})
    with open(f"{out}/manifest.json") as f:
        return measured, json.load(f)


def train_vocab(inputs: list[str], out: str) -> tuple[str, float]:
    cmd = [sys.executable, "-m", "pipeline", "vocab", "--format", "text", "--out", out]
    measured = run_measured(cmd + ["--input", ",".join(inputs)])
    return f"{out}/vocab.txt", measured.wall


def reference_python(env_dir: str = REFERENCE_ENV) -> str | None:
    """The bench environment's interpreter, or None when `bench/reference_env.sh` has not
    finished installing the reference there."""
    return env_python(env_dir)


# One line naming the interpreter a `python` runs: the implementation and version, the
# interpreter a venv was made from (its own `bin/python` resolved to it) and that build's date.
_WHICH = (
    "import os, platform, sys; "
    "print(platform.python_implementation(), platform.python_version() + ',', "
    "os.path.realpath(getattr(sys, '_base_executable', sys.executable)) + ',', "
    "'built', ' '.join(platform.python_build()[1].split()))"
)


@functools.cache  # asked once per area and per side of a ratio; it does not change in a run
def interpreter(python: str = sys.executable) -> str:
    """The interpreter `python` runs, as one line: two sides that print the same line ran the
    same build of Python. Ours is `sys.executable`, a peer's its environment's `bin/python`."""
    try:
        done = subprocess.run(
            [python, "-c", _WHICH], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({python} did not answer: {e})"
    line = done.stdout.strip()
    return line if done.returncode == 0 and line else f"unknown ({python} did not answer)"


def interpreters_note(side: str, theirs: str, ours: str) -> str:
    """For a ratio's note: nothing when both sides ran one interpreter; else both named, since
    the interpreter's own speed is then part of the ratio (docs/benchmarks.md, "The
    interpreter")."""
    if theirs == ours:
        return ""
    return (
        f"; {side} ran on another interpreter than ours ({theirs}; ours {ours}): the ratio "
        f"compares the interpreters too, remake its environment with PYTHON set to ours"
    )


def env_python(env_dir: str) -> str | None:
    """A bench environment's interpreter, or None when its install script has not finished
    (it leaves `.installed` last)."""
    python = os.path.join(env_dir, "bin", "python")
    ok = os.path.isfile(os.path.join(env_dir, ".installed")) and os.access(python, os.X_OK)
    return python if ok else None


@dataclass(frozen=True)
class ReferenceRun:
    cpu: float  # CPU seconds of the reference, start-up included, when its main returned
    wall: float  # wall seconds, likewise
    peak_rss: int  # its process's peak RSS (ru_maxrss) when its main returned
    tree: Measured  # the whole process, the runner's reading of the tokenizer's ids after it too
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
    return ReferenceRun(r["cpu_s"], r["wall_s"], r["max_rss_bytes"], tree, tfrecord, ids)
