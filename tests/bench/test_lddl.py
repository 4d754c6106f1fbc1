"""The LDDL side of the bench: its input layout and how its rows are read (LDDL itself runs in
its own environment, in `make bench` only)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.lddl_bench import figures, lddl_rows, lddl_source


def test_source_is_a_book_a_line_as_lddls_shard_books_writes(tmp_path) -> None:
    copy = tmp_path / "copy-000"
    (copy / "sub").mkdir(parents=True)
    (copy / "a.txt").write_text("\ufeffFirst line.\n\n  Second  para.\n", encoding="utf-8")
    (copy / "sub" / "b.txt").write_text("One.\nTwo.\n", encoding="utf-8")
    out = lddl_source([str(copy)], str(tmp_path / "source"), files=2)
    lines = [
        (tmp_path / "source" / f"{k}.txt").read_text(encoding="utf-8").splitlines() for k in (0, 1)
    ]
    assert out == str(tmp_path / "source")
    assert lines == [["copy-000_a.txt First line. Second  para."], ["copy-000_sub_b.txt One. Two."]]


def npy(values) -> bytes:
    f = io.BytesIO()
    np.save(f, np.array(values, dtype=np.uint16))
    return f.getvalue()


def test_rows_are_read_and_their_masks_sorted_into_the_three_kinds(tmp_path) -> None:
    table = pa.table(
        {
            "A": ["the [MASK] sat", "dog"],
            "B": ["on mat", "ran far away"],
            "is_random_next": [False, True],
            "num_tokens": [8, 7],
            "masked_lm_positions": [npy([2, 5]), npy([1, 3])],
            "masked_lm_labels": ["cat on", "dog far"],
        }
    )
    pq.write_table(table, tmp_path / "part.0.parquet")
    rows = lddl_rows(str(tmp_path))
    # row 1: position 2 is [MASK] (label cat), 5 is "on" (label on: unchanged)
    # row 2: position 1 is "dog" (unchanged), 3 is "ran" (label far: another piece)
    assert rows.rows == 2 and list(rows.lengths) == [8, 7] and list(rows.selected) == [2, 2]
    assert rows.kinds == (1, 2, 1)
    got = figures(rows, mb=0.5)
    assert got["instances per MB"] == 4 and got["random-next share (rows)"] == 0.5
    assert got["masked pieces per row"] == 2 and got["[MASK] share of selected pieces"] == 0.25
