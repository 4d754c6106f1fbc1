"""The progress line of a long build, read from what the workers leave in the temporary area.

Beam's local runner reports nothing until a stage ends, and its workers are other processes,
so the workers write what they did as files and the driver sums them: each reader writes a
marker per chunk (`progress/<chunk>.json`: stored bytes read, documents), each later stage's
chunk files are counted as they appear, a trained vocab leaves `vocab.json`, the bucket count is
written once it is known, and each bucket's shard appears in the build area. Every `interval`
seconds one line goes to stderr.

Training the vocab has no count to show: it begins once every chunk is split and ends when
`vocab.json` appears. The line names it, and the ETA counts it in seconds: its sample's size
(the corpus's sentences, up to the bound) at a measured rate, less the time it has trained.
"""

from __future__ import annotations

import sys
import threading
import time

from apache_beam.io.filesystems import FileSystems

from pipeline.files.fsio import VOCAB_MARKER, files_under, read_marker

STAGES = ("read", "split", "vocab", "tokenize", "instances")


def files(folder: str) -> list:
    try:
        return files_under(folder)
    except Exception:  # a listing that failed once: try next time
        return []


def kind(paths: list[str], folder: str, start: str, suffix: str) -> list[str]:
    """The finished files of one kind: `folder/start...suffix`, one level down."""
    if not start.endswith("-"):
        start += "/"
    head = folder.rstrip("/") + "/" + start
    return [
        p for p in paths if p.startswith(head) and p.endswith(suffix) and "/" not in p[len(head) :]
    ]


class Snapshot:
    """What the temporary area says now."""

    def __init__(
        self, tmp: str, building: str, seen: dict, total_bytes: int = 0, trains_vocab=False
    ):
        found = [m.path for m in files(building)]  # one listing of the whole area
        self.markers = kind(found, tmp, "progress", ".json")
        for path in self.markers:
            if path not in seen:
                seen[path] = read_marker(path)
        values = [seen[path] for path in self.markers]
        self.bytes = sum(v.get("bytes", 0) for v in values)
        self.documents = sum(v.get("documents", 0) for v in values)
        self.chunks = len(kind(found, tmp, "documents", ".arrow"))
        self.split = len(kind(found, tmp, "sentences", ".arrow"))
        self.tokenized = len(kind(found, tmp, "units", ".arrow"))
        self.buckets_done = len(kind(found, building, "bucket-", ".arrow"))
        total = read_marker(FileSystems.join(tmp, "buckets.json"))
        self.buckets = total.get("buckets", 0)
        self.trains_vocab = trains_vocab
        self.vocab_done = FileSystems.join(tmp, VOCAB_MARKER) in found
        self.vocab = (  # training it: all read and split, the vocab not there yet
            trains_vocab
            and not self.vocab_done
            and self.split == self.chunks > 0
            and self.bytes >= total_bytes
            and not self.tokenized
        )

    def stage(self) -> str:
        if self.buckets or self.buckets_done:
            return "instances"
        if self.tokenized or self.vocab_done:
            return "tokenize"
        if self.vocab:
            return "vocab"
        if self.split:
            return "split"
        return "read"


def line(s: Snapshot, total_bytes: int, seconds: float, vocab=(0.0, 0.0)) -> str:
    """One progress line: stage, MB read of the total, documents, chunks, buckets, rate, ETA.
    `vocab`: (seconds the vocab has been training, seconds it should take), see `eta`."""
    mb, total_mb = s.bytes / 1e6, total_bytes / 1e6
    parts = [f"{s.stage():<9}", f"read {mb:,.1f}/{total_mb:,.1f} MB", f"{s.documents:,} documents"]
    if s.chunks:
        parts.append(f"split {s.split}/{s.chunks} chunks, tokenized {s.tokenized}/{s.chunks}")
    if s.buckets:
        parts.append(f"buckets {s.buckets_done}/{s.buckets}")
    parts.append(f"{mb / max(seconds, 1e-9):.2f} MB/s read")
    left = eta(s, total_bytes, seconds, vocab)
    if left is not None:
        parts.append(f"ETA {clock(left)}")
    return f"[{clock(seconds)}] " + ", ".join(parts)


