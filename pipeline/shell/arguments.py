"""The flags of `bert-shards build|vocab|punkt`: each with its default and a sentence."""

from __future__ import annotations

import argparse

from pipeline.runners.options import at_least
from pipeline.sources.readers import READERS


def add_input_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="[FORMAT:]PATH",
        help="file, directory or glob (local or any Beam filesystem); repeat or "
        "comma-separate for several; prefix FORMAT: to mix formats",
    )
    ap.add_argument(
        "--format",
        default="text",
        choices=sorted(READERS),
        help="input format for inputs without a FORMAT: prefix (default: text, the "
        "reference format: one sentence per line, blank line between documents)",
    )
    ap.add_argument("--out", required=True, help="output directory (local or gs://...)")
    ap.add_argument("--seed", type=int, default=12345, help="seed for every random draw")
    ap.add_argument(
        "--workers", type=at_least(0), default=0, help="local worker processes (0: all cores)"
    )
    ap.add_argument(
        "--runner",
        default="DirectRunner",
        help="DirectRunner (local, offline, all cores), DaskRunner, DataflowRunner, ...",
    )
    ap.add_argument(
        "--dask-address",
        metavar="tcp://HOST:8786",
        help="with --runner DaskRunner: the scheduler of an existing Dask cluster "
        "(default: a local cluster of --workers processes)",
    )
    ap.add_argument(
        "--skip-bad-input",
        action="store_true",
        help="skip and count unreadable or corrupt files instead of failing",
    )
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="show Beam's logs and full tracebacks (default: one line per failure)",
    )


def text_args_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(add_help=False)
    add_text_args(ap)
    return ap


def add_text_args(ap: argparse.ArgumentParser) -> None:
    """What `build` and `vocab` share beyond reading: the vocab, casing, cleaning."""
    ap.add_argument(
        "--vocab-size", type=at_least(1), default=30000, help="pieces in a trained vocab"
    )
    ap.add_argument(
        "--vocab-sample-sentences",
        type=at_least(1),
        default=1_000_000,
        help="bound on the sentences the vocab trainer sees (deterministic sample)",
    )
    case = ap.add_mutually_exclusive_group()
    case.add_argument(
        "--lowercase",
        dest="lowercase",
        action="store_true",
        default=True,
        help="uncased: lowercase and strip accents (default)",
    )
    case.add_argument(
        "--cased", dest="lowercase", action="store_false", help="keep case and accents"
    )
    ap.add_argument(
        "--dedup",
        action="store_true",
        help="drop exact duplicate documents and repeated paragraphs across the corpus "
        "(the copy with the smallest document id is kept; counted in the manifest)",
    )
    ap.add_argument(
        "--dedup-min-paragraph-chars",
        type=at_least(1),
        default=64,
        help="with --dedup: shorter paragraphs are never treated as duplicates",
    )
    ap.add_argument(
        "--max-paragraph-chars",
        type=at_least(1),
        default=1_000_000,
        help="longer paragraphs are dropped and counted",
    )
    ap.add_argument(
        "--punkt",
        metavar="FILE",
        help="Punkt parameters from `bert-shards punkt` (other languages; default: English)",
    )


def add_instance_args(ap: argparse.ArgumentParser) -> None:
    """The build's flags: how instances are made, then how the build runs."""
    add_instance_config_args(ap)
    add_build_run_args(ap)


def add_instance_config_args(ap: argparse.ArgumentParser) -> None:
    """The vocab and `InstanceConfig`: sequence length, masking, pairing, dupe passes."""
    ap.add_argument("--vocab", help="reuse this vocab.txt (self-trained or Google's layout)")
    ap.add_argument(
        "--max-seq-length",
        type=int,
        default=128,
        help="pieces per instance, [CLS] A [SEP] B [SEP] included (default: 128)",
    )
    ap.add_argument(
        "--max-predictions-per-seq",
        type=at_least(1),
        default=None,
        help="default: max_seq_length x masked_lm_prob rounded up to a multiple of 5 "
        "(20 at 128, 80 at 512)",
    )
    ap.add_argument(
        "--masked-lm-prob",
        type=float,
        default=0.15,
        help="share of pieces selected for prediction, 80/10/10 (default: 0.15)",
    )
    ap.add_argument(
        "--short-seq-prob",
        type=float,
        default=0.1,
        help="chance a document pass aims at a shorter, uniformly drawn length (default: 0.1)",
    )
    ap.add_argument(
        "--dupe-factor",
        type=at_least(1),
        default=5,
        help="passes over the corpus, each with fresh randomness (default: 5)",
    )
    ap.add_argument(
        "--random-next-prob",
        type=float,
        default=0.5,
        help="chance B comes from another document (default: 0.5)",
    )
    ap.add_argument(
        "--whole-word-mask",
        action="store_true",
        help="mask all pieces of a word together (80/10/10 chosen per word)",
    )


def add_build_run_args(ap: argparse.ArgumentParser) -> None:
    """How the build runs: logs, OUT, buckets, progress, disk check, resume."""
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="build into an OUT that holds files this build did not write, replacing them "
        "(default: refuse; an empty OUT, a shard set or an unfinished build is always fine)",
    )
    ap.add_argument(
        "--num-shards",
        type=at_least(0),
        default=0,
        help="number of buckets/shards (0: one per --bucket-tokens of tokens)",
    )
    ap.add_argument(
        "--bucket-tokens",
        type=at_least(1),
        default=4_000_000,
        help="target tokens per bucket (dupe passes included) when --num-shards is 0; a "
        "worker holds one bucket at a time, so this bounds its memory (default: 4000000)",
    )
    ap.add_argument(
        "--progress-seconds",
        type=at_least(0),
        default=10,
        help="print a progress line this often while building (0: none; default: 10)",
    )
    ap.add_argument(
        "--no-disk-check",
        action="store_true",
        help="build even when OUT's filesystem has less free space than the build's estimate "
        "(default: refuse before any work)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse what an interrupted build of the same input, config and seed left in "
        "OUT/shards/.building (default: start afresh)",
    )


class Help(argparse.HelpFormatter):
    """Every option's help ends with its default (or says it is required), unless the
    sentence already names it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or not action.option_strings or action.dest == "help":
            return text
        if action.required:
            return f"{text} (required)"
        if action.nargs == 0:  # a switch
            return f"{text} (default: off)"
        if action.default is None:
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"
