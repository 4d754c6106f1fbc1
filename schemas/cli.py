"""`bert-schemas`: validate a shard set, or look inside one.

    bert-schemas validate OUT [--json] [--z 5] [--examples 3] [--no-hash]
    bert-schemas inspect OUT [--n 3] [--shard 0] [--row R] [--plot FILE.png]
    bert-schemas export OUT DEST --format hdf5|tfrecord|mds [--overwrite]

`validate` exits 0 only when every check passes (1 otherwise); `inspect` exits 1 when the set
cannot be opened; `export` exits 1 when the set or DEST is refused (nothing written). A mistake
on the command line (an unknown flag, a value out of range, a `--plot` file that could not be
written) is refused in one line before any work, exit status 2. None needs Beam or torch;
`--plot` needs matplotlib. `validate` and `inspect` also read a set in Google Cloud Storage,
OUT given as gs://BUCKET/PATH (`schemas.storage`, the `gcs` extra).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import sys

from schemas.command_line import OneLineParser, chosen
from schemas.interrupts import exit_code, interrupts_unwind
from schemas.notes import corpus_notes, weighting_lines
from schemas.stats import normal_tail
from schemas.text import printable

MAX_Z = 1000.0  # a level past which no count of any size could fail a check
# The largest --batch-size: numpy reshapes the lengths into rows of this many (a C long); a
# batch larger than the set is one batch of the whole set.
MAX_BATCH_SIZE = 2**31 - 1

VALIDATE_HELP = """\
Check a finished shard set and print a table of checks with the figures behind them, then one
line per failure naming the shard and row. Checks: the manifest and schema version; the vocab
(its sha256, size and special ids against the manifest and every shard, tokenizer.json in
agreement); the build config; every listed shard present and none extra, sizes and sha256 as
listed; the Arrow structure; per shard, rows, pieces, masks and random-next rows as listed.
Every row: [CLS] first and only there, exactly two [SEP] with segment B right after the first,
length within [5, max_seq_length], no [PAD], ids and labels inside the vocab, masked positions
strictly ascending, inside the row and never on [CLS]/[SEP], as many as
min(max_predictions_per_seq, max(1, round(length * masked_lm_prob))) (at most that, and at
least one, with whole-word masking), [MASK] only at masked positions, random replacements and
labels never special pieces ([UNK] may be a label), and whole words masked together with
whole_word_mask. The set: the mask rate, the 80/10/10 split, the random-next share (set and
per shard) and the share of rows built with a short target, with tolerances from the sample
size at level --z, and the rows per shard. A structurally broken shard is reported and
skipped; the others are still checked. OUT may be gs://BUCKET/PATH: each shard is then copied
once to a temporary folder, hashed on the way, checked and removed. Exit status: 0 when every
check passes, 1 otherwise."""

INSPECT_HELP = """\
Print decoded rows (segments A and B; a masked piece shows what the model sees and the
original: [MASK→x] masked, [y→x] replaced by a random piece, [=x] kept) with their lengths
and is_random_next label, then a summary of the whole set: rows, pieces, the padding a
fixed-length batch (and a batch padded to its longest row) would waste, and histograms of
the sequence length and of the masked positions per row. --plot writes the histograms as an
image, PNG or another format matplotlib writes, chosen by the file's suffix (needs
matplotlib). OUT may be gs://BUCKET/PATH: the shards read are downloaded into memory, one at a
time (the summary reads every shard)."""


COMMANDS = ("validate", "inspect", "export")  # `bert-shards` forwards these here as they are


def _parser(prog: str = "bert-schemas") -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=prog,
        description="Validate or inspect a BERT pre-training shard set (a directory holding "
        "manifest.json, vocab.txt, tokenizer.json and shards/*.arrow).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{validate,inspect,export}")
    _add_validate(sub)
    _add_inspect(sub)
    _add_export(sub)
    return p


def _subcommand(sub, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand of one shard set: `bert-schemas NAME OUT [options]`."""
    p = sub.add_parser(
        name,
        help=summary,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("out", metavar="OUT", help="the shard set directory")
    return p


def _add_validate(sub) -> None:
    v = _subcommand(
        sub, "validate", "check every file, row and statistic; exit 0 if sound", VALIDATE_HELP
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON instead")
    v.add_argument(
        "--z",
        type=float,
        default=5.0,
        help="level of the statistical checks as a normal quantile: a sound set "
        "fails one with probability at most 2 P(Z > z) "
        f"(default %(default)s: {2 * normal_tail(5.0):.1e})",
    )
    v.add_argument(
        "--examples",
        type=int,
        default=3,
        metavar="K",
        help="failing rows quoted per check and shard (default %(default)s)",
    )
    v.add_argument(
        "--no-hash",
        action="store_true",
        help="skip the sha256 of each shard (sizes are still compared)",
    )


def _add_inspect(sub) -> None:
    i = _subcommand(sub, "inspect", "decoded examples and a summary with histograms", INSPECT_HELP)
    i.add_argument(
        "--n", type=int, default=None, metavar="N", help="rows to show (default 3, or 1 with --row)"
    )
    i.add_argument(
        "--shard",
        type=int,
        default=0,
        metavar="I",
        help="shard index, in manifest order (default %(default)s)",
    )
    i.add_argument(
        "--row",
        type=int,
        default=None,
        metavar="R",
        help="first row to show, within the shard (default 0)",
    )
    i.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also write the histograms to this image (.png, .pdf, .svg...; its folder must exist)",
    )
    i.add_argument(
        "--batch-size",
        type=int,
        default=32,
        metavar="B",
        help="batch size for the padding figure (default %(default)s)",
    )
    i.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the shuffle behind the padding figure (default %(default)s)",
    )
    i.add_argument("--no-summary", action="store_true", help="print the examples only")


