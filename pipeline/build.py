"""The whole build as one Beam graph: read -> split -> vocab -> tokenize -> instances -> shards."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.core.config import SEED, InstanceConfig, VocabConfig
from pipeline.files.code import OWN, code_changes, code_record
from pipeline.files.credentials import mark_driver
from pipeline.files.fsio import (
    VOCAB_MARKER,
    building_dir,
    exists,
    read_bytes,
    remove,
    remove_tree,
    write_marker,
    write_text,
)
from pipeline.files.given_vocab import load_vocab
from pipeline.files.listing import (
    InputSpec,
    changed_files,
    field_inputs,
    grouped_inputs,
    listing_rows,
)
from pipeline.stages.counting import SumCounts
from pipeline.stages.dedup import DedupConfig, DeduplicateChunks
from pipeline.stages.instances import CreateInstances
from pipeline.stages.read import ReadChunks, input_order
from pipeline.stages.shards import Publish
from pipeline.stages.smoothing import SmoothingRates
from pipeline.stages.split import SplitSentences
from pipeline.stages.tokenize import TokenizeDocuments
from pipeline.stages.vocab import TrainVocab
from schemas.manifest import MANIFEST_NAME
from schemas.vocab import Vocab


@dataclass(frozen=True)
class ReadConfig:
    """What every command reads: `bert-shards punkt` adds its sample, `vocab` and `build` more."""

    inputs: tuple[InputSpec, ...]
    out: str  # the command's directory (local path or any Beam filesystem)
    skip_bad_input: bool = False  # skip and count unreadable files instead of failing
    chunk_bytes: int = 8 << 20  # text per intermediate chunk file; never changes the output
    text_field: str = "text"  # the text's field: of JSON Lines, Parquet and Arrow records
    id_field: str = "id"  # the id's field, likewise
    # none: each record is named by its file and line (row), for exports numbered afresh per
    # file with no field unique across them
    no_id_field: bool = False
    # inputs without document breaks (Hugging Face's bookcorpus, a sentence a record or a line):
    # every N records of a file (text, paragraphs: lines, a blank one still ending one) make a
    # document; 0: none joined
    records_per_document: int = 0

    def __post_init__(self):
        if not self.inputs:
            raise ValueError("no input given: pass --input PATH (a file, directory or glob)")
        if self.id_field == self.text_field and self.id_field != "id":
            raise ValueError(
                f"id_field {self.id_field!r} is the text's field (--text-field): give the field "
                "that holds each document's id"
            )
        if not self.text_field or self.text_field == self.id_field:
            raise ValueError(
                f"text_field {self.text_field!r} names no field of text: give the name of the "
                "records' field (Parquet: column) that holds each document's text"
            )
        if not self.id_field:
            raise ValueError(
                "id_field '' names no field: give the name of the records' field (Parquet: "
                "column) that holds each document's id"
            )
        if self.no_id_field and self.id_field != "id":
            raise ValueError(
                f"no_id_field names the records by their file and line, and id_field "
                f"{self.id_field!r} by a field: give one of them"
            )
        problem = self.grouping_problem()
        if problem:
            raise ValueError(problem)
        for name, value, default in (
            ("text_field", self.text_field, "text"),
            ("id_field", self.id_field, "id"),
            ("no_id_field", self.no_id_field, False),
        ):
            if value != default and not field_inputs(self.inputs):
                what = f"{name} {value!r} is read from" if value is not True else f"{name} names"
                raise ValueError(
                    f"{what} jsonl, parquet and arrow inputs, and no "
                    "input is one: leave it out, or give the input its format (jsonl:PATH)"
                )

    def grouping_problem(self) -> str | None:
        """Why `records_per_document` cannot be used with these inputs, or None."""
        if not self.records_per_document:
            return None
        if self.records_per_document < 2:
            return (
                f"records_per_document {self.records_per_document} joins nothing: give 2 or "
                "more records a document, or leave it out"
            )
        if not grouped_inputs(self.inputs):
            return (
                f"records_per_document {self.records_per_document} is read from text, "
                "paragraphs, jsonl, parquet and arrow inputs, and no input is one: leave it "
                "out, or give the input its format (jsonl:PATH)"
            )
        return None

    def fields(self) -> tuple[str, str | None]:
        """The records' (text field, id field): no id field names each by its file and line."""
        return self.text_field, None if self.no_id_field else self.id_field


