"""`bert-shards`: build shard sets (and train vocabs) from raw corpora.

    bert-shards build --input sample/books --format books --out out/sample
    bert-shards build --input 'dumps/*.txt' --format text --out out/x --vocab vocab.txt
    bert-shards vocab --input sample/books --format books --out out/vocab
    bert-shards punkt --input sample/books --format books --out out/punkt   (other languages)
    bert-shards validate OUT / inspect OUT / export OUT DEST   (`bert-schemas`' commands)

Unknown flags are Beam pipeline options (for example `--runner DataflowRunner --project p`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time

from pipeline.files.listing import expand_pattern, hidden_note, no_files_said, one_listing
from pipeline.runners.allocator import reuse_freed_memory
from pipeline.shell.arguments import (
    Help,
    add_input_args,
    add_instance_args,
    add_overwrite_arg,
    add_punkt_args,
    add_text_args,
    flag_said,
)
from pipeline.shell.configs import build_config, path_problem, punkt_config, vocab_config
from pipeline.shell.report import alphabet_note, no_instances, no_text, report, vocab_note
from schemas.cli import COMMANDS as SCHEMAS_COMMANDS  # forwarded to `bert-schemas`
from schemas.command_line import OneLineParser
from schemas.interrupts import exit_code, interrupts_unwind


def check_inputs(cfg, verbose: bool = False):
    """The config with its chunk size set from the input's size; no match is refused, nor an
    OUT that an input would read, nor a first file not in its format (with `verbose`, as the
    reader's traceback)."""
    from pipeline.files.listing import input_bytes, refuse_unusable_inputs, shard_set_inside
    from pipeline.stages.read import chunk_bytes_for

    refuse_unusable_inputs(cfg.inputs)
    for spec in cfg.inputs:
        if not expand_pattern(spec):
            raise SystemExit(f"error: {no_files_said(spec)}")
        check_first_file(spec, verbose, not cfg.skip_bad_input, cfg.fields())
        manifest = shard_set_inside(spec)
        if manifest:
            raise SystemExit(
                f"error: the input {spec.pattern} holds a shard set ({manifest}), a build's "
                f"output whose files would be read as {spec.format} input; give the corpus folder, "
                "or a glob that leaves the set out"
            )
        if reads_out(spec, cfg.out):
            raise SystemExit(
                f"error: --out {cfg.out} lies inside the input {spec.pattern}, so this build "
                "would read what an earlier one wrote there (shards, vocab, manifest) as text; "
                "choose an OUT outside the inputs"
            )
    return dataclasses.replace(cfg, chunk_bytes=chunk_bytes_for(input_bytes(cfg.inputs)))


def check_first_file(spec, verbose: bool, strict: bool, fields=("text", "id")) -> None:
    """The input's first file (a Wikipedia dump's index aside) read as its format: a wrong
    --format is refused here, in the reader's words, before OUT is made; with --skip-bad-input
    (not `strict`) only another format read as text (`pipeline.sources.head`); notes for prose
    given as text and for hidden files left out. `fields`: the records' text and id fields."""
    from pipeline.files import fsio
    from pipeline.sources.documents import BadInputError
    from pipeline.sources.head import HEAD_BYTES, check_head
    from pipeline.sources.wikipedia.spans import is_index

    files = [f for f in expand_pattern(spec) if not (f[0] == "wikipedia" and is_index(f[1]))]
    if not files:
        return
    fmt, path, rel = files[0]
    try:
        head = check_head(fmt, path, rel, lambda p: fsio.open_read(p, HEAD_BYTES), strict, *fields)
        for note in filter(None, (head, hidden_note(spec))):  # read as asked, though unlike it
            print(note)
    except BadInputError as e:
        if verbose:
            raise
        raise SystemExit(f"error: {e}") from None


def reads_out(spec, out: str) -> bool:
    """Whether the input `spec` takes in files under OUT: it names a folder holding OUT (or OUT
    itself), or a `**` pattern from such a folder. A `*` pattern stays in its own folder."""
    from pipeline.files.listing import GLOB_CHARS, glob_root
    from pipeline.shell.outdir import within

    pattern = spec.pattern.rstrip("/")
    if any(c in pattern for c in GLOB_CHARS) and not read_as_written(spec):
        if "**" not in pattern:
            return False
        folder = glob_root(spec.pattern)
    elif all(path == spec.pattern for _, path, _ in expand_pattern(spec)):
        return False  # one file
    else:
        folder = pattern
    return within(out, folder)


def read_as_written(spec) -> bool:
    """A local folder whose name holds glob characters ("Moby [1851]"), which the listing reads
    as that folder because the pattern matches nothing: every file listed lies under it."""
    folder = spec.pattern.rstrip("/")
    if "://" in folder or not os.path.isdir(folder):
        return False
    listed = expand_pattern(spec)
    return bool(listed) and all(path.startswith(folder + "/") for _, path, _ in listed)


def command_config(args):
    """The command's own config from its flags; a nonsensical value is refused in one line."""
    try:
        if args.command == "punkt":
            return punkt_config(args)
        punkt = punkt_json(args.punkt) if args.punkt else None
        return (build_config if args.command == "build" else vocab_config)(args, punkt)
    except ValueError as e:
        raise SystemExit(f"error: {flag_said(str(e))}") from None


def punkt_json(path: str) -> str:
    """The `--punkt` file's text, checked to be Punkt parameters before any work starts."""
    from pipeline.core.sentences import params_from_json

    text = read_text_file(path)
    try:
        params_from_json(text, where=path)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    return text


def run_build(args, beam_args: list[str]) -> int:
    from pipeline.build import build, check_resume, load_vocab, prepare_output, resume_record
    from pipeline.files.listing import input_files, refuse_shared_names
    from pipeline.runners.run import pipeline_options, run_pipeline
    from pipeline.shell.outdir import (
        DISK_PER_TEXT_BYTE,
        OutputError,
        OutputLock,
        check_free_space,
        check_output,
        text_bytes,
    )
    from pipeline.shell.trouble import out_trouble_said
    from schemas.manifest import Manifest

    cfg = command_config(args)
    try:
        if cfg.vocab_path:
            load_vocab(cfg.vocab_path, cfg.vocab.lowercase)  # refused before any work starts
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    cfg = check_inputs(cfg, args.verbose)
    refuse_shared_names(cfg.inputs, dedup=cfg.dedup is not None)
    try:
        check_output(cfg.out, args.overwrite)
        if not args.no_disk_check:
            check_free_space(cfg.out, int(DISK_PER_TEXT_BYTE * text_bytes(input_files(cfg.inputs))))
        if args.resume:  # asked again under the lock; here before OUT is made or its lock taken
            try:
                check_resume(cfg.out, resume_record(cfg))
            except ValueError as e:
                raise OutputError(str(e)) from None
        with OutputLock(cfg.out):
            try:
                prepare_output(cfg.out, resume_record(cfg), args.resume)
            except ValueError as e:
                raise OutputError(str(e)) from None
            args.resumable = True  # OUT holds this build's resume record from here on
            started = time.time()
            options = pipeline_options(beam_args, args.runner, args.workers)
            watch = progress_line(cfg, args.progress_seconds)
            with out_trouble_said(cfg.out):
                run_pipeline(beside_listing(lambda p: build(p, cfg)), options, args.verbose, watch)
    except OutputError as e:
        raise SystemExit(f"error: {e}") from None
    from pipeline.files.fsio import building_dir, exists, read_text
    from pipeline.stages.shards import NO_INSTANCES

    if not exists(f"{cfg.out}/manifest.json"):  # nothing published: the build made no instance
        no_instances(json.loads(read_text(f"{building_dir(cfg.out)}/{NO_INSTANCES}")))
        return 1
    manifest = Manifest.from_json(read_text(f"{cfg.out}/manifest.json"))
    report(manifest, cfg.out, time.time() - started)
    return 0


def progress_line(cfg, interval: float):
    """The progress line's factory for `run_pipeline` (none when the interval is 0)."""

    from pipeline.build import temp_area
    from pipeline.files.fsio import building_dir
    from pipeline.files.listing import input_bytes
    from pipeline.shell.progress import ProgressLine

    if interval <= 0:
        return None
    total = input_bytes(cfg.inputs)
    building = building_dir(cfg.out)
    sample = 0 if cfg.vocab_path else cfg.vocab.sample_sentences
    return lambda stream: ProgressLine(
        temp_area(cfg.out), building, total, stream, interval, vocab_sample=sample
    )


def run_vocab(args, beam_args: list[str]) -> int:
    import apache_beam as beam

    from pipeline.build import input_labels, read_documents, weighting
    from pipeline.core.tokenize import tokenizer_json
    from pipeline.files.fsio import exists, read_text, write_text
    from pipeline.runners.run import pipeline_options, run_pipeline
    from pipeline.shell.trouble import AGAIN, out_trouble_said
    from pipeline.stages.dedup import DeduplicateChunks
    from pipeline.stages.smoothing import write_weighting
    from pipeline.stages.split import SplitSentences
    from pipeline.stages.vocab import NO_TEXT, TrainVocabCut, learnt_nothing
    from schemas.notes import weighting_table

    cfg = check_inputs(command_config(args), args.verbose)
    out, lowercase = cfg.out, cfg.vocab.lowercase

    def save(trained, tmp: str):
        vocab, cut = trained
        if learnt_nothing(vocab):
            return write_text(f"{tmp}/{NO_TEXT}", "")
        write_text(f"{out}/vocab.txt", vocab.to_text())
        write_text(f"{out}/tokenizer.json", tokenizer_json(vocab, lowercase))
        write_text(f"{tmp}/alphabet.json", json.dumps(cut))  # said by the command

    def steps(p, tmp: str) -> None:
        chunks = p | read_documents(cfg, tmp)
        if cfg.dedup:  # as a build does, so that both train the same vocab
            chunks = chunks | DeduplicateChunks(cfg.dedup, tmp)
        sentences = chunks | SplitSentences(tmp, *cfg.splitting())
        rates = weighting(cfg, sentences)
        _ = sentences | TrainVocabCut(cfg.vocab, rates) | beam.Map(save, tmp)
        if rates is not None:  # said by the command, as a build says it
            _ = rates | beam.Map(write_weighting, f"{tmp}/weighting.json", input_labels(cfg))

    options = pipeline_options(beam_args, args.runner, args.workers)
    writes = ("vocab.txt", "tokenizer.json")
    with side_output(out, writes, args.overwrite), temporary_area(out, ".vocab-building") as tmp:
        with out_trouble_said(out, "bert-shards vocab", AGAIN):
            run_pipeline(beside_listing(lambda p: steps(p, tmp)), options, args.verbose)
        if exists(f"{tmp}/{NO_TEXT}"):
            return no_text("vocab trainer", "vocab")
        cut = json.loads(read_text(f"{tmp}/alphabet.json"))
        weighted = json.loads(read_text(f"{tmp}/weighting.json")) if cfg.weighted else {}
    print(f"wrote {out}/vocab.txt and {out}/tokenizer.json")
    note = vocab_note(len(read_text(f"{out}/vocab.txt").splitlines()), cfg.vocab.vocab_size)
    table = weighting_table(weighted, cfg.language_smoothing) if weighted else []
    for said in (*table, note, alphabet_note(*cut, cfg.vocab.limit_alphabet)):
        if said:
            print(said)
    return 0


def run_punkt(args, beam_args: list[str]) -> int:
    import apache_beam as beam

    from pipeline.build import read_documents
    from pipeline.files.fsio import exists, write_text
    from pipeline.runners.run import pipeline_options, run_pipeline
    from pipeline.shell.trouble import AGAIN, out_trouble_said
    from pipeline.stages.vocab import NO_TEXT, TrainPunkt, learnt_nothing

    cfg = check_inputs(command_config(args), args.verbose)
    path = f"{cfg.out}/punkt.json"

    def steps(p, tmp: str) -> None:
        chunks = p | read_documents(cfg, tmp)
        _ = (
            chunks
            | TrainPunkt(cfg.sample_paragraphs, cfg.seed)
            | beam.Map(lambda t: write_text(f"{tmp}/{NO_TEXT}" if learnt_nothing(t) else path, t))
        )

    options = pipeline_options(beam_args, args.runner, args.workers)
    with (
        side_output(cfg.out, ("punkt.json",), args.overwrite),
        temporary_area(cfg.out, ".punkt-building") as tmp,
        out_trouble_said(cfg.out, "bert-shards punkt", AGAIN),
    ):
        run_pipeline(beside_listing(lambda p: steps(p, tmp)), options, args.verbose)
        if exists(f"{tmp}/{NO_TEXT}"):
            return no_text("Punkt trainer", "parameter file")
    print(f"wrote {path}; use it with `bert-shards build --punkt {path}`")
    return 0


def beside_listing(add_steps):
    """`add_steps(p)` told whether the graph's steps run in this process or in workers forked
    from it, which read the command's listing of the input as it is; other workers list it
    again, and the first stage carries what they must find (`listing.listing_for_workers`)."""
    from pipeline.files.listing import workers_share_listing
    from pipeline.runners.run import steps_run_here

    def add(p):
        with workers_share_listing(steps_run_here(p)):
            return add_steps(p)

    return add


@contextlib.contextmanager
def side_output(out: str, writes: tuple[str, ...], overwrite: bool):
    """OUT of `vocab` or `punkt`, which write the files `writes`, checked before any work
    (`check_side_output`) and locked while the command runs, as a build's is: neither runs into
    an OUT a build is using."""
    from pipeline.shell.outdir import OutputError, OutputLock, check_side_output

    with contextlib.ExitStack() as held:
        try:
            check_side_output(out, writes, overwrite)
            held.enter_context(OutputLock(out))
        except OutputError as e:
            raise SystemExit(f"error: {e}") from None
        yield


@contextlib.contextmanager
def temporary_area(out: str, name: str):
    """A folder in OUT for a command's intermediate files, removed when it ends (on object
    stores: every name under its prefix)."""
    from apache_beam.io.filesystems import FileSystems

    from pipeline.files.fsio import remove_tree

    tmp = FileSystems.join(out, name)
    try:
        yield tmp
    finally:
        remove_tree(tmp)


def read_text_file(path: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path) as f:
            return f.read().decode("utf-8")
    except OSError as e:
        raise SystemExit(f"error: cannot read {path}: {e}") from None


def interrupted_line(args) -> str:
    """What to do after a signal: a build whose OUT holds its resume record (made by this run,
    or the one `--resume` continues) goes on with --resume; anything stopped earlier, and
    `vocab` and `punkt`, run again."""
    if args.command == "build" and (args.resume or getattr(args, "resumable", False)):
        return "interrupted; run the same command with --resume to continue"
    if args.command == "build":
        return "interrupted before any work started; run the same command again"
    return "interrupted; run the same command again"


def parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """`bert-shards` and the parsers of its own commands, by name."""
    ap = OneLineParser(
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
    add_overwrite_arg(v, "vocab.txt and tokenizer.json")
    t = sub.add_parser(
        "punkt",
        help="train Punkt sentence-splitting parameters on the corpus (OUT/punkt.json)",
        formatter_class=Help,
    )
    add_input_args(t)
    add_punkt_args(t)
    add_overwrite_arg(t, "punkt.json")
    for name in SCHEMAS_COMMANDS:
        sub.add_parser(
            name, help=f"{name} a shard set (see `bert-schemas {name} --help`)", add_help=False
        )
    return ap, {"build": b, "vocab": v, "punkt": t}


def main(argv: list[str] | None = None) -> int:
    ap, commands = parsers()
    args, rest = ap.parse_known_args(argv)
    if args.command in SCHEMAS_COMMANDS:
        from schemas.cli import main as schemas_main

        return schemas_main([args.command, *rest], prog="bert-shards")
    from pipeline.files.credentials import mark_driver
    from pipeline.files.gcs import NoCredentials, StoreUnreachable, gcs_problem
    from pipeline.runners.options import unknown_args
    from pipeline.runners.run import beam_logs_quiet, pipeline_options, runner_problem
    from pipeline.shell.cluster import cluster_problem
    from pipeline.shell.trouble import store_trouble_said

    mark_driver()
    problem = unknown_args(rest, commands[args.command]) or path_problem(args)
    problem = problem or cluster_problem(args.runner, args.dask_address)
    with beam_logs_quiet(not args.verbose):  # Beam logs what it asks the cloud while checking
        problem = problem or runner_problem(
            pipeline_options(rest, args.runner, args.workers), cloud_check=gcs_problem
        )
    if problem:
        raise SystemExit(f"error: {problem}")
    if args.dask_address:
        rest = [*rest, f"--dask_client_address={args.dask_address}"]
    if args.command == "build" and args.vocab is not None:
        # Not where a vocab is trained: the trainer's freed memory would stay in the heap under
        # what the later stages allocate, raising the peak (docs/benchmarks.md has the figures).
        reuse_freed_memory()
    runner = {"build": run_build, "vocab": run_vocab, "punkt": run_punkt}[args.command]
    try:
        with interrupts_unwind(), one_listing(), store_trouble_said(args):
            return runner(args, rest)
    except (NoCredentials, StoreUnreachable) as e:  # met while listing or checking, before work
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt as e:  # Interrupted, or a Ctrl-C before the handlers were set
        from pipeline.runners.beam_internals import stop_stranded_samplers

        stop_stranded_samplers()
        if args.verbose:
            import traceback

            traceback.print_exc()
        print(interrupted_line(args), file=sys.stderr)
        return exit_code(e)


if __name__ == "__main__":
    sys.exit(main())
