"""The flags of `bert-shards build|vocab|punkt`, each with a sentence, and the configs made
from them. A flag that sets a config field takes its default from that field (`FIELDS`), the
default's one home; `--help` shows every default."""

from __future__ import annotations

import argparse
import dataclasses
import os

from pipeline.build import BuildConfig, PunktConfig, ReadConfig, VocabCommandConfig
from pipeline.core.config import InstanceConfig, VocabConfig, default_max_predictions
from pipeline.files.fsio import is_local
from pipeline.files.listing import InputSpec, expand_pattern
from pipeline.runners.options import at_least
from pipeline.runners.run import DASK_RUNNERS
from pipeline.sources.readers import READERS
from pipeline.stages.dedup import DedupConfig

# a flag's dest -> the config field it sets, whose default is the flag's
FIELDS = {
    "seed": (InstanceConfig, "seed"),  # VocabConfig's and PunktConfig's too: core.config.SEED
    "skip_bad_input": (ReadConfig, "skip_bad_input"),
    "sample_paragraphs": (PunktConfig, "sample_paragraphs"),
    "vocab_size": (VocabConfig, "vocab_size"),
    "vocab_sample_sentences": (VocabConfig, "sample_sentences"),
    "lowercase": (VocabConfig, "lowercase"),
    "dedup_min_paragraph_chars": (DedupConfig, "min_paragraph_chars"),
    "max_paragraph_chars": (VocabCommandConfig, "max_paragraph_chars"),
    "vocab": (BuildConfig, "vocab_path"),
    "max_seq_length": (InstanceConfig, "max_seq_length"),
    "masked_lm_prob": (InstanceConfig, "masked_lm_prob"),
    "short_seq_prob": (InstanceConfig, "short_seq_prob"),
    "dupe_factor": (InstanceConfig, "dupe_factor"),
    "random_next_prob": (InstanceConfig, "random_next_prob"),
    "whole_word_mask": (InstanceConfig, "whole_word_mask"),
    "num_shards": (BuildConfig, "num_shards"),
    "bucket_tokens": (BuildConfig, "bucket_tokens"),
}


def field_default(dest: str):
    """The default of the config field behind flag `dest` (see `FIELDS`)."""
    return config_default(*FIELDS[dest])


def config_default(cls, name: str):
    [f] = [f for f in dataclasses.fields(cls) if f.name == name]
    return f.default


def flag_said(message: str) -> str:
    """A config's refusal, which names its field, prefixed with the flag that set it."""
    for dest, (_, name) in FIELDS.items():
        if message.startswith(f"{name} "):
            return f"--{dest.replace('_', '-')}: {message}"
    return message


def add_input_args(ap: argparse.ArgumentParser) -> None:
    """What every command takes: the input, OUT, the seed, how it runs."""
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
        help="input format for inputs without a FORMAT: prefix; text is the reference "
        "format: one sentence per line, blank line between documents",
    )
    ap.add_argument("--out", required=True, help="output directory (local or gs://...)")
    ap.add_argument(
        "--seed", type=int, default=field_default("seed"), help="seed for every random draw"
    )
    ap.add_argument(
        "--workers", type=at_least(0), default=0, help="local worker processes; 0: all cores"
    )
    ap.add_argument(
        "--runner",
        default="DirectRunner",
        help="DirectRunner (local, offline, all cores), DaskRunner, DataflowRunner, ...",
    )
    ap.add_argument(
        "--dask-address",
        metavar="tcp://HOST:8786",
        help="with --runner DaskRunner: the scheduler of an existing Dask cluster"
        "; none: a local cluster of --workers processes",
    )
    ap.add_argument(
        "--skip-bad-input",
        action="store_true",
        default=field_default("skip_bad_input"),
        help="skip and count unreadable or corrupt files instead of failing",
    )
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="show Beam's logs and full tracebacks; off: one line per failure",
    )


