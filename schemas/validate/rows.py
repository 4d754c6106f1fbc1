"""Every row of one shard against the row rules (`schemas.rows`), record batch by record
batch: each broken rule quoted on a few rows (`ValidateOptions.examples`), the rest counted."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from schemas.row_batch import RowRules
from schemas.rows import ROW_RULE_NAMES, BatchStats, describe_row, row_findings
from schemas.shard import ShardColumns, row_lengths_differ
from schemas.text import printable
from schemas.validate.state import Context


def check_batches(
    ctx: Context, rel: str, reader: pa.ipc.RecordBatchFileReader
) -> BatchStats | None:
    """Row rules batch by batch; None when the shard turns out structurally broken."""
    rules = ctx.rules
    total = BatchStats()
    if rules is None:
        ctx.checks.skip(ROW_RULE_NAMES, "not run: no usable config or special ids")
    quoted = dict.fromkeys(ROW_RULE_NAMES, 0)
    failing = dict.fromkeys(ROW_RULE_NAMES, 0)
    first_row = 0
    for b in range(reader.num_record_batches):
        cols = _read_batch(ctx, rel, reader, b, first_row)
        if cols is None:
            return None
        if rules is not None:
            bad, stats = row_findings(cols, rules)
            total.add(stats)
            _quote(ctx, rel, cols, rules, bad, first_row, quoted, failing)
        else:
            total.rows += cols.num_rows
        first_row += cols.num_rows
    if rules is not None and rules.continuation is None:
        ctx.checks.skip(("whole_words",), "not run: the vocab is not the one of the shards")
    for key in ROW_RULE_NAMES:
        extra = failing[key] - quoted[key]
        if extra > 0:
            ctx.checks[key].failures.append(f"{rel}: {extra:,} more rows break this rule")
    return total


def _read_batch(
    ctx: Context, rel: str, reader: pa.ipc.RecordBatchFileReader, b: int, first_row: int
) -> ShardColumns | None:
    """Record batch `b`, fully validated; None (and a failure) when its Arrow data is broken."""
    try:
        batch = reader.get_batch(b)
        batch.validate(full=True)
        if any(_nulls(col) for col in batch.columns):
            raise ValueError("null values in non-nullable columns or their lists")
    except (pa.ArrowException, OSError, ValueError) as e:
        ctx.checks["arrow"].fail(
            f"{rel} record batch {b} (from row {first_row:,}): invalid Arrow data "
            f"({printable(str(e))}); the shard is corrupt: rebuild it (its remaining rows are "
            "not checked)"
        )
        return None
    if not _labels_paired(ctx, rel, batch, first_row):
        return None
    return ShardColumns.from_table(pa.Table.from_batches([batch]))


def _nulls(col: pa.Array) -> int:
    """Nulls in a column or, for a list column, among its items."""
    if isinstance(col, pa.ListArray):
        return col.null_count + col.values.null_count
    return col.null_count


def _labels_paired(ctx: Context, rel: str, batch: pa.RecordBatch, first_row: int) -> bool:
    """Each row's masked_labels list as long as its masked_positions list: a label is paired
    with a position by index, so a row with one label too few or too many shifts every later
    pair. The failing rows are quoted (the shard's remaining rows are not checked)."""
    positions = batch.column("masked_positions").offsets.to_numpy().astype(np.int64)
    labels = batch.column("masked_labels").offsets.to_numpy().astype(np.int64)
    bad = np.flatnonzero(row_lengths_differ(positions - positions[0], labels - labels[0]))
    if len(bad) == 0:
        return True
    t = ctx.checks["arrow"]
    for r in bad[: max(ctx.options.examples, 1)]:
        t.fail(
            f"{rel} row {first_row + int(r):,}: {positions[r + 1] - positions[r]} masked "
            f"positions but {labels[r + 1] - labels[r]} masked labels; the lists must pair up: "
            "the shard is corrupt, rebuild it (its remaining rows are not checked)"
        )
    extra = len(bad) - max(ctx.options.examples, 1)
    if extra > 0:
        t.fail(f"{rel}: {extra:,} more rows whose labels and positions differ in number", extra)
    return False


def _quote(
    ctx: Context,
    rel: str,
    cols: ShardColumns,
    rules: RowRules,
    bad: dict[str, np.ndarray],
    first_row: int,
    quoted: dict[str, int],
    failing: dict[str, int],
) -> None:
    """Counts each rule's failing rows; quotes them until the shard has its examples."""
    ctx.checks.ran(*bad)
    for key, rows in bad.items():
        where = np.flatnonzero(rows)
        if len(where) == 0:
            continue
        failing[key] += len(where)
        ctx.checks[key].failing += len(where)
        for r in where[: max(0, ctx.options.examples - quoted[key])]:
            detail = describe_row(key, cols, int(r), rules)
            ctx.checks[key].failures.append(f"{rel} row {first_row + int(r):,}: {detail}")
            quoted[key] += 1
