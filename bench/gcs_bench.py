"""What a gs:// build costs the store: requests and bytes per GB of text, against the local GCS
emulator (tests/gcs_emulator.py), with every request counted by its loopback proxy.

    python -m bench.gcs_bench            # DATA=data: the kernel-docs corpora of `make corpora`

Each corpus is uploaded first (not counted), then built from gs:// into gs:// with one worker.
Per build: requests, bytes read and written (HTTP bodies), their ratio, and the requests of
each kind of object (input files, chunk files, units reads, shards, markers, listings), with
the counts they grow with (input files, units files, buckets), so that docs/scale.md can carry
them to BERT's corpus. The shards are not compared here (the tests compare them with local
builds).

The builds do not do the same work: the first ("text") trains its vocab, and its requests and
bytes include that step's (reading the sentences for the sample, writing vocab.txt); the others
are given that vocab and have no vocab step. Every row's note says which its build did, so that
per-GB figures set side by side across builds are read with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import urllib.parse
from collections import Counter
from functools import partial

from bench.rows import row as bench_row
from bench.rows import table

GB = 1e9


def kind_of(method: str, path: str) -> str:
    """What a request was for, from its path (and an upload's object name after '#')."""
    url, _, name = path.partition("#")
    route = urllib.parse.unquote(url.split("?", 1)[0])
    if route.startswith("/batch/"):
        return "batch delete"
    if "/copyTo/" in route:
        return "shard copy"
    if route.rstrip("/").endswith("/o") and method == "GET":
        return "listing"
    target = name or route.split("/o/", 1)[-1]
    for part, label in (
        ("/tmp/units/", "units"),
        ("/tmp/documents/", "documents"),
        ("/tmp/sentences/", "sentences"),
        ("/tmp/progress/", "progress marker"),
        ("/tmp/items/", "item marker"),
        ("/.building/bucket-", "bucket shard"),
        ("/.building/", "build record"),
        ("/in/", "input"),
    ):
        if part in "/" + target:
            if label == "units" and target.endswith(".index"):
                label = "units index"
            break
    else:
        label = "published file"
    verb = {"POST": "write", "PUT": "write", "DELETE": "delete"}.get(method, "read")
    return f"{label} {verb}"


def upload(local: str, url: str) -> tuple[int, int]:
    """Every file under `local` to `url`/...; (files, bytes)."""
    from pipeline.files.fsio import write_bytes

    files = size = 0
    for folder, _, names in os.walk(local):
        for n in sorted(names):
            path = os.path.join(folder, n)
            with open(path, "rb") as f:
                data = f.read()
            write_bytes(f"{url}/{os.path.relpath(path, local)}", data)
            files, size = files + 1, size + len(data)
    return files, size


VOCAB_NOTE = {
    "trained": "vocab trained by this build (its requests and bytes included)",
    "given": "vocab given (the text build's): no vocab step, unlike the text build",
}


def measure(gcs, name: str, inputs: str, out: str, args: list[str], text_bytes: int) -> dict:
    from pipeline.files.fsio import read_text
    from pipeline.shell.cli import main

    gcs.reset_stats()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    start = time.time()
    argv = ["build", "--input", inputs, "--out", out, "--workers", "1", "--progress-seconds", "0"]
    assert main([*argv, *args]) == 0
    seconds = time.time() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    stats, log = gcs.stats(), gcs.request_log()
    kinds = Counter(kind_of(m, p) for m, p, _ in log)
    units_files = {p.split("?")[0] for m, p, _ in log if "tmp%2Funits%2F" in p and m == "GET"}
    units_files = {p.removesuffix(".index") for p in units_files}
    inputs_read = {p.split("?")[0] for m, p, _ in log if "alt=media" in p and "/o/in%2F" in p}
    manifest = json.loads(read_text(f"{out}/manifest.json"))
    return {
        "name": name,
        "vocab": "given" if "--vocab" in args else "trained",
        "text_mb": text_bytes / 1e6,
        "input_files": len(inputs_read),
        "units_files": len(units_files),
        "buckets": len(manifest["shards"]),
        "requests": stats["requests"],
        "bytes_down": stats["bytes_down"],
        "bytes_up": stats["bytes_up"],
        "kinds": dict(sorted(kinds.items())),
        "seconds": seconds,
        "cpu_seconds": after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime,
    }


def rows_of(r: dict) -> list[dict]:
    per_gb = GB / (r["text_mb"] * 1e6)
    note = (
        f"{r['name']}: {r['text_mb']:.1f} MB, {r['input_files']} input files, "
        f"{r['units_files']} units files, {r['buckets']} buckets; {VOCAB_NOTE[r['vocab']]}"
    )

    row = partial(bench_row, note=note, area="gcs")
    out = [
        row(f"{r['name']}: requests per GB of text", round(r["requests"] * per_gb), "requests"),
        row(f"{r['name']}: read per GB of text", round(r["bytes_down"] * per_gb / GB, 2), "GB"),
        row(f"{r['name']}: written per GB of text", round(r["bytes_up"] * per_gb / GB, 2), "GB"),
        row(
            f"{r['name']}: bytes read / bytes written",
            round(r["bytes_down"] / r["bytes_up"], 3),
            "x",
        ),
        row(f"{r['name']}: requests of the build", r["requests"], "requests"),
    ]
    out += [row(f"{r['name']}: {k}", n, "requests") for k, n in r["kinds"].items()]
    return out


def run(data: str = "data") -> list[dict]:
    from tests.gcs_emulator import GcsEmulator

    corpus = os.path.join(data, "corpora", "kernel-docs")
    if not os.path.isdir(corpus):
        raise SystemExit(f"{corpus}: missing; run `make corpora` first")
    saved = dict(os.environ)
    results = []
    with GcsEmulator() as gcs:
        os.environ.update(gcs.env)
        try:
            gcs.create_bucket("bench")
            text = upload(f"{corpus}/text", "gs://bench/in/text")[1]
            books = upload(f"{corpus}/books", "gs://bench/in/books")[1]
            first = measure(gcs, "text", "text:gs://bench/in/text", "gs://bench/text", [], text)
            vocab = ["--vocab", "gs://bench/text/vocab.txt"]
            results.append(first)
            results.append(
                measure(
                    gcs,
                    "text, 1/16 buckets",
                    "text:gs://bench/in/text",
                    "gs://bench/small",
                    [*vocab, "--bucket-tokens", "250000"],
                    text,
                )
            )
            results.append(
                measure(gcs, "books", "books:gs://bench/in/books", "gs://bench/books", vocab, books)
            )
        finally:
            os.environ.clear()
            os.environ.update(saved)
    rows = [row for r in results for row in rows_of(r)]
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/gcs.json", "w") as f:
        json.dump(results, f, indent=1)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=os.environ.get("DATA", "data"))
    args = ap.parse_args(argv)
    print(table(run(args.data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