def add_punkt_args(ap: argparse.ArgumentParser) -> None:
    """`punkt` reads and samples paragraphs only."""
    ap.add_argument(
        "--sample-paragraphs",
        type=at_least(1),
        default=field_default("sample_paragraphs"),
        help="bound on the paragraphs Punkt learns from (deterministic sample)",
    )


def add_text_args(ap: argparse.ArgumentParser) -> None:
    """What `build` and `vocab` share beyond reading: the vocab, casing, cleaning."""
    ap.add_argument(
        "--vocab-size",
        type=at_least(1),
        default=field_default("vocab_size"),
        help="pieces in a trained vocab",
    )
    ap.add_argument(
        "--vocab-sample-sentences",
        type=at_least(1),
        default=field_default("vocab_sample_sentences"),
        help="bound on the sentences the vocab trainer sees (deterministic sample)",
    )
    case = ap.add_mutually_exclusive_group()
    lowercase = field_default("lowercase")
    case.add_argument(
        "--lowercase",
        dest="lowercase",
        action="store_true",
        default=lowercase,
        help="uncased: lowercase and strip accents",
    )
    case.add_argument(
        "--cased",
        dest="lowercase",
        action="store_false",
        default=lowercase,
        help="keep case and accents",
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
        default=field_default("dedup_min_paragraph_chars"),
        help="with --dedup: shorter paragraphs are never treated as duplicates",
    )
    ap.add_argument(
        "--max-paragraph-chars",
        type=at_least(1),
        default=field_default("max_paragraph_chars"),
        help="longer paragraphs are dropped and counted",
    )
    ap.add_argument(
        "--punkt",
        metavar="FILE",
        help="Punkt parameters from `bert-shards punkt`, for other languages; none: English",
    )


def add_instance_args(ap: argparse.ArgumentParser) -> None:
    """The build's flags: how instances are made, then how the build runs."""
    add_instance_config_args(ap)
    add_build_run_args(ap)


def add_instance_config_args(ap: argparse.ArgumentParser) -> None:
    """The vocab and `InstanceConfig`: sequence length, masking, pairing, dupe passes."""
    ap.add_argument(
        "--vocab",
        default=field_default("vocab"),
        help="reuse this vocab.txt, self-trained or Google's layout; none: train one",
    )
    ap.add_argument(
        "--max-seq-length",
        type=int,
        default=field_default("max_seq_length"),
        help="pieces per instance, [CLS] A [SEP] B [SEP] included",
    )
    ap.add_argument(
        "--max-predictions-per-seq",
        type=at_least(1),
        default=None,
        help="cap on masked positions per instance; none: max_seq_length x masked_lm_prob "
        "rounded up to a multiple of 5, 20 at 128 and 80 at 512",
    )
    ap.add_argument(
        "--masked-lm-prob",
        type=float,
        default=field_default("masked_lm_prob"),
        help="share of pieces selected for prediction, 80/10/10",
    )
    ap.add_argument(
        "--short-seq-prob",
        type=float,
        default=field_default("short_seq_prob"),
        help="chance a document pass aims at a shorter, uniformly drawn length",
    )
    ap.add_argument(
        "--dupe-factor",
        type=at_least(1),
        default=field_default("dupe_factor"),
        help="passes over the corpus, each with fresh randomness",
    )
    ap.add_argument(
        "--random-next-prob",
        type=float,
        default=field_default("random_next_prob"),
        help="chance B comes from another document",
    )
    ap.add_argument(
        "--whole-word-mask",
        action="store_true",
        default=field_default("whole_word_mask"),
        help="mask all pieces of a word together (80/10/10 chosen per word)",
    )


def add_overwrite_arg(ap: argparse.ArgumentParser, writes: str) -> None:
    """`vocab`'s and `punkt`'s --overwrite: replace their file(s) in an OUT no command of ours
    wrote (someone's tokenizer folder)."""
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace {writes} in an OUT that no bert-shards command wrote; off: refuse",
    )