@dataclass(frozen=True)
class PunktConfig(ReadConfig):
    """`bert-shards punkt`: Punkt's parameters learnt from a sample of the paragraphs."""

    sample_paragraphs: int = 200_000  # bound on the paragraphs Punkt learns from
    seed: int = SEED  # draws the sample

    def __post_init__(self):
        super().__post_init__()
        if self.sample_paragraphs < 1:
            raise ValueError(f"sample_paragraphs must be >= 1 (got {self.sample_paragraphs})")


@dataclass(frozen=True)
class VocabCommandConfig(ReadConfig):
    """`bert-shards vocab`: documents read, de-duplicated, split into sentences, a vocab trained
    on them. A build does the same first, so both train the same vocab."""

    vocab: VocabConfig = field(default_factory=VocabConfig)
    max_paragraph_chars: int = 1_000_000  # longer paragraphs are dropped and counted
    dedup: DedupConfig | None = None  # exact de-duplication of documents and paragraphs
    punkt_json: str | None = None  # Punkt parameters (`bert-shards punkt`); None: English
    cjk_sentences: bool = False  # prose also cut at Chinese and Japanese full stops
    # the exponent on each input group's share of the text (`pipeline.core.smoothing`):
    # multilingual BERT's 0.7; 1, every input as it is
    language_smoothing: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if self.max_paragraph_chars < 1:
            raise ValueError(f"max_paragraph_chars must be >= 1 (got {self.max_paragraph_chars})")
        if not 0 < self.language_smoothing <= 1:
            raise ValueError(
                f"language_smoothing must be in (0, 1] (got {self.language_smoothing}): 1 takes "
                "every input as it is, 0.7 is multilingual BERT's"
            )
        if self.cjk_sentences and all(s.format == "text" for s in self.inputs):
            raise ValueError(
                "cjk_sentences cuts the sentences of prose, and every input is `text`, whose "
                "lines are sentences already: leave it out, or give prose its format (books:PATH)"
            )

    @property
    def weighted(self) -> bool:
        """Whether the inputs are weighted (`--language-smoothing` below 1)."""
        return self.language_smoothing != 1

    def splitting(self) -> tuple:
        """`SplitSentences`'s settings after its folder."""
        return self.max_paragraph_chars, self.punkt_json, self.cjk_sentences


@dataclass(frozen=True)
class BuildConfig(VocabCommandConfig):
    """`bert-shards build`: the vocab's steps, then instances and shards."""

    instances: InstanceConfig = field(default_factory=InstanceConfig)
    vocab_path: str | None = None  # reuse this vocab.txt instead of training one
    num_shards: int = 0  # 0: from the corpus size and bucket_tokens
    bucket_tokens: int = 4_000_000  # tokens per bucket (dupe passes included) when automatic

    def __post_init__(self):
        super().__post_init__()
        if self.num_shards < 0 or self.bucket_tokens < 1:
            raise ValueError("num_shards must be >= 0 and bucket_tokens >= 1")

    def shard_config(self) -> dict:
        """What goes into every shard and the manifest: all that decides shard contents."""
        return {
            **self.instances.to_dict(),
            "lowercase": self.vocab.lowercase,
            "vocab_size_target": None if self.vocab_path else self.vocab.vocab_size,
            "vocab_sample_sentences": None if self.vocab_path else self.vocab.sample_sentences,
            "num_shards": self.num_shards,
            "bucket_tokens": None if self.num_shards else self.bucket_tokens,
            "max_paragraph_chars": self.max_paragraph_chars,
            "punkt": "english"
            if self.punkt_json is None
            else "sha256:" + hashlib.sha256(self.punkt_json.encode()).hexdigest(),
            "dedup": asdict(self.dedup) if self.dedup else None,
            "inputs": sorted({s.format for s in self.inputs}),
            # only when not the default, so that the sets of every earlier build stay the same
            **({"text_field": self.text_field} if self.text_field != "text" else {}),
            **({"id_field": self.id_field} if self.id_field != "id" else {}),
            **({"no_id_field": True} if self.no_id_field else {}),
            **({"records_per_document": n} if (n := self.records_per_document) else {}),
            **({"cjk_sentences": True} if self.cjk_sentences else {}),
            **({"language_smoothing": self.language_smoothing} if self.weighted else {}),
            **self.alphabet_config(),
        }

    def alphabet_config(self) -> dict:
        """A trained vocab's `limit_alphabet` when not the default (none with --vocab)."""
        limit = self.vocab.limit_alphabet
        if self.vocab_path or limit == VocabConfig.limit_alphabet:
            return {}
        return {"limit_alphabet": limit}


