"""Validator throughput on 128-piece rows: the target is >= 1 million rows/s per core.

Writes a synthetic shard set (`schemas.synthetic`: seq 128, 8 shards, about `--rows` rows that
follow the build's statistics) into a temporary directory, then measures, best of `--repeats`:
- the row rules alone (`row_findings` over every record batch, shards already in memory);
- the whole `validate` (manifest, vocab, files, sha256, Arrow structure, every row, the set's
  statistics) with and without sha256; sha256 runs in a second thread, so wall time can be
  below CPU time; "per core" figures divide by the CPU time of all threads;
- sha256 alone, to read the cost of hashing off the figures above;
- `inspect`'s summary (row lengths and masks per row from the Arrow offsets).

    python -m bench.validate_bench [--rows 1000000] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import pyarrow as pa

from bench.rows import rows_for
from schemas.inspection import summarize
from schemas.reader import ShardSet
from schemas.row_batch import RowRules
from schemas.rows import row_findings
from schemas.shard import ShardColumns
from schemas.synthetic import SyntheticConfig, write_synthetic_set
from schemas.validate.files import sha256_file
from schemas.validate.run import validate
from schemas.validate.state import ValidateOptions


def _timed(fn, repeats: int) -> tuple[float, float, object]:
    """Best wall and best CPU seconds of `repeats` calls, and the last result."""
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), out


_row = rows_for("validate", digits=0)


def _kernel(directory: str, repeats: int) -> tuple[float, int]:
    """CPU seconds of the row rules over every batch held in memory, and the row count."""
    ss = ShardSet.open(directory)
    rules = RowRules.build(ss.vocab, len(ss.vocab), ss.vocab.special_ids, ss.shard_config)
    batches = []
    for path in ss.paths:
        reader = pa.ipc.open_file(pa.memory_map(path))
        for i in range(reader.num_record_batches):
            table = pa.Table.from_batches([reader.get_batch(i)])
            batches.append(ShardColumns.from_table(table))
    for c in batches:  # touch every page once
        row_findings(c, rules)
    _, cpu, _ = _timed(lambda: [row_findings(c, rules) for c in batches], repeats)
    return cpu, sum(c.num_rows for c in batches)


def _validate_rows(directory: str, n: int, what: str, repeats: int) -> list[dict]:
    """The whole `validate`, with and without sha256: rows/s per core and wall."""
    figures = []
    for hashes, label in ((True, "with sha256"), (False, "without sha256")):
        options = ValidateOptions(hashes=hashes)
        wall, cpu, report = _timed(lambda o=options: validate(directory, o), repeats)
        if not report.ok:
            raise SystemExit(f"the synthetic set did not validate:\n{report.to_text()}")
        figures.append(
            _row(
                f"validate {label}, rows/s per core",
                n / cpu,
                "rows/s",
                f"CPU time of all threads; {what}",
            )
        )
        figures.append(
            _row(f"validate {label}, rows/s wall", n / wall, "rows/s", f"page cache warm; {what}")
        )
    return figures


def run(rows: int = 1_000_000, repeats: int = 3) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="validate-bench-") as tmp:
        directory = os.path.join(tmp, "set")
        start = time.perf_counter()
        manifest = write_synthetic_set(directory, SyntheticConfig(rows=rows, shards=8, seed=0))
        written = time.perf_counter() - start
        n, mb = manifest.rows, sum(e.bytes for e in manifest.shards) / 1e6
        what = f"{n:,} rows of <= 128 pieces, {len(manifest.shards)} shards, {mb:.0f} MB"
        kernel_cpu, kernel_rows = _kernel(directory, repeats)
        figures = [
            _row(
                "row rules, rows/s per core",
                kernel_rows / kernel_cpu,
                "rows/s",
                f"row_findings on batches in memory; {what}",
            )
        ]
        figures += _validate_rows(directory, n, what, repeats)
        paths = ShardSet.open(directory).paths
        _, cpu, _ = _timed(lambda: [sha256_file(p) for p in paths], repeats)
        figures.append(
            _row(
                "sha256 alone, MB/s per core",
                mb / cpu,
                "MB/s",
                f"hashlib (OpenSSL) over the {mb:.0f} MB of shards",
            )
        )
        wall, _, _ = _timed(lambda: summarize(ShardSet.open(directory)), repeats)
        figures.append(
            _row(
                "inspect summary, rows/s wall",
                n / wall,
                "rows/s",
                "lengths and masks per row from the Arrow offsets",
            )
        )
        figures.append(
            _row(
                "synthetic set written, rows/s",
                n / written,
                "rows/s",
                "schemas.synthetic, setting up this benchmark",
            )
        )
        return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the synthetic set")
    p.add_argument("--repeats", type=int, default=3, help="timed runs; the best is reported")
    p.add_argument("--json", metavar="FILE", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    figures = run(args.rows, args.repeats)
    width = max(len(f["metric"]) for f in figures)
    for f in figures:
        print(f"{f['area']:<9} {f['metric']:<{width}} {f['value']:>12,} {f['unit']:<7} {f['note']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
