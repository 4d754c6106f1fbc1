"""`bert-shards`: build shard sets (and train vocabs) from raw corpora.

    bert-shards build --input sample/books --format books --out out/sample
    bert-shards build --input 'dumps/*.txt' --format text --out out/x --vocab vocab.txt
    bert-shards vocab --input sample/books --format books --out out/vocab
    bert-shards punkt --input sample/books --format books --out out/punkt   (other languages)
    bert-shards validate OUT / inspect OUT     (the shard-set checks of `bert-schemas`)

Unknown flags are Beam pipeline options (for example `--runner DataflowRunner --project p`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time

from pipeline.config import InstanceConfig, VocabConfig, default_max_predictions
from pipeline.options import at_least
from pipeline.readers import READERS
from pipeline.sources import InputSpec, expand_pattern


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
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="show Beam's logs and full tracebacks (default: one line per failure)",
    )
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


def parse_inputs(values: list[str], default_format: str) -> tuple[InputSpec, ...]:
    specs = []
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            fmt, sep, path = item.partition(":")
            if sep and fmt in READERS:
                specs.append(InputSpec(fmt, path))
            else:
                specs.append(InputSpec(default_format, item))
    return tuple(specs)


def check_inputs(cfg):
    """The config with its chunk size set from the input's size; no match is refused."""
    from pipeline.sources import chunk_bytes_for, input_bytes

    for spec in cfg.inputs:
        if not expand_pattern(spec):
            raise SystemExit(f"error: no input files match {spec.pattern!r} (format {spec.format})")
    return dataclasses.replace(cfg, chunk_bytes=chunk_bytes_for(input_bytes(cfg.inputs)))


def build_config(args):
    from pipeline.build import BuildConfig
    from pipeline.dedup import DedupConfig

    instances = InstanceConfig(seed=args.seed)
    if hasattr(args, "max_seq_length"):  # `vocab` has no instance flags
        max_pred = args.max_predictions_per_seq
        if max_pred is None:
            max_pred = default_max_predictions(args.max_seq_length, args.masked_lm_prob)
        instances = InstanceConfig(
            max_seq_length=args.max_seq_length,
            max_predictions_per_seq=max_pred,
            masked_lm_prob=args.masked_lm_prob,
            short_seq_prob=args.short_seq_prob,
            dupe_factor=args.dupe_factor,
            random_next_prob=args.random_next_prob,
            whole_word_mask=args.whole_word_mask,
            seed=args.seed,
        )
    vocab = VocabConfig(
        vocab_size=args.vocab_size,
        lowercase=args.lowercase,
        sample_sentences=args.vocab_sample_sentences,
        seed=args.seed,
    )
    return BuildConfig(
        inputs=parse_inputs(args.input, args.format),
        out=args.out.rstrip("/"),
        instances=instances,
        vocab=vocab,
        vocab_path=getattr(args, "vocab", None),
        num_shards=getattr(args, "num_shards", 0),
        bucket_tokens=getattr(args, "bucket_tokens", 1),
        max_paragraph_chars=args.max_paragraph_chars,
        skip_bad_input=args.skip_bad_input,
        dedup=DedupConfig(min_paragraph_chars=args.dedup_min_paragraph_chars)
        if args.dedup
        else None,
        punkt_json=punkt_json(args.punkt) if args.punkt else None,
    )


def punkt_json(path: str) -> str:
    """The parameters file's text, checked to be Punkt parameters before any work starts."""
    from pipeline.sentences import params_from_json

    text = read_text_file(path)
    try:
        params_from_json(text, where=path)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    return text


def run_build(args, beam_args: list[str]) -> int:
    from pipeline.build import build, load_vocab, prepare_output, resume_record
    from pipeline.outdir import (
        DISK_PER_TEXT_BYTE,
        OutputError,
        OutputLock,
        check_free_space,
        check_output,
        text_bytes,
    )
    from pipeline.runner import pipeline_options, run_pipeline
    from pipeline.sources import input_files
    from schemas.manifest import Manifest

    try:
        cfg = build_config(args)
        if cfg.vocab_path:
            load_vocab(cfg.vocab_path)  # refused here, before any work starts
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    cfg = check_inputs(cfg)
    try:
        check_output(cfg.out, args.overwrite)
        if not args.no_disk_check:
            check_free_space(cfg.out, int(DISK_PER_TEXT_BYTE * text_bytes(input_files(cfg.inputs))))
        with OutputLock(cfg.out):
            try:
                prepare_output(cfg.out, resume_record(cfg), args.resume)
            except ValueError as e:
                raise OutputError(str(e)) from None
            started = time.time()
            options = pipeline_options(beam_args, args.runner, args.workers)
            watch = progress_line(cfg, args.progress_seconds)
            run_pipeline(lambda p: build(p, cfg), options, args.verbose, watch)
    except OutputError as e:
        raise SystemExit(f"error: {e}") from None
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(FileSystems.join(cfg.out, "manifest.json")) as f:
        manifest = Manifest.from_json(f.read().decode("utf-8"))
    report(manifest, cfg.out, time.time() - started)
    if manifest.rows == 0:
        print(
            "error: no instances were made; see the counts above for what was dropped and why",
            file=sys.stderr,
        )
        return 1
    return 0


