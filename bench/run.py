"""`make bench`: every benchmark's figures as one table, as JSON in bench/results/bench.json,
and into the committed store that docs/benchmarks.md's current figures are rendered from.

    python -m bench.run                       # all areas (pipeline needs `make corpora` first)
    python -m bench.run --only model validate # some areas
    python -m bench.run --only pipeline --pipeline-slice-mb 5   # a quicker side-by-side
    python -m bench.run --pipeline-mb 200
    python -m bench.run --only lddl --no-store  # a trial: the store and the page stay as they are

Each area that ran without failing replaces its file in bench/figures/ (`<area>.json`: its rows
with the date, host, CPUs, load, commit, files changed from the commit or new and not ignored
by git, seconds and arguments), and docs/benchmarks.md's generated blocks are rendered again
(bench/report.py). Adding or refreshing an area is that one command followed by a commit of
bench/figures/<area>.json and docs/benchmarks.md; a run made elsewhere with `--out FILE` is
added by `python -m bench.report --add FILE`. Timings are measurements on the machine at hand, never
assertions in tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench import report
from bench.rows import table

AREAS = (
    "pipeline",
    "profile",
    "wikipedia",
    "lddl",
    "validate",
    "export",
    "model",
    "scale",
    "dask",
    "gcs",
)


def run_area(area: str, args) -> list[dict]:
    if area == "pipeline":
        from bench.reference import side_by_side

        return side_by_side.run(side_by_side.config_from(args, "pipeline-"))
    if area == "profile":  # where a 1-worker build's CPU time goes, stage by stage
        from bench import stage_profile

        return stage_profile.run()
    if area == "wikipedia":
        from bench import wiki_bench

        return wiki_bench.run(os.environ.get("DATA", "data"))
    if area == "lddl":  # NVIDIA's LDDL beside our build, same documents (bench/lddl_env.sh)
        from bench import lddl_bench

        return lddl_bench.run(args.lddl_mb)
    if area == "validate":
        from bench import validate_bench

        return validate_bench.run()
    if area == "export":  # HDF5, TFRecord, MDS of one build: speed, and TensorFlow's reading
        from bench import export_bench

        return export_bench.run(os.environ.get("DATA", "data"))
    if area == "scale":  # local builds of 0.2 to 2 GB: memory, temporary disk, time
        from bench import scale_bench

        return scale_bench.run(os.environ.get("DATA", "data"), args.scale_mb)
    if area == "gcs":  # a gs:// build against the local GCS emulator: requests and bytes per GB
        from bench import gcs_bench

        return gcs_bench.run(os.environ.get("DATA", "data"))
    if area == "dask":
        from bench import dask_bench

        return dask_bench.rows(os.environ.get("DATA", "data"))
    from bench import model_bench

    return model_bench.run()


def provenance() -> dict:
    """Where and on what code a run measured: host, CPUs, load, the interpreter (whose own speed
    is part of every figure), the commit and any files changed from it in the working tree, new
    files that git does not ignore included (a figure measured on uncommitted code says so)."""
    from bench.reference.sides import interpreter

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("diff", "--name-only", "HEAD").splitlines()
    # from the top of the work tree whatever the current folder, its paths as diff gives them
    untracked = git("ls-files", "--others", "--exclude-standard", "--full-name", ":/")
    untracked = untracked.splitlines()
    changed = sorted(set(changed) | set(untracked))
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
        "python": interpreter(),
        "commit": git("rev-parse", "HEAD"),
        "changed": changed,
    }


def area_argv(area: str, args, ap: argparse.ArgumentParser) -> list[str]:
    """The arguments that gave one area's figures: `--only AREA` and its own non-defaults."""
    argv = ["--only", area]
    for name, value in vars(args).items():
        if name.startswith(area + "_") and value != ap.get_default(name):
            flag = "--" + name.replace("_", "-")
            argv += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    return argv


def run_areas(args, ap: argparse.ArgumentParser) -> tuple[dict[str, dict], list[str]]:
    """Each area's run (provenance, seconds, rows) and the areas that failed."""
    runs, failed = {}, []
    for area in args.only:
        start = {"at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        start.update(provenance())
        began = time.perf_counter()
        try:
            rows = run_area(area, args)
        except (Exception, SystemExit) as e:  # one area failing still reports the others
            failed.append(area)
            print(f"{area}: failed: {e}", file=sys.stderr)
            traceback.print_exc()
            continue
        runs[area] = {
            **start,
            "load_after": round(os.getloadavg()[0], 2),
            "seconds": round(time.perf_counter() - began),
            "argv": area_argv(area, args, ap),
            "rows": rows,
        }
    return runs, failed


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", nargs="*", choices=AREAS, default=list(AREAS))
    from bench.reference.side_by_side import add_args

    add_args(ap, "pipeline-")
    ap.add_argument(
        "--scale-mb",
        type=int,
        nargs="+",
        default=[200, 500, 1000, 2000],
        help="corpus sizes of the scale series (default: 200 500 1000 2000)",
    )
    ap.add_argument(
        "--lddl-mb", type=float, default=60.0, help="MB of books text per corpus for LDDL"
    )
    ap.add_argument("--out", default="bench/results/bench.json")
    ap.add_argument(
        "--no-store",
        action="store_true",
        help="leave bench/figures/ and docs/benchmarks.md as they are",
    )
    ap.add_argument("--store", type=Path, default=report.STORE, help="default: bench/figures")
    ap.add_argument("--doc", type=Path, default=report.DOC, help="default: docs/benchmarks.md")
    return ap


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    runs, failed = run_areas(args, ap)
    rows = [r for run in runs.values() for r in run["rows"]]
    print(table(rows))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "failed": failed, "runs": runs}, f, indent=1)
    print(f"wrote {args.out}")
    if runs and not args.no_store:
        for path in report.store_runs(runs, args.store):
            print(f"stored {path}")
        if report.write_doc(args.doc, args.store):
            print(f"rendered {args.doc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
