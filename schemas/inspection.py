"""Look inside a shard set: decoded examples with their masks, and a summary of the set.

Examples decode WordPieces with the set's own vocab ("##" pieces join the previous piece), so
no tokenizer library is needed. A masked piece is shown with what the model sees and the
original piece it must predict: `[MASK→fox]` (masked), `[cat→fox]` (replaced by a random
piece), `[=fox]` (kept as it was).

The summary reads only the Arrow offsets (row lengths and masks per row), so it is cheap on a
large set: rows, pieces, the padding a fixed-length batch would waste, and histograms of the
sequence length and of the masks per row, in the terminal or (`plot`) as an image file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.reader import ShardSet
from schemas.shard import ShardColumns, arrow_schema, label_mismatch
from schemas.text import printable
from schemas.vocab import Vocab

LEGEND = "[MASK→x] masked, [y→x] replaced by a random piece, [=x] kept; x is the original piece"
BAR = "█"
PAD_MULTIPLE = 8  # the model's loader pads each batch to its longest row, rounded up to this


@dataclass(frozen=True)
class Example:
    shard: int
    path: str
    row: int
    length: int
    len_a: int
    len_b: int
    masked: int
    is_random_next: bool
    text_a: str
    text_b: str


def _piece(vocab: Vocab, i: int) -> str:
    return vocab.pieces[i] if 0 <= i < len(vocab) else f"<id {i}>"


def _join(parts: list[tuple[str, bool]]) -> str:
    """Join rendered pieces; a continuation ("##") piece attaches to the previous one."""
    out = []
    for text, glued in parts:
        if out and not glued:
            out.append(" ")
        out.append(text)
    return "".join(out)


def render_segment(vocab: Vocab, ids, labels_at: dict[int, int], positions: range) -> str:
    """Text of one segment; masked positions show the shown piece and the original."""
    mask = vocab.special_ids.mask
    parts = []
    for p in positions:
        shown = int(ids[p])
        if p in labels_at:
            orig = _piece(vocab, labels_at[p])
            if shown == mask:
                text = f"[MASK→{orig}]"
            elif shown == labels_at[p]:
                text = f"[={orig}]"
            else:
                text = f"[{_piece(vocab, shown)}→{orig}]"
            glued = orig.startswith("##")
        else:
            piece = _piece(vocab, shown)
            glued = piece.startswith("##")
            text = piece[2:] if glued else piece
        parts.append((text, glued))
    return _join(parts)


def decode_example(
    vocab: Vocab, cols: ShardColumns, r: int, shard: int = 0, path: str = "", first_row: int = 0
) -> Example:
    """Row `r` of a batch of columns, decoded (`first_row`: the batch's first row in the shard)."""
    ids = cols.input_ids[cols.input_offsets[r] : cols.input_offsets[r + 1]]
    m0, m1 = cols.masked_offsets[r], cols.masked_offsets[r + 1]
    labels_at = {
        int(p): int(v)
        for p, v in zip(cols.masked_positions[m0:m1], cols.masked_labels[m0:m1], strict=True)
    }
    n, b = len(ids), int(cols.segment_b_start[r])
    return Example(
        shard=shard,
        path=path,
        row=first_row + r,
        length=n,
        len_a=max(b - 2, 0),
        len_b=max(n - b - 1, 0),
        masked=int(m1 - m0),
        is_random_next=bool(cols.is_random_next[r]),
        text_a=render_segment(vocab, ids, labels_at, range(1, max(b - 1, 1))),
        text_b=render_segment(vocab, ids, labels_at, range(b, max(n - 1, b))),
    )


def format_example(e: Example) -> str:
    """An example as `inspect` prints it: four lines, whatever the shard's path or the vocab's
    pieces hold (control characters escaped, `printable`)."""
    label = "B from another document" if e.is_random_next else "B follows A"
    return (
        f"shard {e.shard} row {e.row}  ({printable(e.path)})\n"
        f"  length {e.length} = A {e.len_a} + B {e.len_b} + 3 specials; {e.masked} masked; "
        f"is_random_next={int(e.is_random_next)} ({label})\n"
        f"  A: {printable(e.text_a)}\n"
        f"  B: {printable(e.text_b)}\n"
    )


def check_shard(ss: ShardSet, shard: int) -> None:
    """IndexError unless the set has shard `shard`: known from the manifest, before any shard
    is read."""
    if not 0 <= shard < len(ss):
        have = f"shards 0..{len(ss) - 1}" if len(ss) else "no shards"
        raise IndexError(f"--shard {shard}: the set has {have}; give one of them")


def examples(ss: ShardSet, shard: int = 0, row: int = 0, n: int = 3) -> list[Example]:
    """Rows row .. row + n - 1 of one shard, decoded."""
    check_shard(ss, shard)
    table = read_table(ss, shard)
    if not 0 <= row < table.num_rows:
        have = f"rows 0..{table.num_rows - 1}" if table.num_rows else "no rows"
        raise IndexError(f"--row {row}: shard {shard} has {have}; give one of them")
    part = table.slice(row, min(n, table.num_rows - row))
    path = ss.manifest.shards[shard].path
    cols = unreadable_as_value_error(ss, shard, lambda: ShardColumns.from_table(part))
    return [decode_example(ss.vocab, cols, r, shard, path, row) for r in range(cols.num_rows)]


# What reading a damaged shard can raise: Arrow's errors (a flipped footer byte), a missing
# column (KeyError), metadata that is not text.
UNREADABLE = (pa.ArrowException, KeyError, ValueError, TypeError, IndexError)


def read_table(ss: ShardSet, i: int) -> pa.Table:
    """Shard `i`, refused (ValueError, one line) unless it has the contract's columns: the
    inspector looks inside sets, it does not diagnose them; validate says what is wrong."""

    def read() -> pa.Table:
        table = ss.table(i)
        want = {f.name: f.type for f in arrow_schema("uint32")}
        got = {f.name: f.type for f in table.schema}
        if set(got) != set(want) or any(
            not pa.types.is_list(got[k]) for k in want if pa.types.is_list(want[k])
        ):
            raise ValueError(f"columns {', '.join(got) or '(none)'} are not the contract's")
        _check_labels_paired(table)
        return table

    return unreadable_as_value_error(ss, i, read)


def _check_labels_paired(table: pa.Table) -> None:
    """ValueError naming the first row (in the shard) whose labels and masked positions differ
    in number: a decoded row pairs them by index."""
    first = 0
    positions, labels = table.column("masked_positions"), table.column("masked_labels")
    for p, q in zip(positions.chunks, labels.chunks, strict=True):
        po, lo = p.offsets.to_numpy().astype(np.int64), q.offsets.to_numpy().astype(np.int64)
        row = label_mismatch(po - po[0], lo - lo[0])
        if row >= 0:
            raise ValueError(
                f"row {first + row} has {po[row + 1] - po[row]} masked positions and "
                f"{lo[row + 1] - lo[row]} masked labels"
            )
        first += len(p)


def unreadable_as_value_error(ss: ShardSet, i: int, read):
    """`read()`, any error a damaged shard raises turned into one line naming the shard."""
    try:
        return read()
    except OSError:
        raise
    except UNREADABLE as e:
        path = ss.manifest.shards[i].path
        raise ValueError(
            f"shard {i} ({path}) is unreadable ({type(e).__name__}: {e}); run "
            f"`bert-schemas validate {ss.directory}` to see what is wrong"
        ) from None


# ----------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Summary:
    shards: int
    rows: int
    tokens: int
    masked: int
    random_next: int
    max_seq_length: int
    lengths: np.ndarray  # per row
    masks: np.ndarray  # masked positions per row
    fixed_waste: float  # padding share of batches padded to max_seq_length
    dynamic_waste: float  # padding share of shuffled batches padded to their longest row
    batch_size: int


def _offset_lengths(column: pa.ChunkedArray) -> np.ndarray:
    parts = [np.diff(chunk.offsets.to_numpy()) for chunk in column.chunks]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def dynamic_padding_waste(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> float:
    """Padding share when shuffled rows are batched and each batch is padded to its longest
    row rounded up to a multiple of 8 (what the model's loader does)."""
    if len(lengths) == 0:
        return 0.0
    order = rng.permutation(len(lengths))
    shuffled = lengths[order]
    pad_to = len(shuffled) - len(shuffled) % batch_size
    full = shuffled[:pad_to].reshape(-1, batch_size)
    longest = list(full.max(axis=1)) if len(full) else []
    rest = shuffled[pad_to:]
    sizes = [batch_size] * len(longest)
    if len(rest):
        longest.append(rest.max())
        sizes.append(len(rest))
    padded = sum(
        -(-int(m) // PAD_MULTIPLE) * PAD_MULTIPLE * k for m, k in zip(longest, sizes, strict=True)
    )
    return 1.0 - float(lengths.sum()) / padded


def summarize(ss: ShardSet, batch_size: int = 32, seed: int = 0) -> Summary:
    """Figures over the whole set, read from the Arrow offsets only."""
    lengths, masks, random_next = [], [], 0
    for i in range(len(ss)):
        table = read_table(ss, i)
        lengths.append(_offset_lengths(table.column("input_ids")))
        masks.append(_offset_lengths(table.column("masked_positions")))
        random_next += int(pc.sum(table.column("is_random_next")).as_py() or 0)
    lens = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    mcount = np.concatenate(masks) if masks else np.zeros(0, np.int64)
    try:
        max_len = ss.shard_config.max_seq_length
    except ValueError:  # the inspector looks inside broken sets too
        max_len = int(lens.max()) if len(lens) else 0
    tokens = int(lens.sum())
    return Summary(
        shards=len(ss),
        rows=len(lens),
        tokens=tokens,
        masked=int(mcount.sum()),
        random_next=random_next,
        max_seq_length=max_len,
        lengths=lens,
        masks=mcount,
        fixed_waste=1.0 - tokens / (len(lens) * max_len) if len(lens) and max_len else 0.0,
        dynamic_waste=dynamic_padding_waste(lens, batch_size, np.random.default_rng(seed)),
        batch_size=batch_size,
    )


def histogram(values: np.ndarray, lo: int, hi: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts over integer bins of equal width covering [lo, hi], the last ending at hi (the
    first may be narrower); returns (counts, edges), bin k being [edges[k], edges[k + 1])."""
    width = max(1, math.ceil((hi - lo + 1) / bins))
    edges = np.arange(hi + 1, lo, -width)[::-1]
    edges = np.r_[lo, edges] if edges[0] > lo else edges
    counts, _ = np.histogram(values, bins=edges)
    return counts, edges


def text_histogram(values: np.ndarray, lo: int, hi: int, bins: int = 16, width: int = 40) -> str:
    """A horizontal bar chart, one line per bin: range, bar, count and share."""
    counts, edges = histogram(values, lo, hi, bins)
    total = max(int(counts.sum()), 1)
    top = max(int(counts.max()), 1) if len(counts) else 1
    label_w = len(f"{edges[-1] - 1}")
    lines = []
    for k, c in enumerate(counts):
        a, b = int(edges[k]), int(edges[k + 1]) - 1
        span = f"{a:>{label_w}}" if a == b else f"{a:>{label_w}}-{b:<{label_w}}"
        bar = BAR * round(width * int(c) / top)
        lines.append(f"  {span:>{2 * label_w + 1}} |{bar:<{width}} {int(c):>10,} {c / total:6.1%}")
    return "\n".join(lines)


def format_summary(s: Summary) -> str:
    share = (lambda k: k / s.rows) if s.rows else (lambda k: 0.0)
    mean = s.tokens / s.rows if s.rows else 0.0
    top_mask = int(s.masks.max()) if len(s.masks) else 0
    return "\n".join(
        [
            f"{s.rows:,} rows in {s.shards} shards; {s.tokens:,} pieces, mean length {mean:.1f} "
            f"(max_seq_length {s.max_seq_length})",
            f"{s.masked:,} masked pieces ({s.masked / max(s.tokens, 1):.2%}), "
            f"{share(s.random_next):.1%} of rows random-next",
            f"padding: {s.fixed_waste:.1%} of a batch padded to max_seq_length is padding; "
            f"{s.dynamic_waste:.1%} with shuffled batches of {s.batch_size} padded to their "
            f"longest row (multiple of {PAD_MULTIPLE})",
            "",
            "sequence length (pieces)",
            text_histogram(s.lengths, 1, max(s.max_seq_length, 1), bins=16),
            "",
            "masked positions per row",
            text_histogram(s.masks, 0, top_mask, bins=min(top_mask + 1, 25)),
            "",
        ]
    )


def plot_unavailable() -> str | None:
    """Why `plot` cannot run here (matplotlib, an optional dependency, missing), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib (pip install matplotlib)"
    return None


def plot_path_problem(path: str) -> str | None:
    """Why `plot` could not write `path`, in one line, or None. Asked before the summary reads
    every shard, so a mistyped folder or suffix costs nothing (matplotlib picks the format by
    the suffix, and would add `.png` to a name without one)."""
    from matplotlib.backend_bases import FigureCanvasBase

    if os.path.isdir(path):
        return (
            f"--plot {path} is a folder; give a file in it, e.g. {os.path.join(path, 'hist.png')}"
        )
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = os.path.splitext(path)[1][1:]
    if suffix.lower() not in formats:
        what = f"suffix .{suffix} is not a format matplotlib writes" if suffix else "no suffix"
        return f"--plot {path}: {what}; end the name in .png (or one of {', '.join(formats)})"
    folder = os.path.dirname(path) or "."
    if not os.path.exists(folder):
        return (
            f"--plot {path}: no folder {folder}; create it first, or give a file in a folder "
            "that exists"
        )
    if not os.path.isdir(folder):
        return f"--plot {path}: {folder} is a file, not a folder; give a file in a folder"
    return None


def plot(s: Summary, path: str) -> str:
    """The two histograms as an image, in the format of the file's suffix (PNG, PDF, SVG...;
    `plot_path_problem` says which are fit); needs matplotlib, imported only here."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    top = max(s.max_seq_length, 1)
    ax1.hist(s.lengths, bins=np.arange(0, top + 2) - 0.5, color="tab:blue")
    ax1.set(
        title=f"sequence length ({s.rows:,} rows)",
        xlabel="pieces per row",
        ylabel="rows (log scale)",
        yscale="log",
    )
    top_mask = int(s.masks.max()) if len(s.masks) else 0
    ax2.hist(s.masks, bins=np.arange(0, top_mask + 2) - 0.5, color="tab:orange")
    ax2.set(
        title="masked positions per row",
        xlabel="masked positions",
        ylabel="rows (log scale)",
        yscale="log",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
