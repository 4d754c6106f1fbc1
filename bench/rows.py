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