def temp_area(out: str) -> str:
    """Where the build keeps its intermediate chunk files; removed when the set is published."""
    return FileSystems.join(building_dir(out), "tmp")


def note_vocab(vocab: Vocab, tmp: str) -> str:
    """The trained vocab's text; its marker tells the progress line the vocab stage is over."""
    write_marker(FileSystems.join(tmp, VOCAB_MARKER), {"pieces": len(vocab)})
    return vocab.to_text()


def build(p: beam.Pipeline, cfg: BuildConfig):
    """Add the build to pipeline `p`; returns the PCollection holding the published row count.

    Only small records cross the stages (see `pipeline.files.chunks`): the corpus itself goes from
    file to file, so memory follows the chunk and the bucket, not the corpus."""
    mark_driver()  # this process builds the graph: its gs:// problems are the driver's
    tmp = temp_area(cfg.out)
    record = FileSystems.join(building_dir(cfg.out), RESUME_RECORD)
    read = p | "ReadDocuments" >> read_documents(cfg, tmp, record)
    counted = [read]  # each stage's records, which carry its counts
    if cfg.dedup:
        read = read | "Deduplicate" >> DeduplicateChunks(cfg.dedup, tmp)
        counted.append(read)
    sentences = read | "SplitSentences" >> SplitSentences(tmp, *cfg.splitting())
    rates = weighting(cfg, sentences)
    # side inputs carry the vocab's text: Beam weighs a cached side input by walking it
    if cfg.vocab_path:
        vocab = p | "LoadVocab" >> beam.Create([load_vocab(cfg.vocab_path).to_text()])
    else:
        trained = sentences | "TrainVocab" >> TrainVocab(cfg.vocab, rates)
        vocab = trained | "VocabText" >> beam.Map(note_vocab, tmp)
    units = sentences | "Tokenize" >> TokenizeDocuments(
        tmp, vocab, cfg.vocab.lowercase, cfg.instances, rates
    )
    built = units | "CreateInstances" >> CreateInstances(
        tmp, cfg.out, vocab, cfg.instances, cfg.shard_config(), cfg.num_shards, cfg.bucket_tokens
    )
    counted += [sentences, units]
    counts = [
        c | f"Counts{i}" >> beam.Map(lambda chunk: chunk.counts) for i, c in enumerate(counted)
    ]
    counts.append(built | "BuildCounts" >> beam.Map(lambda b: b[2]))
    total = tuple(counts) | "Counts" >> SumCounts()
    return built | "WriteShards" >> Publish(
        cfg.out, cfg.shard_config(), vocab, total, cfg.vocab.lowercase, rates, input_labels(cfg)
    )


def input_labels(cfg: ReadConfig) -> tuple[str, ...]:
    """The inputs as given, `FORMAT:PATTERN`, in the order their documents are numbered by."""
    return tuple(f"{s.format}:{s.pattern}" for s in input_order(cfg.inputs))


def weighting(cfg: VocabCommandConfig, sentences):
    """The inputs' weighting, (characters, rate) per input group, when `--language-smoothing`
    asks for it; else None."""
    if not cfg.weighted:
        return None
    return sentences | "Weighting" >> SmoothingRates(cfg.language_smoothing)


RESUME_RECORD = "build.json"