# Shares of a build's time per stage but the vocab's, from the profile of a local build of prose
# (they only shape the ETA; the figures shown are counts).
WEIGHTS = {"read": 0.1, "split": 0.3, "tokenize": 0.3, "instances": 0.3}
# Training the vocab takes the time of its sample, whatever the corpus: a rate per sentence of
# about 108 bytes, measured on the kernel-docs text (docs/benchmarks.md, "The vocab stage and its
# ETA").
VOCAB_SECONDS_PER_SENTENCE = 70e-6
BYTES_PER_SENTENCE = 108


def vocab_seconds_expected(total_bytes: int, sample_sentences: int) -> float:
    """What training the vocab should take: its sample, the corpus's sentences up to the bound."""
    return VOCAB_SECONDS_PER_SENTENCE * min(sample_sentences, total_bytes / BYTES_PER_SENTENCE)


def fraction_done(s: Snapshot, total_bytes: int) -> float:
    """The share done of the stages other than the vocab's."""
    read = min(1.0, s.bytes / total_bytes) if total_bytes else 0.0
    split = s.split / s.chunks if s.chunks else 0.0
    tokenized = s.tokenized / s.chunks if s.chunks else 0.0
    built = s.buckets_done / s.buckets if s.buckets else 0.0
    stage = s.stage()
    if stage != "read":
        read = 1.0
    if stage in ("vocab", "tokenize", "instances"):
        split = 1.0
    shares = {"read": read, "split": split, "tokenize": tokenized, "instances": built}
    return sum(WEIGHTS[k] * v for k, v in shares.items())


def eta(s: Snapshot, total_bytes: int, seconds: float, vocab: tuple[float, float]) -> float | None:
    """Seconds left: the other stages at the rate they went so far (time in the vocab stage left
    out), plus what is left of the vocab's expected time until it is trained. `vocab`: (seconds
    spent training it so far, seconds it should take; 0 when no vocab is trained)."""
    spent, expected = vocab
    done = fraction_done(s, total_bytes)
    if not 0 < done < 1:
        return None
    left = (seconds - spent) * (1 - done) / done
    if expected and not s.vocab_done and not s.tokenized:
        left += max(0.0, expected - spent)
    return left


def clock(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class ProgressLine:
    """A thread that prints the line every `interval` seconds while the build runs."""

    def __init__(
        self,
        tmp: str,
        building: str,
        total_bytes: int,
        stream=None,
        interval=10.0,
        vocab_sample: int = 0,
    ):
        """`vocab_sample`: the bound on the trained vocab's sample; 0 when it is given."""
        self.tmp, self.building, self.total_bytes = tmp, building, total_bytes
        self.trains_vocab = vocab_sample > 0
        self.vocab_expected = vocab_seconds_expected(total_bytes, vocab_sample)
        self.vocab_since: float | None = None  # when the vocab stage was first seen
        self.vocab_spent = 0.0
        self.stream = stream or sys.stderr
        self.interval = interval
        self.stop = threading.Event()
        self.seen: dict = {}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        start = time.time()
        while not self.stop.wait(self.interval):
            snapshot = Snapshot(
                self.tmp, self.building, self.seen, self.total_bytes, self.trains_vocab
            )
            if self.seen and not snapshot.markers:
                continue  # published: the build area is gone
            now = time.time()
            if snapshot.vocab:
                self.vocab_since = self.vocab_since or now
                self.vocab_spent = now - self.vocab_since
            vocab = (self.vocab_spent, self.vocab_expected)
            text = line(snapshot, self.total_bytes, now - start, vocab)
            print(text, file=self.stream)
            self.stream.flush()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