def progress_line(cfg, interval: float):
    """The progress line's factory for `run_pipeline` (none when the interval is 0)."""

    from pipeline.build import temp_area
    from pipeline.fsio import building_dir
    from pipeline.progress import ProgressLine
    from pipeline.sources import input_bytes

    if interval <= 0:
        return None
    total = input_bytes(cfg.inputs)
    building = building_dir(cfg.out)
    return lambda stream: ProgressLine(temp_area(cfg.out), building, total, stream, interval)


def report(manifest, out: str, seconds: float) -> None:
    total = manifest.counts.get("total", {})
    print(
        f"wrote {len(manifest.shards)} shard(s), {manifest.rows} instances to {out} "
        f"in {seconds:.1f}s"
    )
    print(json.dumps(total, indent=1, sort_keys=True))
    asked = manifest.config.get("num_shards") or 0
    if len(manifest.shards) < asked:
        print(
            f"note: {len(manifest.shards)} shard(s), not the {asked} asked for with --num-shards: "
            f"{total.get('documents_used', 0)} documents fill at most one bucket per "
            "20 document passes (fewer would pair documents only with themselves)"
        )


def run_vocab(args, beam_args: list[str]) -> int:
    import apache_beam as beam

    from pipeline.build import BuildConfig
    from pipeline.fsio import write_text
    from pipeline.runner import make_pipeline, pipeline_options
    from pipeline.sources import ReadChunks
    from pipeline.tokenize import tokenizer_json
    from pipeline.transforms import SplitSentences, TrainVocab

    cfg: BuildConfig = build_config(args)
    cfg = check_inputs(cfg)
    out, lowercase = cfg.out, cfg.vocab.lowercase

    def save(vocab):
        write_text(f"{out}/vocab.txt", vocab.to_text())
        write_text(f"{out}/tokenizer.json", tokenizer_json(vocab, lowercase))

    options = pipeline_options(beam_args, args.runner, args.workers)
    with temporary_area(out, ".vocab-building") as tmp, make_pipeline(options) as p:
        chunks = p | ReadChunks(list(cfg.inputs), tmp, cfg.chunk_bytes, cfg.skip_bad_input)
        sentences = chunks | SplitSentences(tmp, cfg.max_paragraph_chars, cfg.punkt_json)
        _ = sentences | TrainVocab(cfg.vocab) | beam.Map(save)
    print(f"wrote {out}/vocab.txt and {out}/tokenizer.json")
    return 0


def run_punkt(args, beam_args: list[str]) -> int:
    import apache_beam as beam

    from pipeline.fsio import write_text
    from pipeline.runner import make_pipeline, pipeline_options
    from pipeline.sources import ReadChunks
    from pipeline.transforms import TrainPunkt

    cfg = build_config(args)
    cfg = check_inputs(cfg)
    path = f"{cfg.out}/punkt.json"
    options = pipeline_options(beam_args, args.runner, args.workers)
    with temporary_area(cfg.out, ".punkt-building") as tmp, make_pipeline(options) as p:
        chunks = p | ReadChunks(list(cfg.inputs), tmp, cfg.chunk_bytes, cfg.skip_bad_input)
        params = chunks | TrainPunkt(args.sample_paragraphs, args.seed)
        _ = params | beam.Map(lambda text: write_text(path, text))
    print(f"wrote {path}; use it with `bert-shards build --punkt {path}`")
    return 0


@contextlib.contextmanager
def temporary_area(out: str, name: str):
    """A folder in OUT for a command's intermediate files, removed when it ends."""
    from apache_beam.io.filesystems import FileSystems

    tmp = FileSystems.join(out, name)
    try:
        yield tmp
    finally:
        if FileSystems.exists(tmp + "/"):
            FileSystems.delete([tmp])


def read_text_file(path: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path) as f:
            return f.read().decode("utf-8")
    except OSError as e:
        raise SystemExit(f"error: cannot read {path}: {e}") from None


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="bert-shards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build", help="build a shard set (vocab, instances, manifest)", formatter_class=Help
    )
    add_input_args(b)
    add_text_args(b)
    add_instance_args(b)
    v = sub.add_parser("vocab", help="train a WordPiece vocab only", formatter_class=Help)
    add_input_args(v)
    add_text_args(v)
    t = sub.add_parser(
        "punkt",
        help="train Punkt sentence-splitting parameters on the corpus (OUT/punkt.json)",
        formatter_class=Help,
    )
    add_input_args(t)
    # punkt reads and samples paragraphs only; the shared config takes these defaults
    t.set_defaults(**{a.dest: a.default for a in text_args_parser()._actions if a.dest != "help"})
    t.add_argument(
        "--sample-paragraphs",
        type=at_least(1),
        default=200_000,
        help="bound on the paragraphs Punkt learns from (deterministic sample)",
    )
    for name in ("validate", "inspect"):
        sub.add_parser(
            name, help=f"{name} a shard set (see `bert-schemas {name} --help`)", add_help=False
        )
    args, rest = ap.parse_known_args(argv)
    if args.command in ("validate", "inspect"):
        from schemas.cli import main as schemas_main

        return schemas_main([args.command, *rest], prog="bert-shards")
    from pipeline.options import unknown_args

    problem = unknown_args(rest, {"build": b, "vocab": v, "punkt": t}[args.command])
    if problem:
        raise SystemExit(f"error: {problem}")
    if args.dask_address:
        rest = [*rest, f"--dask_client_address={args.dask_address}"]
    runner = {"build": run_build, "vocab": run_vocab, "punkt": run_punkt}[args.command]
    return runner(args, rest)


if __name__ == "__main__":
    sys.exit(main())
