"""The configs of `bert-shards build|vocab|punkt`, made from their parsed flags
(`pipeline.shell.arguments`): the inputs read from `--input` values, and a flag that another
makes meaningless refused rather than ignored."""

from __future__ import annotations

import os

from pipeline.build import BuildConfig, PunktConfig, VocabCommandConfig
from pipeline.core.config import InstanceConfig, VocabConfig, default_max_predictions
from pipeline.files.fsio import is_local
from pipeline.files.given_vocab import vocab_file
from pipeline.files.listing import InputSpec, expand_pattern
from pipeline.runners.cpus import usable_cpus
from pipeline.runners.run import DASK_RUNNERS, LOCAL_RUNNERS
from pipeline.shell.arguments import config_default, field_default
from pipeline.sources.readers import READERS
from pipeline.stages.dedup import DedupConfig
from schemas.storage import other_store


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


def prefixed(item: str) -> InputSpec | None:
    """`FORMAT:PATH` as its input, when FORMAT is a format's name; else None."""
    fmt, sep, path = item.partition(":")
    return InputSpec(fmt, path) if sep and fmt in READERS else None


def spec_as_written(item: str, default_format: str) -> InputSpec | None:
    """`item` as one input when it names an existing local path, else None."""
    spec = prefixed(item) or InputSpec(default_format, item)
    return spec if is_local(spec.pattern) and os.path.lexists(spec.pattern) else None


def spec_of(item: str, default_format: str) -> InputSpec:
    """`FORMAT:PATH` or `PATH`. A prefix that reads as a format name but is none (`xml:`) is
    refused naming the formats, unless the item names files as written (a path may hold a
    colon); a URL's scheme (`gs://`) is no prefix."""
    spec = prefixed(item)
    if spec:
        return spec
    fmt, sep, path = item.partition(":")
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


def path_problem(args) -> str | None:
    """A path no worker of the build could use, said before the runner is made (Dataflow's is
    checked against the cloud, which takes minutes offline)."""
    try:
        refuse_other_stores(args)
        refuse_local_paths_on_dataflow(args)
        refuse_too_many_workers(args)
    except ValueError as e:
        return str(e)
    return None


WORKERS_PER_CPU = 4  # the most local worker processes per CPU that --workers may ask for


def workers_are_local(args) -> bool:
    """Whether --workers counts the build's worker processes: on the local runner, or on the
    local cluster the Dask runner starts without --dask-address. Elsewhere the cluster or the
    service has workers of its own."""
    return args.runner.lower() in LOCAL_RUNNERS or (
        args.runner.lower() in DASK_RUNNERS and not args.dask_address
    )


def refuse_unused_workers(args) -> None:
    """--workers where the runner's workers are not this machine's processes: it would be
    ignored without a word, and the build would run on however many workers are there."""
    if args.workers and not workers_are_local(args):
        beside = "--dask-address" if args.dask_address else f"--runner {args.runner}"
        there = (
            "the build uses every worker the cluster's scheduler has (start them with dask "
            "worker --nworkers N)"
            if args.dask_address
            else "that runner's service decides its workers (Dataflow: --num_workers, "
            "--max_num_workers)"
        )
        raise ValueError(
            f"--workers {args.workers} is ignored with {beside}: {there}; leave out --workers"
        )


def refuse_too_many_workers(args) -> None:
    """--workers beyond a few per CPU, where they are processes of this machine (the local
    runner, or Dask's local cluster): the build is CPU-bound, so they would only share the CPUs,
    each holding its own memory, and start-up grows with their number."""
    if not workers_are_local(args) or args.workers <= WORKERS_PER_CPU:
        return  # within what one CPU allows: no count needed
    cpus = usable_cpus()
    most = WORKERS_PER_CPU * cpus
    if args.workers > most:
        raise ValueError(
            f"--workers {args.workers}: this machine gives the build {cpus} CPU(s), and its "
            f"workers are CPU-bound processes, each with its own memory; give at most {most} "
            f"({WORKERS_PER_CPU} per CPU), or 0 for one per CPU"
        )


def refuse_other_stores(args) -> None:
    """A path on a store other than gs:// (`s3://`, `hdfs://`) is refused before any work: the
    build's files go through the local filesystem and one gs:// client, and Beam's filesystems
    for those schemes would be made here without the options they need."""
    paths = [("--out", args.out), *given_inputs(args)]
    paths += [(f"--{flag}", getattr(args, flag, None)) for flag in ("vocab", "punkt")]
    for flag, path in paths:
        scheme = other_store(path) if path else None
        if scheme:
            raise ValueError(
                f"{flag} {path}: {scheme}:// is not a store this reads or writes; give a local "
                "path or a gs:// URL"
            )


def refuse_local_paths_on_dataflow(args) -> None:
    """Dataflow's workers are machines of their own: a local input is not there to read, and a
    local OUT would be written on their disks, not here. Refused before the job is submitted."""
    if args.runner.rsplit(".", 1)[-1].lower() not in ("dataflowrunner", "dataflow"):
        return
    for flag, path in [*given_inputs(args), ("--out", args.out)]:
        spec = prefixed(path)
        if path and is_local(spec.pattern if spec else path):
            raise ValueError(
                f"{flag} {path}: a local path, which Dataflow's workers cannot reach; give a "
                "gs:// URL (copy the files to a bucket first)"
            )


def given_inputs(args) -> list[tuple[str, str]]:
    """("--input", item) for each comma-separated item of each --input value, as written."""
    return [("--input", item.strip()) for value in args.input for item in value.split(",")]


def read_fields(args) -> dict:
    """The `ReadConfig` fields every command's flags give."""
    refuse_unused_dask_address(args)
    refuse_unused_workers(args)
    inputs, out = parse_inputs(args.input, args.format), args.out.rstrip("/")
    if args.runner.lower() not in LOCAL_RUNNERS:
        inputs = tuple(InputSpec(s.format, for_workers(s.pattern)) for s in inputs)
        out = for_workers(out)
    return {
        "inputs": inputs,
        "out": out,
        "skip_bad_input": args.skip_bad_input,
        "text_field": args.text_field,
        "id_field": args.id_field,
        "no_id_field": args.no_id_field,
        "records_per_document": args.records_per_document,
    }


def for_workers(path: str) -> str:
    """A local path as another runner's workers must be given it: absolute. Their processes
    run in folders of their own (a Dask worker where `dask worker` was started, a worker pool
    where it was), so a relative --input read nothing there and the build ended with no
    instances, and a relative OUT would have had its files written under their folders.
    Documents' ids are paths below the pattern's own folder, so they do not change."""
    return os.path.abspath(path) if is_local(path) else path


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
        limit_alphabet=args.limit_alphabet,
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
        "cjk_sentences": args.cjk_sentences,
        "language_smoothing": args.language_smoothing,
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
        vocab_path=args.vocab and vocab_file(args.vocab),
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
TRAINING_FLAGS = ("vocab_size", "vocab_sample_sentences", "limit_alphabet")


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