def read_documents(cfg: ReadConfig, tmp: str, record: str | None = None) -> ReadChunks:
    """Every command's read stage, with its config's reading settings (`record`: a build's
    resume record, which names a file changed since)."""
    reading = (cfg.chunk_bytes, cfg.skip_bad_input, record, *cfg.fields())
    grouped = cfg.records_per_document
    return ReadChunks(list(cfg.inputs), tmp, *reading, code_record()[OWN], grouped)


def resume_record(cfg: BuildConfig) -> dict:
    """All that decides the shards' bytes: the config (seed included), every input file's path,
    size and modification time, the given vocab's digest, and the code (`code_record`). A
    resume must match it."""
    vocab = None
    if cfg.vocab_path:
        vocab = hashlib.sha256(read_bytes(cfg.vocab_path)).hexdigest()
    inputs = listing_rows(cfg.inputs)
    record = {"config": cfg.shard_config(), "inputs": inputs, "vocab_sha256": vocab}
    return {**record, "code": code_record()}


def resume_problem(old: dict | None, new: dict) -> str | None:
    """Why an interrupted build cannot be resumed with this command, or None."""
    if old is None:
        return "there is no interrupted build in OUT to resume (no shards/.building/build.json)"
    # keys of either side: one written only when not its default (text_field, cjk_sentences)
    # may be on one
    keys = {*old["config"], *new["config"]}
    changed = sorted(k for k in keys if old["config"].get(k) != new["config"].get(k))
    if changed:
        what = ", ".join(
            f"{k} {old['config'].get(k)!r} -> {new['config'].get(k)!r}" for k in changed
        )
        return f"the config differs from the interrupted build's ({what})"
    if old["inputs"] != new["inputs"]:
        differ = changed_files(old["inputs"], new["inputs"])
        return (
            f"the input differs from the interrupted build's: {len(differ)} file(s) added, "
            f"removed or changed, first {differ[0]}"
        )
    if old["vocab_sha256"] != new["vocab_sha256"]:
        return "the --vocab file differs from the interrupted build's"
    changed = code_changes(old.get("code") or {}, new.get("code") or {})
    if changed:
        return (
            f"the interrupted build ran on other code ({', '.join(changed)}), and a set made "
            "by two versions would be the bytes of neither"
        )
    return None


def check_resume(out: str, record: dict) -> None:
    """A `--resume` of this command: refused (ValueError, saying why) unless OUT holds an
    interrupted build whose record matches `record`. Reads only, so it is also asked before
    OUT is claimed."""
    path = FileSystems.join(building_dir(out), RESUME_RECORD)
    try:
        old = json.loads(read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        old = None
    if old is None and exists(FileSystems.join(out, MANIFEST_NAME)):
        # a runner whose job runs apart from this command (a job service, a cluster) can finish
        # the job after a signal stopped the command, which said to resume (docs/pipeline.md)
        raise ValueError(
            f"--resume refused: OUT holds a finished build ({MANIFEST_NAME}), so there is "
            "nothing to resume (a job that ran on after the command was stopped can have "
            "finished it: bert-shards validate OUT checks the set); to build it again, run the "
            "command without --resume (make: leave ARGS=--resume out)"
        )
    problem = resume_problem(old, record)
    if problem:
        raise ValueError(
            f"--resume refused: {problem}; run the same command as before, or build afresh "
            "without --resume (make: leave ARGS=--resume out)"
        )


def prepare_output(out: str, record: dict, resume: bool = False) -> None:
    """Make the directory invalid until this build publishes: drop the old manifest first, so
    that a build that fails or is stopped never leaves a set that validates (a stale one would
    pass for the new). A fresh build clears the build area; a resume keeps it, when `record`
    matches the one the interrupted build left (else ValueError, saying why)."""
    building = building_dir(out)
    path = FileSystems.join(building, RESUME_RECORD)
    if resume:
        check_resume(out, record)
    remove([FileSystems.join(out, MANIFEST_NAME)])
    if not resume:
        remove_tree(building)  # on object stores: every name under the prefix
    # one line: json's C encoder writes it (an indented dump is pure Python, several times slower
    # on a corpus of many files: docs/benchmarks.md; the driver does it before any worker starts)
    write_text(path, json.dumps(record, sort_keys=True))
