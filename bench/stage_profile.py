"""Where a build's CPU time goes: each stage timed alone with the build's own functions, beside a
whole 1-worker build of the same text.

    python -m bench.stage_profile --input DIR --mb 20 --vocab VOCAB.txt

The stages run in one process, in the build's order, on text in the reference format (one
sentence per line, a blank line between documents): read the files into documents, split them
into sentences, tokenize, plan the pairs of each bucket, assemble and mask the rows, write the
shards. "Chunk files" is the Arrow files the stages hand each other (write and read back).
What the whole build spends beyond the sum is Beam's own part: its start-up, its records and
the runner's bookkeeping; it is shown as measured, negative too (the stages timed alone then
took longer than the whole build: Beam's part is within the timings' noise), never clamped.
The buckets are cut as the build cuts them, with its default tokens per bucket
(`BuildConfig.bucket_tokens`, which the whole build here uses too). Each stage is timed in CPU
seconds of this process (`time.process_time`), with the tokenizer's thread pool held to one
thread and the garbage collector and pages set as the build's steps set them
(`pipeline.stages.base.worker_settings`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before `tokenizers` is imported

from bench.reference.sides import SEED, build, slice_files, text_root, train_vocab  # noqa: E402
from bench.rows import row as bench_row  # noqa: E402
from pipeline.build import BuildConfig  # noqa: E402

# the build's own default, which `whole_build` leaves to the CLI
BUCKET_TOKENS = next(
    f.default for f in dataclasses.fields(BuildConfig) if f.name == "bucket_tokens"
)

BEAM = "Beam: start-up, records, runner"
STAGES = (
    "read",
    "split",
    "tokenize",
    "plan pairs",
    "assemble and mask",
    "write shards",
    "chunk files",
)


class Clock:
    """CPU seconds per stage, summed over every `with clock(stage)` block."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, stage: str):
        start = time.process_time()
        try:
            yield
        finally:
            self.seconds[stage] += time.process_time() - start


def read_and_split(files: list[str], tmp: str, clock: Clock):
    """Files -> documents (chunk file) -> (id, source, sentences) (chunk file)."""
    from pipeline.files.chunks import (
        read_documents,
        read_sentences,
        write_documents,
        write_sentences,
    )
    from pipeline.sources.documents import Tally
    from pipeline.sources.text import read_text

    root = os.path.commonpath([os.path.dirname(f) for f in files])
    with clock("read"):
        docs = []
        for path in files:  # ids hold the path under the root, as a build's do
            with open(path, "rb") as f:
                docs.extend(read_text(f, os.path.relpath(path, root), Tally()))
    with clock("chunk files"):
        write_documents(f"{tmp}/documents.arrow", docs)
        docs = list(read_documents(f"{tmp}/documents.arrow"))
    with clock("split"):  # the reference format is split already: paragraphs are sentences
        sentences = [(d.id, d.source, tuple(d.paragraphs)) for d in docs if d.paragraphs]
    with clock("chunk files"):
        write_sentences(f"{tmp}/sentences.arrow", sentences)
        return read_sentences(f"{tmp}/sentences.arrow")


def tokenize_to_units(sentences, vocab, cfg, tmp: str, clock: Clock):
    """Sentences -> tokenized documents -> the units chunk file (every dupe pass, hashed)."""
    from pipeline.core.buckets import unit_passes
    from pipeline.core.tokenize import encode_documents
    from pipeline.files.units import write_units
    from pipeline.stages.tokenize import ENCODE_BATCH_SENTENCES, sentence_batches

    with clock("tokenize"):
        docs = []
        for batch in sentence_batches(sentences, ENCODE_BATCH_SENTENCES):
            docs.extend(encode_documents(batch, vocab, True))
    with clock("chunk files"):
        units = unit_passes(docs, cfg)
        tokens = sum(len(d.ids) for d in docs) * cfg.dupe_factor
        return write_units(f"{tmp}/units.arrow", units, len(units), tokens), (tokens, len(units))


def build_buckets(chunk, totals, vocab, cfg, tmp: str, clock: Clock) -> int:
    """The units chunk -> one shard per bucket, as the build cuts them; returns the buckets."""
    from pipeline.core.buckets import bucket_columns, plan_bucket
    from pipeline.core.tokenize import token_spec
    from pipeline.files.units import hash_range, read_units
    from pipeline.stages.instances import num_buckets
    from pipeline.stages.shards import write_bucket_shard

    buckets = num_buckets(totals, cfg, 0, BUCKET_TOKENS)
    spec = token_spec(vocab)
    os.makedirs(f"{tmp}/out/shards", exist_ok=True)
    for bucket in range(buckets):
        with clock("chunk files"):
            units = read_units(chunk, *hash_range(bucket, buckets))
        with clock("plan pairs"):
            docs, pairs = plan_bucket(units, cfg)
        if not len(pairs):
            continue
        with clock("assemble and mask"):
            columns, pair_counts, _ = bucket_columns(bucket, docs, pairs, cfg, spec)
        with clock("write shards"):
            write_bucket_shard(f"{tmp}/out", bucket, columns, pair_counts, vocab, {})
    return buckets


