"""The current figures of docs/benchmarks.md, rendered from the committed store bench/figures/.

The store holds one file per area of `python -m bench.run`, `bench/figures/<area>.json`: the
rows that area's latest run produced, with when, where and on what code it ran (date, host,
CPUs, load, commit and the files changed from it, seconds, arguments). docs/benchmarks.md holds
one generated block per area between `<!-- figures: AREA -->` and `<!-- /figures -->`; nothing
else of the page is generated, and tests/bench/test_report.py fails when a block differs from
the store's rendering.

    python -m bench.report                 # re-render docs/benchmarks.md from the store
    python -m bench.report --check         # exit 1 if the page's blocks are not the store's
    python -m bench.report --add FILE.json # store the areas a bench.run JSON holds, re-render

`python -m bench.run --only AREA` stores the areas it ran and re-renders by itself; `--add`
takes the JSON of a run made elsewhere (`--out`, or bench/results/bench.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "bench" / "figures"
DOC = ROOT / "docs" / "benchmarks.md"
# A block's markers stand on lines of their own (the page's prose may quote them inline).
BLOCK = re.compile(r"^(<!-- figures: ([\w-]+) -->\n)(.*?)^(<!-- /figures -->)$", re.M | re.S)
OPENING = re.compile(r"^<!-- figures: ([\w-]+) -->$", re.M)


def load_store(store: Path = STORE) -> dict[str, dict]:
    """The stored runs by area."""
    records = {}
    for path in sorted(Path(store).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("area") != path.stem:
            raise SystemExit(f"{path}: holds area {record.get('area')!r}, not {path.stem!r}")
        records[path.stem] = record
    return records


def store_runs(runs: dict[str, dict], store: Path = STORE) -> list[Path]:
    """Write each area's run to `store/<area>.json`, replacing that area's previous run."""
    Path(store).mkdir(parents=True, exist_ok=True)
    written = []
    for area, run in runs.items():
        path = Path(store) / f"{area}.json"
        path.write_text(json.dumps({"area": area, **run}, indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def runs_of(bench_json: Path) -> dict[str, dict]:
    """The per-area runs of a bench.run JSON file."""
    data = json.loads(Path(bench_json).read_text())
    if not data.get("runs"):
        raise SystemExit(f"{bench_json}: no per-area runs in it (a bench.run that records them)")
    return data["runs"]


def _value(v) -> str:
    return f"{v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def provenance_line(area: str, record: dict) -> str:
    """When, where and on what code the rows were measured."""
    at = datetime.datetime.fromisoformat(record["at"]).astimezone(datetime.timezone.utc)
    line = (
        f"Measured {at:%Y-%m-%d %H:%M} UTC on `{record['host']}` ({record['cpus']} CPUs, load "
        f"average {record['load']} at the start, {record['load_after']} at the end"
    )
    if record.get("python"):  # runs stored before the interpreter was recorded lack it
        line += f"; {record['python']}"
    line += f"), commit `{record['commit'][:7]}`"
    changed = record.get("changed") or []
    if changed:
        files = f"{len(changed)} file" + "s" * (len(changed) != 1)
        line += f" with {files} changed from it (listed in bench/figures/{area}.json)"
    command = " ".join(["python -m bench.run", *record.get("argv", ["--only", area])])
    return line + f": `{command}`, {record['seconds']:,} s."


def render_area(area: str, record: dict | None) -> str:
    """The generated block of one area: its provenance and its rows as a table."""
    if record is None:
        return f"Not in the store yet: `python -m bench.run --only {area}` measures it.\n"
    rows = record["rows"]
    mixed = any(r["area"] != area for r in rows)
    head = ["area"] * mixed + ["metric", "value", "unit", "note"]
    lines = [provenance_line(area, record), "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for r in rows:
        cells = [r["area"]] * mixed + [r["metric"], _value(r["value"]), r["unit"], r["note"]]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render(text: str, records: dict[str, dict]) -> str:
    """`text` with every figures block replaced by its area's rendering from `records`."""
    named = OPENING.findall(text)
    blocks = [m.group(2) for m in BLOCK.finditer(text)]
    if named != blocks:
        raise SystemExit("docs: a `<!-- figures: AREA -->` block lacks its `<!-- /figures -->`")
    twice = sorted({a for a in blocks if blocks.count(a) > 1})
    if twice:
        raise SystemExit(f"docs: figures blocks of {', '.join(twice)} appear more than once")
    unplaced = sorted(set(records) - set(blocks))
    if unplaced:
        raise SystemExit(f"docs: no `<!-- figures: AREA -->` block for {', '.join(unplaced)}")
    return BLOCK.sub(
        lambda m: m.group(1) + render_area(m.group(2), records.get(m.group(2))) + m.group(4), text
    )


def write_doc(doc: Path = DOC, store: Path = STORE) -> bool:
    """Re-render `doc` from `store`; whether it changed."""
    text = Path(doc).read_text()
    new = render(text, load_store(store))
    if new != text:
        Path(doc).write_text(new)
    return new != text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is not the store's")
    ap.add_argument("--add", nargs="+", metavar="FILE", default=[], help="bench.run JSON files")
    ap.add_argument("--store", type=Path, default=STORE, help="default: bench/figures")
    ap.add_argument("--doc", type=Path, default=DOC, help="default: docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.check:
        if render(args.doc.read_text(), load_store(args.store)) != args.doc.read_text():
            print(f"{args.doc}: figures differ from {args.store}: python -m bench.report")
            return 1
        return 0
    for path in args.add:
        for written in store_runs(runs_of(path), args.store):
            print(f"stored {written}")
    if write_doc(args.doc, args.store):
        print(f"rendered {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
