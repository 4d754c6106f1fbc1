"""The whole build as one Beam graph: read -> split -> vocab -> tokenize -> instances -> shards."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.config import InstanceConfig, VocabConfig
from pipeline.counting import SumCounts
from pipeline.dedup import DedupConfig, DeduplicateChunks
from pipeline.shards import BUILDING_DIR, Publish
from pipeline.sources import InputSpec, ReadChunks
from pipeline.transforms import (
    CreateInstances,
    SplitSentences,
    TokenizeDocuments,
    TrainVocab,
)
from schemas.manifest import MANIFEST_NAME
from schemas.vocab import Vocab


@dataclass(frozen=True)
class BuildConfig:
    inputs: tuple[InputSpec, ...]
    out: str  # dataset directory (local path or any Beam filesystem)
    instances: InstanceConfig = field(default_factory=InstanceConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    vocab_path: str | None = None  # reuse this vocab.txt instead of training one
    num_shards: int = 0  # 0: from the corpus size and bucket_tokens
    bucket_tokens: int = 4_000_000  # tokens per bucket (dupe passes included) when automatic
    max_paragraph_chars: int = 1_000_000  # longer paragraphs are dropped and counted
    skip_bad_input: bool = False  # skip and count unreadable files instead of failing
    dedup: DedupConfig | None = None  # exact de-duplication of documents and paragraphs
    punkt_json: str | None = None  # Punkt parameters (`bert-shards punkt`); None: English
    chunk_bytes: int = 8 << 20  # text per intermediate chunk file; never changes the output

    def __post_init__(self):
        if not self.inputs:
            raise ValueError("no input given: pass --input PATH (a file, directory or glob)")
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
        }


def load_vocab(path: str) -> Vocab:
    """A `--vocab` file, refused in one line when it is missing, unreadable or lists a piece
    twice (the shards would then disagree with `vocab.txt` on the vocab's size)."""
    try:
        with FileSystems.open(path) as f:
            text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--vocab {path}: cannot be read ({type(e).__name__}): {e}") from None
    pieces = text.splitlines()
    seen: dict[str, int] = {}
    for line, piece in enumerate(pieces, 1):
        if piece in seen and piece.strip():
            raise ValueError(
                f"--vocab {path}: line {line} repeats the piece {piece!r} of line {seen[piece]}; "
                "a vocab lists each piece once: remove the repeat"
            )
        seen.setdefault(piece, line)
    try:
        return Vocab.from_text(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def temp_area(out: str) -> str:
    """Where the build keeps its intermediate chunk files; removed when the set is published."""
    return FileSystems.join(out, "shards", BUILDING_DIR, "tmp")


def build(p: beam.Pipeline, cfg: BuildConfig):
    """Add the build to pipeline `p`; returns the PCollection holding the published row count.

    Only small records cross the stages (see `pipeline.spill`): the corpus itself goes from
    file to file, so memory follows the chunk and the bucket, not the corpus."""
    tmp = temp_area(cfg.out)
    read = p | "ReadDocuments" >> ReadChunks(
        list(cfg.inputs), tmp, cfg.chunk_bytes, cfg.skip_bad_input
    )
    counts = [read]
    if cfg.dedup:
        read, dedup_counts = read | "Deduplicate" >> DeduplicateChunks(cfg.dedup, tmp)
        counts.append(dedup_counts)
    sentences = read | "SplitSentences" >> SplitSentences(
        tmp, cfg.max_paragraph_chars, cfg.punkt_json
    )
    if cfg.vocab_path:
        vocab = p | "LoadVocab" >> beam.Create([load_vocab(cfg.vocab_path)])
    else:
        vocab = sentences | "TrainVocab" >> TrainVocab(cfg.vocab)
    units = sentences | "Tokenize" >> TokenizeDocuments(
        tmp, vocab, cfg.vocab.lowercase, cfg.instances
    )
    built = units | "CreateInstances" >> CreateInstances(
        cfg.out, vocab, cfg.instances, cfg.shard_config(), cfg.num_shards, cfg.bucket_tokens
    )
    counts += [sentences, units]
    count_dicts = [
        c | f"Counts{i}" >> beam.Map(lambda chunk: chunk.counts) for i, c in enumerate(counts)
    ]
    count_dicts.append(built | "BuildCounts" >> beam.Map(lambda b: b[2]))
    total = tuple(count_dicts) | "Counts" >> SumCounts()
    return built | "WriteShards" >> Publish(
        cfg.out, cfg.shard_config(), vocab, total, cfg.vocab.lowercase
    )


def prepare_output(out: str) -> None:
    """Make the directory invalid until this build publishes: drop the old manifest first."""
    manifest = FileSystems.join(out, MANIFEST_NAME)
    if FileSystems.exists(manifest):
        FileSystems.delete([manifest])
    building = FileSystems.join(out, "shards", BUILDING_DIR)
    if FileSystems.exists(building + "/"):
        FileSystems.delete([building])
