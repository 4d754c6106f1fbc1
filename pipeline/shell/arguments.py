"""The flags of `bert-shards build|vocab|punkt`, each with a sentence (the configs made from
them: `pipeline.shell.configs`). A flag that sets a config field takes its default from that
field (`FIELDS`), the default's one home; `--help` shows every default."""

from __future__ import annotations

import argparse
import dataclasses

from pipeline.build import BuildConfig, PunktConfig, ReadConfig, VocabCommandConfig
from pipeline.core.config import InstanceConfig, VocabConfig
from pipeline.runners.options import at_least
from pipeline.sources.readers import READERS
from pipeline.stages.dedup import DedupConfig

# a flag's dest -> the config field it sets, whose default is the flag's
FIELDS = {
    "seed": (InstanceConfig, "seed"),  # VocabConfig's and PunktConfig's too: core.config.SEED
    "skip_bad_input": (ReadConfig, "skip_bad_input"),
    "text_field": (ReadConfig, "text_field"),
    "id_field": (ReadConfig, "id_field"),
    "no_id_field": (ReadConfig, "no_id_field"),
    "records_per_document": (ReadConfig, "records_per_document"),
    "sample_paragraphs": (PunktConfig, "sample_paragraphs"),
    "vocab_size": (VocabConfig, "vocab_size"),
    "vocab_sample_sentences": (VocabConfig, "sample_sentences"),
    "limit_alphabet": (VocabConfig, "limit_alphabet"),
    "lowercase": (VocabConfig, "lowercase"),
    "dedup_min_paragraph_chars": (DedupConfig, "min_paragraph_chars"),
    "max_paragraph_chars": (VocabCommandConfig, "max_paragraph_chars"),
    "cjk_sentences": (VocabCommandConfig, "cjk_sentences"),
    "language_smoothing": (VocabCommandConfig, "language_smoothing"),
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
        help="file, directory or glob (local or gs://...; links followed, names beginning "
        "with '.' below it left out; a tar or zip archive read as a folder); repeat or "
        "comma-separate for several; prefix FORMAT: to mix formats",
    )
    ap.add_argument(
        "--format",
        default="text",
        choices=sorted(READERS),
        help="input format for inputs without a FORMAT: prefix; text is the reference "
        "format: one sentence per line, blank line between documents (paragraphs: the same "
        "with a paragraph per line)",
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
    add_field_args(ap)
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="show Beam's logs and full tracebacks; off: one line per failure",
    )


def add_field_args(ap: argparse.ArgumentParser) -> None:
    """Where JSON Lines records (Parquet and Arrow rows) hold a document's text and its id."""
    ap.add_argument(
        "--text-field",
        metavar="NAME",
        default=field_default("text_field"),
        help="the field of JSON Lines records (the column of Parquet and Arrow rows) that holds "
        "each document's text",
    )
    ap.add_argument(
        "--id-field",
        metavar="NAME",
        default=field_default("id_field"),
        help="the field (column) that holds each document's id, unique across the inputs: "
        "url where ids are numbered per language or per file; records without one are named "
        "by their file and line (row)",
    )
    ap.add_argument(
        "--no-id-field",
        action="store_true",
        default=field_default("no_id_field"),
        help="name every record by its file and line (row), whatever id field it has: for "
        "exports whose ids start afresh in each file, with no field unique across them",
    )
    ap.add_argument(
        "--records-per-document",
        metavar="N",
        type=int,
        default=field_default("records_per_document"),
        help="every N records of a file (text, paragraphs: lines) make one document, for "
        "inputs with no document breaks (Hugging Face's bookcorpus, a sentence a record); "
        "0: none joined",
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
        help="pieces asked of a trained vocab; a corpus too small for them gives fewer, "
        "and the command says so",
    )
    ap.add_argument(
        "--vocab-sample-sentences",
        type=at_least(1),
        default=field_default("vocab_sample_sentences"),
        help="bound on the sentences the vocab trainer sees (deterministic sample)",
    )
    ap.add_argument(
        "--limit-alphabet",
        type=at_least(1),
        default=field_default("limit_alphabet"),
        help="characters a trained vocab holds, the sample's most frequent; the rest become "
        "[UNK]: Chinese, Japanese and many-language corpora need thousands",
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
    add_weighting_args(ap)
    add_sentence_args(ap)


def add_weighting_args(ap: argparse.ArgumentParser) -> None:
    """How the inputs are weighted against each other (`pipeline.core.smoothing`)."""
    ap.add_argument(
        "--language-smoothing",
        metavar="S",
        type=float,
        default=field_default("language_smoothing"),
        help="weight each input (each wiki of a Wikipedia input) by its share of the text "
        "raised to S, as multilingual BERT weighted its languages (0.7), in the vocab's sample "
        "and in each document's dupe passes; 1: every input as it is",
    )


def add_sentence_args(ap: argparse.ArgumentParser) -> None:
    """How prose is cut into sentences: Punkt's parameters, and Chinese and Japanese ends."""
    ap.add_argument(
        "--punkt",
        metavar="FILE",
        help="Punkt parameters from `bert-shards punkt`, for other languages; none: English",
    )
    ap.add_argument(
        "--cjk-sentences",
        action="store_true",
        default=field_default("cjk_sentences"),
        help="also end a sentence of prose at a Chinese or Japanese full stop, question or "
        "exclamation mark (。！？) that more text follows, which Punkt never does",
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
        help="reuse this vocab.txt (self-trained or Google's layout), the folder holding one "
        "(a Hugging Face BERT's, a set's OUT) or a WordPiece tokenizer.json; none: train one",
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