def stage_seconds(files: list[str], vocab_path: str, tmp: str) -> dict[str, float]:
    """CPU seconds per stage for one pass of the build's functions over `files`."""
    from pipeline.core.config import InstanceConfig
    from pipeline.stages.base import worker_settings
    from schemas.vocab import Vocab

    worker_settings()  # the collector and pages every step of the build runs with
    vocab = Vocab.load(vocab_path)
    cfg = InstanceConfig(max_seq_length=128, dupe_factor=5, seed=SEED)
    clock = Clock()
    sentences = read_and_split(files, tmp, clock)
    chunk, totals = tokenize_to_units(sentences, vocab, cfg, tmp, clock)
    build_buckets(chunk, totals, vocab, cfg, tmp, clock)
    return {stage: clock.seconds[stage] for stage in STAGES}


def whole_build(files: list[str], vocab: str, out: str) -> float:
    """CPU seconds of the process tree of a 1-worker build of `files` (reference format), whose
    document ids are the files' paths under their common folder, as in `read_and_split`."""
    root = os.path.commonpath([os.path.dirname(f) for f in files])
    return build("text", files, out, vocab, 1, root=root)[0].cpu


def profile(files: list[str], size: int, vocab: str, tmp: str) -> list[dict]:
    """Rows (stage, CPU-s, share of the whole build, MB per CPU-s of that stage alone, note)."""
    stages = stage_seconds(files, vocab, f"{tmp}/stages")
    total = whole_build(files, vocab, f"{tmp}/build")
    return table(stages, total, size)


def residual_note(residual: float) -> str:
    """What the whole build's CPU beyond the stages timed alone says."""
    if residual >= 0:
        return "the whole build less the stages timed alone"
    return (
        f"negative: the stages timed alone took {-residual:.2f} CPU-s more than the whole "
        "build, so Beam's part is within the timings' noise here"
    )


def table(stages: dict[str, float], total: float, size: int) -> list[dict]:
    """The profile's rows from the stages' CPU seconds and the whole build's: Beam's part is
    what is left, as measured (negative when the stages alone took longer)."""
    residual = total - sum(stages.values())
    mb = size / 1e6
    rows = [
        {
            "stage": stage,
            "cpu_s": round(s, 2),
            "share": round(s / total, 3),
            "mb_per_cpu_s": round(mb / s, 2) if s > 0 else None,
            "note": "",
        }
        for stage, s in stages.items()
    ]
    rows.append(
        {
            "stage": BEAM,
            "cpu_s": round(residual, 2),
            "share": round(residual / total, 3),
            "mb_per_cpu_s": None,
            "note": residual_note(residual),
        }
    )
    rows.append(
        {
            "stage": "whole build",
            "cpu_s": round(total, 2),
            "share": 1.0,
            "mb_per_cpu_s": round(mb / total, 3),
            "note": "",
        }
    )
    return rows


def bench_rows(corpus: str, mb: float = 200.0) -> list[dict]:
    """The profile of one corpus of the pipeline bench as `make bench` rows (area "profile"),
    with a vocab trained on its first copy."""
    root = text_root(corpus)
    tmp = tempfile.mkdtemp(prefix="bench-profile-", dir=os.environ.get("BENCH_TMP"))
    try:
        vocab, _ = train_vocab(sorted(str(p) for p in Path(root).glob("copy-*"))[:1], f"{tmp}/v")
        files, size = slice_files(root, mb)
        rows = profile(files, size, vocab, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    note = (
        f"{size / 1e6:.1f} MB reference format, seq 128, dupe 5, 1 worker, "
        f"{BUCKET_TOKENS:,} tokens per bucket"
    )
    return [
        bench_row(
            f"{corpus}: {r['stage']}",
            r["cpu_s"],
            "CPU-s",
            f"{r['share']:.0%} of the build; " + (f"{r['note']}; " if r["note"] else "") + note,
            "profile",
        )
        for r in rows
    ]


def run(corpora=("kernel-docs", "wikipedia")) -> list[dict]:
    return [row for corpus in corpora for row in bench_rows(corpus)]


def render(rows: list[dict]) -> str:
    head = "| stage | CPU-s | share of the build | MB per CPU-s alone | note |"
    lines = [head, "|---|---|---|---|---|"]
    for r in rows:
        rate = "" if r["mb_per_cpu_s"] is None else f"{r['mb_per_cpu_s']}"
        note = r.get("note", "")
        lines.append(f"| {r['stage']} | {r['cpu_s']} | {r['share']:.0%} | {rate} | {note} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", required=True, help="a folder of .txt files, reference format")
    ap.add_argument("--mb", type=float, default=20.0, help="MB of text to profile (default: 20)")
    ap.add_argument("--vocab", required=True, help="the vocab.txt to build with")
    args = ap.parse_args(argv)
    files, size = slice_files(args.input, args.mb)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        print(render(profile(files, size, args.vocab, tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