def add_build_run_args(ap: argparse.ArgumentParser) -> None:
    """How the build runs: logs, OUT, buckets, progress, disk check, resume."""
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="build into an OUT that holds files this build did not write, replacing them; "
        "off: refuse (an empty OUT, a shard set or an unfinished build is always fine)",
    )
    ap.add_argument(
        "--num-shards",
        type=at_least(0),
        default=field_default("num_shards"),
        help="number of buckets/shards; 0: one per --bucket-tokens of tokens",
    )
    ap.add_argument(
        "--bucket-tokens",
        type=at_least(1),
        default=field_default("bucket_tokens"),
        help="target tokens per bucket (dupe passes included) when --num-shards is 0; a "
        "worker holds one bucket at a time, so this bounds its memory",
    )
    ap.add_argument(
        "--progress-seconds",
        type=at_least(0),
        default=10,
        help="print a progress line this often while building; 0: none",
    )
    ap.add_argument(
        "--no-disk-check",
        action="store_true",
        help="build even when OUT's filesystem has less free space than the build's estimate"
        "; off: refuse before any work",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse what an interrupted build of the same input, config and seed left in "
        "OUT/shards/.building; off: start afresh",
    )


class Help(argparse.HelpFormatter):
    """Every option's help ends with its default, as the parser holds it: `(default: 128)`,
    `(default: on)` or `(default: off)` for a switch, `(default: none)`, or `(required)`."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not action.option_strings or action.dest == "help":
            return text
        if action.required:
            return f"{text} (required)"
        if action.nargs == 0:  # a switch: on when its default is what passing it sets
            return f"{text} (default: {'on' if action.default == action.const else 'off'})"
        if action.default is None:
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"


# -- the configs made from the flags


def parse_inputs(values: list[str], default_format: str) -> tuple[InputSpec, ...]:
    return tuple(spec for value in values for spec in value_specs(value, default_format))


def value_specs(value: str, default_format: str) -> list[InputSpec]:
    """The inputs of one --input value: its comma-separated items. A value that holds a comma
    is one path when it names an existing local file or folder as written and its items do
    not all match files: only a value refused as "no input files match" is read so."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    whole = spec_as_written(value.strip(), default_format) if len(items) > 1 else None
    if whole is None:
        return [spec_of(item, default_format) for item in items]
    try:
        parts = [spec_of(item, default_format) for item in items]
    except ValueError:
        return [whole]
    return parts if all(expand_pattern(p) for p in parts) else [whole]


def spec_as_written(item: str, default_format: str) -> InputSpec | None:
    """`item` as one input when it names an existing local path, else None."""
    fmt, sep, path = item.partition(":")
    spec = InputSpec(fmt, path) if sep and fmt in READERS else InputSpec(default_format, item)
    return spec if is_local(spec.pattern) and os.path.lexists(spec.pattern) else None


def spec_of(item: str, default_format: str) -> InputSpec:
    """`FORMAT:PATH` or `PATH`. A prefix that reads as a format name but is none (`xml:`) is
    refused naming the formats, unless the item names files as written (a path may hold a
    colon); a URL's scheme (`gs://`) is no prefix."""
    fmt, sep, path = item.partition(":")
    if sep and fmt in READERS:
        return InputSpec(fmt, path)
    spec = InputSpec(default_format, item)
    if sep and looks_like_format(fmt, path) and not expand_pattern(spec):
        raise ValueError(
            f"--input {item}: {fmt} is not an input format ({', '.join(sorted(READERS))}), "
            f"and no file is named {item}; write FORMAT:PATH with one of those formats"
        )
    return spec


def looks_like_format(prefix: str, rest: str) -> bool:
    """A prefix of two letters or more, not a URL's scheme (`gs://`) nor a drive (`C:`)."""
    return len(prefix) > 1 and prefix.isascii() and prefix.isalpha() and not rest.startswith("//")


def read_fields(args) -> dict:
    """The `ReadConfig` fields every command's flags give."""
    refuse_unused_dask_address(args)
    return {
        "inputs": parse_inputs(args.input, args.format),
        "out": args.out.rstrip("/"),
        "skip_bad_input": args.skip_bad_input,
    }


