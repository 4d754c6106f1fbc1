"""`make bench`: every benchmark's figures as one table, and as JSON in bench/results/bench.json.

    python -m bench.run                       # all areas (pipeline needs `make corpora` first)
    python -m bench.run --only model validate # some areas
    python -m bench.run --only pipeline --pipeline-slice-mb 5   # a quicker side-by-side
    python -m bench.run --pipeline-mb 200

Timings are measurements on the machine at hand, never assertions in tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import traceback

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

        return wiki_bench.run()
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


def table(rows: list[dict]) -> str:
    lines = [f"{'area':<10} {'metric':<52} {'value':>12} {'unit':<14} note", "-" * 110]
    for r in rows:
        value = f"{r['value']:,}" if isinstance(r["value"], (int, float)) else str(r["value"])
        lines.append(f"{r['area']:<10} {r['metric']:<52} {value:>12} {r['unit']:<14} {r['note']}")
    return "\n".join(lines)


def main(argv=None) -> int:
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
    args = ap.parse_args(argv)
    rows, failed = [], []
    for area in args.only:
        try:
            rows += run_area(area, args)
        except (Exception, SystemExit) as e:  # one area failing still reports the others
            failed.append(area)
            print(f"{area}: failed: {e}", file=sys.stderr)
            traceback.print_exc()
    print(table(rows))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "rows": rows,
                "failed": failed,
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "at": datetime.datetime.now().isoformat(),
            },
            f,
            indent=1,
        )
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