EXPORT_HELP = """\
Write a validated shard set in the format another BERT trainer reads, into DEST:
hdf5 (NVIDIA DeepLearningExamples' PyTorch BERT: --input_dir DEST), tfrecord (Google's
run_pretraining.py: --input_file 'DEST/training-*.tfrecord') or mds (MosaicML streaming:
StreamingDataset(local=DEST)). Rows are padded to the set's max_seq_length and
max_predictions_per_seq where the format wants fixed lengths. DEST/export.json lists every file
written (rows, bytes, sha256); the set's vocab.txt is copied beside them. A set that fails
validation is refused before anything is written, and so is a non-empty DEST unless --overwrite
is given, which replaces only the files an export writes (see docs/export.md)."""


def _add_export(sub) -> None:
    from schemas.export.mds import DEFAULT_SIZE_LIMIT
    from schemas.export.run import FORMATS

    e = _subcommand(sub, "export", "write the set as HDF5, TFRecord or MDS", EXPORT_HELP)
    e.add_argument("dest", metavar="DEST", help="the folder to write (new or empty)")
    e.add_argument("--format", required=True, choices=FORMATS, help="the format to write")
    e.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty DEST, replacing the files an export writes there",
    )
    e.add_argument(
        "--mds-size-limit",
        type=int,
        default=DEFAULT_SIZE_LIMIT,
        metavar="BYTES",
        help="most bytes per MDS shard (default %(default)s, MDSWriter's)",
    )
    e.add_argument("--verbose", action="store_true", help="print tracebacks of errors")


def _export(args) -> int:
    from schemas.export.run import ExportError, ExportOptions, timed_export

    options = ExportOptions(args.format, args.overwrite, args.mds_size_limit)
    try:
        summary, wall, cpu = timed_export(
            args.out, args.dest, options, lambda line: print(f"export: {line}", file=sys.stderr)
        )
    except (ExportError, OSError, ValueError) as e:
        if args.verbose:
            raise
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return refused(args, full_disk_line(e, args))
        return refused(args, e)
    mb = summary.bytes / 1e6
    print(
        f"wrote {len(summary.files)} {summary.format} file(s), {summary.rows:,} rows "
        f"({mb:,.1f} MB) to {args.dest} in {wall:.1f}s ({cpu:.1f} CPU-s); listed in "
        f"{os.path.join(args.dest, 'export.json')}"
    )
    return 0


def full_disk_line(e: OSError, args) -> str:
    """An export that ran out of space: where, and how to go on once there is some (the files
    it finished stay in DEST, which only --overwrite writes into)."""
    from schemas import storage

    wrote = not args.overwrite and not storage.is_remote(args.dest) and os.listdir(args.dest)
    again = "with --overwrite, which replaces the files it wrote" if wrote else "again"
    where = e.filename or args.dest
    return f"{where}: {e.strerror}; free some space there, then run the same command {again}"


def _validate(args) -> int:
    from schemas.reader import check_set_directory
    from schemas.validate.run import validate
    from schemas.validate.state import ValidateOptions

    try:
        check_set_directory(args.out)  # one line, not a table of checks that could not run
    except (OSError, ValueError) as e:
        return refused(args, e)
    report = validate(
        args.out, ValidateOptions(z=args.z, examples=args.examples, hashes=not args.no_hash)
    )
    sys.stdout.write(report.to_json() if args.json else report.to_text())
    return 0 if report.ok else 1


def _inspect(args) -> int:
    from schemas import inspection
    from schemas.reader import ShardSet

    try:
        ss = ShardSet.open(args.out)
        inspection.check_shard(ss, args.shard)
        n = args.n if args.n is not None else (1 if args.row is not None else 3)
        shown = inspection.examples(ss, args.shard, args.row or 0, n) if n else []
    except (OSError, ValueError, IndexError) as e:
        return refused(args, e)
    if shown:
        print(inspection.LEGEND + "\n")
        for e in shown:
            print(inspection.format_example(e))
    if not args.no_summary or args.plot:
        try:  # reads every shard: one may be unreadable, or an object store unreachable
            summary = inspection.summarize(ss, args.batch_size, args.seed)
        except (OSError, ValueError) as e:
            return refused(args, e)
        if not args.no_summary:
            print(inspection.format_summary(summary))
            for note in (*weighting_lines(ss.manifest), *corpus_notes(ss.manifest)):
                print(note)
        if args.plot:
            try:  # the path was checked up front; a full disk is still possible
                print(f"wrote {inspection.plot(summary, args.plot)}")
            except (OSError, ValueError) as e:
                return refused(args, e)
    return 0


