"""One figure of `make bench`: the row {area, metric, value, unit, note} that bench/run.py prints,
writes to bench/results/bench.json and keeps in bench/figures/, and bench/report.py renders."""

from __future__ import annotations

from functools import partial


def row(
    metric: str, value, unit: str, note: str = "", area: str = "", digits: int | None = None
) -> dict:
    """A figure of `area`; a float value rounded to `digits` places (0: to an int) if given."""
    if not area:
        raise ValueError(f"bench row {metric!r}: no area")
    if digits is not None and isinstance(value, float):
        value = round(value) if digits == 0 else round(value, digits)
    return {"area": area, "metric": metric, "value": value, "unit": unit, "note": note}


def rows_for(area: str, digits: int | None = None):
    """`row` for one area: `rows_for("model")(metric, value, unit, note)`."""
    return partial(row, area=area, digits=digits)


def in_turn(run_one, workers, rounds: int) -> dict[int, list]:
    """`run_one(w, k)` for each worker count `w` and round `k`, the counts taken in turn (for
    (2, 1) and 2 rounds: 2, 1, 2, 1): this machine's speed drifts by several percent between
    builds a minute apart, so a scaling figure keeps each count's fastest build, the one least
    slowed by the machine. Returns every result by count, in the order run."""
    tries: dict[int, list] = {w: [] for w in dict.fromkeys(workers)}
    for k in range(rounds):
        for w, runs in tries.items():
            runs.append(run_one(w, k))
    return tries


def tries_note(tries: dict[int, list[float]] | None) -> str:
    """ "; the fastest of builds run in turn (...)", every count's walls, when any was repeated."""
    if not tries or max(len(t) for t in tries.values()) < 2:
        return ""
    each = "; ".join(
        f"{w} worker{'s' if w > 1 else ''} {', '.join(f'{t:.1f}' for t in tries[w])} s"
        for w in sorted(tries)
    )
    return f"; the fastest of builds run in turn ({each})"


def scaling_rows(
    make_row,
    name: str,
    walls: dict[int, float],
    pair: list[float],
    what: str,
    tries: dict[int, list[float]] | None = None,
):
    """The rows of 2 workers against 1 (`walls[w]`: wall seconds of one build with w workers,
    the fastest of `tries[w]` when the builds were repeated) and of what the machine allows:
    two 1-worker builds of the same input started together (`pair`, their walls), so their
    start-up runs in parallel too. `make_row` is an area's `rows_for`; `what` names the input
    in the notes."""
    alone = walls[1]
    note = f"{what}: {alone:.1f} s with 1 worker, {walls[2]:.1f} s with 2; target >= 1.8"
    note += tries_note(tries)
    limit = (
        f"2 x {alone:.1f} s of work in {max(pair):.1f} s: two 1-worker builds of the same "
        "input started together, so start-up runs in parallel too"
    )
    both = round(2 * alone / max(pair), 2)
    return [
        make_row(f"{name}: 2 workers against 1, wall", round(alone / walls[2], 2), "x", note),
        make_row(f"{name}: two 1-worker builds at once", both, "x", limit),
    ]


def table(rows: list[dict]) -> str:
    """The rows as the aligned text table `make bench` prints."""
    lines = [f"{'area':<10} {'metric':<52} {'value':>12} {'unit':<14} note", "-" * 110]
    for r in rows:
        value = f"{r['value']:,}" if isinstance(r["value"], (int, float)) else str(r["value"])
        lines.append(f"{r['area']:<10} {r['metric']:<52} {value:>12} {r['unit']:<14} {r['note']}")
    return "\n".join(lines)
