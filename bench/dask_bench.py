"""The same build on the local runner and on a Dask cluster of separate processes, measured.

    python -m bench.dask_bench --workers 2 --vocab /tmp/m/vocab/vocab.txt

The cluster is a `dask scheduler` and `--workers` `dask worker` processes (one thread each) on
localhost, talking over TCP, as on a real cluster but on one machine; the workers start with the
config file docs/runners.md gives for a standing cluster's (glibc's own trim threshold). Both
runs are measured the same way, by one poll (`bench.procmem.run_measured`) of every process that
works for the build: the local runner's build tree (its driver and the workers it forks); for
Dask, the build's tree plus, polled at the same instants, the scheduler's and each worker's tree
(nanny included), which were started before and stay up after, as a standing cluster's. Per run:
wall seconds; CPU seconds of all those processes from the build's start to its end (the
cluster's own start-up before the build is not counted); MB (10^6 bytes) of text per CPU-second;
the peak memory of all those processes together and of the largest single one, in PSS (else RSS,
and the row says so). The two shard sets are compared byte for byte.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from bench.procmem import Measured, dir_bytes, run_measured
from bench.rows import row as bench_row
from pipeline.runners.dask_runner import worker_config

MB = 1e6  # decimal, as the other areas; memory in GiB = 2**30
GIB = 1 << 30
CORPUS = f"{os.environ.get('DATA', 'data')}/corpora/kernel-docs-200mb/text"
# 12 of the 22 copies: about 112 MB
PATTERNS = ("copy-00*", "copy-01[01]")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dask_cluster(workers: int, scratch: str):
    """A scheduler and `workers` single-threaded worker processes on localhost; yields
    (address, process ids of the scheduler and the workers). All are stopped on exit."""
    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://127.0.0.1:{free_port()}"
    port = address.rsplit(":", 1)[1]
    # the workers import this checkout's code (and the tests' DoFns), as the driver does
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    # and start as docs/runners.md tells a standing cluster's workers to: a config file
    # that unsets the nanny's glibc trim threshold (`worker_config`)
    config = Path(scratch) / "dask-config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "bert-shards.yaml").write_text(yaml.safe_dump(worker_config()))
    env = {**os.environ, "PYTHONPATH": path, "DASK_CONFIG": str(config)}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"], **quiet
        )
    ]
    try:
        for i in range(workers):
            cmd = [dask, "worker", address, "--nworkers", "1", "--nthreads", "1"]
            cmd += ["--no-dashboard", "--local-directory", os.path.join(scratch, f"worker-{i}")]
            procs.append(subprocess.Popen(cmd, **quiet))
        wait_for_workers(address, workers)
        yield address, [p.pid for p in procs]
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_for_workers(address: str, workers: int, timeout: float = 120) -> None:
    from distributed import Client

    with Client(address, timeout=timeout) as client:
        client.wait_for_workers(workers, timeout=timeout)


def digests(out: Path) -> dict[str, str]:
    files = sorted(out.glob("shards/*.arrow")) + [out / "vocab.txt"]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def build_cmd(inputs: str, out: Path, workers: int | None, vocab: str | None) -> list[str]:
    """The build's command; `workers` for the local runner (a cluster has its own: None)."""
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs, "--out", str(out)]
    cmd += ["--workers", str(workers)] if workers is not None else []
    cmd += ["--overwrite", "--progress-seconds", "0"]
    return cmd + (["--vocab", vocab] if vocab else [])


def record(runner: str, text_bytes: int, got: Measured) -> dict:
    """One run's figures, measured the same way whichever the runner: CPU of the build's tree
    (the kernel's count of what it reaped, or the polled tree, whichever is larger) plus that of
    the trees polled beside it (none for the local runner); memory of them all together."""
    cpu = max(got.reaped_cpu, got.tree_cpu) + got.beside_cpu
    return {
        "runner": runner,
        "mb": round(text_bytes / MB, 1),
        "wall_s": round(got.wall, 1),
        "cpu_s": round(cpu, 1),
        "beside_cpu_s": round(got.beside_cpu, 1),
        "mb_per_cpu_s": round(text_bytes / MB / max(cpu, 1e-9), 3),
        "memory": got.memory,
        "peak_gib": round(got.peak / GIB, 3),
        "peak_process_gib": round(got.peak_one / GIB, 3),
    }


def measure(cmd: list[str], beside=()) -> Measured:
    """A build polled every half second, with the trees of `beside`."""
    return run_measured(cmd, every=0.5, beside=beside)


def run_local(inputs: str, out: Path, workers: int, vocab, text_bytes: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    return record("local", text_bytes, measure(build_cmd(inputs, out, workers, vocab)))


def run_dask(inputs: str, out: Path, workers: int, vocab, text_bytes: int, scratch: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    with dask_cluster(workers, scratch) as (address, pids):
        cmd = build_cmd(inputs, out, None, vocab)
        cmd += ["--runner", "DaskRunner", "--dask-address", address]
        return record("dask", text_bytes, measure(cmd, beside=pids))


def compare(corpus: Path, patterns, workers: int, vocab, scratch: str) -> list[dict]:
    """The same build on the local runner and on a Dask cluster of `workers` processes."""
    # globs, so that ids are taken from the corpus folder: the copies' files share names
    inputs = ",".join(f"text:{corpus / p}/*" for p in patterns)
    text_bytes = sum(map(dir_bytes, (d for p in patterns for d in corpus.glob(p))))
    scratch = Path(scratch)
    local = run_local(inputs, scratch / "local", workers, vocab, text_bytes)
    print(json.dumps(local), flush=True)
    on_dask = run_dask(inputs, scratch / "dask", workers, vocab, text_bytes, str(scratch / "tmp"))
    on_dask["identical_to_local"] = digests(scratch / "local") == digests(scratch / "dask")
    print(json.dumps(on_dask), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return [local, on_dask]


def note_of(r: dict, workers: int) -> str:
    """The note of a row: what each figure of the run counts."""
    what = (
        "the build's tree and, polled with it, the scheduler's and workers' trees "
        f"({r['beside_cpu_s']} CPU s of them)"
        if r["runner"] == "dask"
        else "the build's tree (its driver and forked workers)"
    )
    note = (
        f"{r['mb']} MB (10^6 bytes), {workers} workers: {r['wall_s']} s wall, {r['cpu_s']} CPU s "
        f"of {what}, start to end; peak {r['peak_gib']} GiB of them together, largest "
        f"process {r['peak_process_gib']} GiB ({r['memory']})"
    )
    if "identical_to_local" in r:
        note += f"; shards identical to local: {r['identical_to_local']}"
    return note


def rows(data: str = "data", workers: int = 2) -> list[dict]:
    """`make bench`'s rows: MB per CPU-second and peak memory, local and Dask."""
    corpus = Path(data) / "corpora" / "kernel-docs-200mb" / "text"
    out = []
    for r in compare(corpus, PATTERNS, workers, None, "out/bench-dask"):
        metric = f"build rate, {r['runner']} runner"
        out.append(bench_row(metric, r["mb_per_cpu_s"], "MB/CPU-s", note_of(r, workers), "dask"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", default=CORPUS, help="a folder of reference-format text")
    ap.add_argument(
        "--patterns", nargs="+", default=list(PATTERNS), help="folders in --corpus (globs)"
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--vocab", default=None, help="a vocab.txt to build with (else trained)")
    ap.add_argument("--scratch", default="out/bench-dask")
    ap.add_argument("--json", default="bench/results/dask.json")
    args = ap.parse_args(argv)
    rows = compare(Path(args.corpus), args.patterns, args.workers, args.vocab, args.scratch)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