def refused(args, why: object) -> int:
    """What a command says when the set, a file it writes or a module it needs is refused at
    run time: one line, exit status 1."""
    line = printable(f"{args.prog} {args.command}: error: {why}")
    if getattr(args, "json", False):  # a program reading stdout still gets a report
        sys.stdout.write(refusal_json(args.out, line))
    print(line, file=sys.stderr)
    return 1


def refusal_json(directory: str, line: str) -> str:
    """The JSON report of a set refused before any check ran: not ok, the one failure."""
    import json

    report = {
        "directory": directory,
        "ok": False,
        "rows": 0,
        "seconds": 0.0,
        "checks": [],
        "failures": [line],
    }
    return json.dumps(report, indent=2) + "\n"


def main(argv: list[str] | None = None, prog: str = "bert-schemas") -> int:
    """`prog` names the command in help and errors (`bert-shards` forwards validate, inspect
    and export)."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    args.prog = prog
    missing = missing_module(args)
    if missing:  # not a mistake on the command line: exit status 1, as a refused set
        return refused(args, missing)
    problem = {"validate": validate_problem, "inspect": inspect_problem}.get(
        args.command, export_problem
    )(args)
    if problem:
        chosen(parser, args).error(problem)  # one line, exit status 2, as argparse's own
    command = {"validate": _validate, "inspect": _inspect, "export": _export}[args.command]
    try:
        with interrupts_unwind():
            return command(args)
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
        print(interrupted_line(args), file=sys.stderr)
        return exit_code(e)


def missing_module(args) -> str | None:
    """An optional module the command line asks for and this install lacks, in one line."""
    if args.command == "inspect" and args.plot:
        from schemas.inspection import plot_unavailable

        return plot_unavailable()
    return None


# The first flag of a command whose value makes no sense, named with its value, or None: each
# is asked before any work, so a mistake costs nothing.


def validate_problem(args) -> str | None:
    if not args.z > 0:  # NaN too
        return f"--z must be > 0 (got {args.z})"
    if math.isinf(args.z):
        return f"--z must be a finite number (got {args.z}): every check would pass"
    if args.z > MAX_Z:
        return (
            f"--z must be at most {MAX_Z:g} (got {args.z}): beyond it every statistical check "
            "accepts any share"
        )
    return below(("--examples", args.examples, 0))


def inspect_problem(args) -> str | None:
    problem = below(
        ("--n", args.n, 0),
        ("--shard", args.shard, 0),
        ("--row", args.row, 0),
        ("--batch-size", args.batch_size, 1),
        ("--seed", args.seed, 0),  # numpy's generators take no negative seed
    ) or above(("--batch-size", args.batch_size, MAX_BATCH_SIZE))
    if not problem and args.n == 0 and args.no_summary and not args.plot:
        problem = "--n 0 with --no-summary shows nothing; give rows to show, or drop one of them"
    if problem or not args.plot:
        return problem
    from schemas.inspection import plot_path_problem

    return plot_path_problem(args.plot)


def export_problem(args) -> str | None:
    from schemas.export.mds import MAX_SIZE_LIMIT

    if not 1 <= args.mds_size_limit <= MAX_SIZE_LIMIT:
        return (
            f"--mds-size-limit must be in [1, {MAX_SIZE_LIMIT}] (got {args.mds_size_limit}): "
            "MDS offsets are uint32"
        )
    return None


def below(*flags: tuple[str, int | None, int]) -> str | None:
    """The first of (flag, value, least) whose value, when given, is below its least."""
    for flag, value, least in flags:
        if value is not None and value < least:
            return f"{flag} must be >= {least} (got {value})"
    return None


def above(*flags: tuple[str, int | None, int]) -> str | None:
    """The first of (flag, value, most) whose value, when given, is above its most."""
    for flag, value, most in flags:
        if value is not None and value > most:
            return f"{flag} must be <= {most:,} (got {value})"
    return None


def interrupted_line(args) -> str:
    if args.command != "export":
        return "interrupted; run the same command again"
    return (
        f"interrupted; {args.dest} may hold part of the export, without its export.json: run "
        "the same command with --overwrite to export again"
    )


def command() -> int:
    """`bert-schemas` (and `python -m schemas.cli`): `main`, its process ended without Python's
    teardown once it returns (`schemas.quick_exit`; armed before the commands import Arrow)."""
    from schemas.quick_exit import arm, returned

    arm()
    return returned(main())


if __name__ == "__main__":
    sys.exit(command())
