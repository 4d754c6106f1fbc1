"""The side-by-side bench's figures as rows of `make bench`'s table: the speed ratios, and the
fidelity table of the reference's rows against our builds' (`bench/fidelity.py`)."""

from __future__ import annotations

from bench.pipeline_runs import SEED, ReferenceRun


def row(metric: str, value, unit: str, note: str = "", area: str = "pipeline") -> dict:
    return {"area": area, "metric": metric, "value": value, "unit": unit, "note": note}


def speed_rows(
    corpus: str, floor: float, reference: float | None, ours: dict[int, float]
) -> list[dict]:
    """Ratios from one run's rates (MB per CPU-second): ours / the reference and ours / floor.
    Without a reference rate (not installed, or it failed) there is no ratio, only a note."""
    rows = []
    if reference is None:
        rows.append(
            row(
                f"{corpus}: ratio to the reference",
                "n/a",
                "",
                "reference not run (bench/reference_env.sh did not install it): no ratio",
            )
        )
    for w, rate in sorted(ours.items()):
        if reference is not None:
            note = f"{rate:.3f} / {reference:.3f} MB per CPU-second, same run"
            rows.append(
                row(
                    f"{corpus}: {w} worker(s) vs the reference",
                    round(rate / reference, 1),
                    "x",
                    note,
                )
            )
        rows.append(
            row(
                f"{corpus}: {w} worker(s), share of the tokenizer floor",
                round(100 * rate / floor),
                "%",
                f"{rate:.3f} / {floor:.3f} MB per CPU-second",
            )
        )
    return rows


def fidelity_rows(corpus: str, table: list[dict], checks: dict[str, tuple[int, int]]) -> list[dict]:
    """The fidelity table as bench rows (value: ours; the note: the reference and the test)."""
    rows = []
    for f in table:
        if f["test"].startswith("z"):
            unit = "pieces" if f["test"] == "z_rows" else f"the spread of {f['seeds']} seeds"
            test = f"z {f['z']:+.1f} by {unit}"
            if f["test"] == "z_seeds":
                test += f" (as if rows were independent: {f['z_rows']:+.1f})"
        else:
            test = (
                f"our seeds differ by up to {f['seed_ks_max']:.4f} (row-level p {f['p_rows']:.1g})"
            )
        within = "within" if f["within"] else "OUTSIDE"
        note = f"reference {f['reference']:.4f}; {test}; {within} sampling error"
        rows.append(row(f"{corpus}: {f['figure']}", round(f["ours"], 4), "", note, "fidelity"))
    for side, (checked, matched) in checks.items():
        rows.append(
            row(
                f"{corpus}: actual-next rows with the reference tokenizer's ids ({side})",
                round(100 * matched / max(checked, 1), 2),
                "%",
                f"{matched} of {checked} sampled rows: A and B each a run of its ids",
                "fidelity",
            )
        )
    return rows


def fidelity(
    ref: ReferenceRun, our_sets: list[str], seed: int = SEED, sample: int = 5000
) -> tuple[list[dict], dict[str, tuple[int, int]]]:
    """The reference's TFRecords against our shard sets (one per seed)."""
    import numpy as np

    from bench import fidelity as fid
    from bench.reference_ids import IdIndex, actual_next_match
    from bench.tfrecord import read_reference
    from schemas.vocab import Vocab

    ours, first = [], None
    for directory in our_sets:
        cols, mask_id = fid.shard_set_columns(directory)
        ours.append(fid.row_figures(cols, mask_id))
        first = cols if first is None else first
    vocab = Vocab.load(f"{our_sets[0]}/vocab.txt")
    ref_cols = fid.reference_columns(read_reference([ref.tfrecord]))
    table = fid.compare(fid.row_figures(ref_cols, vocab.special_ids.mask), ours)
    index = IdIndex(np.load(ref.token_ids))
    rng = np.random.default_rng(seed)
    checks = {
        "ours": actual_next_match(first, index, sample, rng),
        "the reference itself": actual_next_match(ref_cols, index, sample, rng),
    }
    return table, checks