def refuse_unused_dask_address(args) -> None:
    """--dask-address names the scheduler the Dask runner uses; any other runner would ignore
    it without a word (the build would run elsewhere than the user meant)."""
    if args.dask_address and args.runner.lower() not in DASK_RUNNERS:
        raise ValueError(
            f"--dask-address {args.dask_address} is ignored with --runner {args.runner}: only "
            "the Dask runner uses a scheduler; add --runner DaskRunner (make: RUNNER=DaskRunner), "
            "or leave out --dask-address"
        )


def punkt_config(args) -> PunktConfig:
    return PunktConfig(
        **read_fields(args), sample_paragraphs=args.sample_paragraphs, seed=args.seed
    )


def vocab_config(args, punkt_json: str | None) -> VocabCommandConfig:
    """`punkt_json`: the text of the `--punkt` file, read and checked by the caller."""
    return VocabCommandConfig(**text_fields(args, punkt_json))


def text_fields(args, punkt_json: str | None) -> dict:
    """The `VocabCommandConfig` fields: what `vocab` and `build` share."""
    vocab = VocabConfig(
        vocab_size=args.vocab_size,
        lowercase=args.lowercase,
        sample_sentences=args.vocab_sample_sentences,
        seed=args.seed,
    )
    refuse_unused_flag(args, "dedup_min_paragraph_chars", not args.dedup, "without --dedup")
    dedup = DedupConfig(min_paragraph_chars=args.dedup_min_paragraph_chars)
    return {
        **read_fields(args),
        "vocab": vocab,
        "max_paragraph_chars": args.max_paragraph_chars,
        "dedup": dedup if args.dedup else None,
        "punkt_json": punkt_json,
    }


def build_config(args, punkt_json: str | None) -> BuildConfig:
    refuse_unused_vocab_flags(args)
    refuse_unused_flag(
        args, "bucket_tokens", args.num_shards > 0, f"with --num-shards {args.num_shards}"
    )
    instances = InstanceConfig(
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=max_predictions(args),
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        random_next_prob=args.random_next_prob,
        whole_word_mask=args.whole_word_mask,
        seed=args.seed,
    )
    return BuildConfig(
        **text_fields(args, punkt_json),
        instances=instances,
        vocab_path=args.vocab,
        num_shards=args.num_shards,
        bucket_tokens=args.bucket_tokens,
    )


def max_predictions(args) -> int:
    """--max-predictions-per-seq, or the default derived from the length and the masking
    probability. A probability `InstanceConfig` refuses (nan, inf, out of (0, 1)) derives
    nothing: the field's own default stands in, and the config refuses the probability,
    naming its flag."""
    given = args.max_predictions_per_seq
    if given is not None:
        return given
    if not 0 < args.masked_lm_prob < 1:
        return config_default(InstanceConfig, "max_predictions_per_seq")
    return default_max_predictions(args.max_seq_length, args.masked_lm_prob)


def refuse_unused_flag(args, dest: str, unused: bool, beside: str) -> None:
    """A flag another flag makes meaningless (--dedup-min-paragraph-chars without --dedup,
    --bucket-tokens beside a --num-shards) is refused rather than ignored; given is told from
    left at its default by the value, as for the vocab-training flags."""
    value = getattr(args, dest)
    if unused and value != field_default(dest):
        raise ValueError(
            f"--{dest.replace('_', '-')} {value} is ignored {beside}; leave out one of them"
        )


# flags that shape a trained vocab: a given --vocab is used as it is, so they would do nothing
TRAINING_FLAGS = ("vocab_size", "vocab_sample_sentences")


def refuse_unused_vocab_flags(args) -> None:
    """A vocab-training flag given with --vocab is refused rather than ignored. Given is told
    from left at its default by the value: the same value given changes nothing either."""
    if args.vocab is None:
        return
    for dest in TRAINING_FLAGS:
        value = getattr(args, dest)
        if value != field_default(dest):
            raise ValueError(
                f"--{dest.replace('_', '-')} {value} is ignored with --vocab {args.vocab}: a "
                "given vocab is used as it is, not trained; leave out one of them"
            )
