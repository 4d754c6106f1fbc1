"""ReadChunks: input patterns -> document chunk files, through Beam filesystems (local, gs://).

Files are listed when the pipeline runs and read one per worker call (compressed files are
decompressed by extension, and a truncated one is an error). A command lists them first, before
any work starts: a name that is no regular file, or a dangling link, is refused then
(`refuse_unusable_inputs`), and so, for a build, are two files whose documents would take the
same ids (`refuse_shared_names`). A reader's documents go to chunk
files of bounded size (`pipeline.files.chunks`), and only the small `Chunk` records go on, so the
stages after reading spread over workers without the corpus passing through the runner.
Wikipedia dumps with a multistream index, and large uncompressed exports, are cut into spans
read in parallel (`pipeline.sources.wikipedia.spans`); Wikipedia pages are rendered in the next
stage (`pipeline.sources.wikipedia.reader.rendered`). The readers themselves are plain Python, in
`pipeline.sources`.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import stat
from dataclasses import asdict, dataclass, replace

import apache_beam as beam
from apache_beam.io.filesystem import FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from pipeline.core.keys import stable_hash
from pipeline.files import fsio
from pipeline.files.chunks import Chunk, intact, write_documents
from pipeline.files.fsio import read_marker, write_marker
from pipeline.sources.documents import BadInputError, Document, Tally
from pipeline.sources.readers import READERS, read_input
from pipeline.sources.wikipedia.pages import WikiPage
from pipeline.sources.wikipedia.spans import is_index, plan_wikipedia
from pipeline.stages.base import Stage, Step
from pipeline.stages.counting import prefixed

GLOB_CHARS = fsio.GLOB_CHARS


@dataclass(frozen=True)
class InputSpec:
    format: str  # a key of READERS
    pattern: str  # file, directory or glob, on any Beam filesystem

    def __post_init__(self):
        if self.format not in READERS:
            raise ValueError(
                f"unknown input format {self.format!r} for {self.pattern}; "
                f"choose one of: {', '.join(sorted(READERS))}"
            )


def glob_root(pattern: str) -> str:
    """The directory that relative paths (and so document ids) are taken from."""
    cut = min((pattern.find(c) for c in GLOB_CHARS if c in pattern), default=-1)
    if cut < 0:
        return posixpath.dirname(pattern.rstrip("/"))
    return pattern[:cut].rsplit("/", 1)[0] if "/" in pattern[:cut] else ""


_LISTINGS: dict | None = None  # InputSpec -> its listing, inside `one_listing`
_SIZES: dict[str, int] = {}  # path -> stored size, from the listings inside `one_listing`
_WALKS: dict[str, list[str]] = {}  # local folder -> its files, for the inputs' listings inside it


@contextlib.contextmanager
def one_listing():
    """Inside, each input pattern is listed once: a command's input checks, disk check, resume
    record, progress total and the graph's first steps (when they run in this process or in
    workers forked from it) share one listing and its sizes: each listing of a corpus of many
    files costs CPU in the driver before the first stage (docs/benchmarks.md, raw formats)."""
    global _LISTINGS
    outer = _LISTINGS
    if outer is None:
        _LISTINGS = {}
    try:
        yield
    finally:
        if outer is None:
            _LISTINGS = None
            _SIZES.clear()
            _WALKS.clear()


def listed(spec: InputSpec) -> list[tuple[str, str, str, FileMetadata]]:
    """(format, path, relative path, metadata) of every file the pattern names, sorted, from one
    listing (Beam compiles a pattern per path it is asked to match: a path at a time, 17,000
    books cost a minute). A pattern without glob characters is a file, or a folder read at
    every depth, with or without a trailing slash, on every filesystem (on object stores a
    folder is a name prefix). Inside `one_listing`, listed once."""
    if _LISTINGS is None:
        return list_files(spec)
    if spec not in _LISTINGS:
        _LISTINGS[spec] = list_files(spec)
        _SIZES.update((m.path, m.size_in_bytes) for *_, m in _LISTINGS[spec])
    return list(_LISTINGS[spec])


def list_files(spec: InputSpec) -> list[tuple[str, str, str, FileMetadata]]:
    """`listed`'s listing, made: a name that cannot be read as a file is refused here, where it
    is first seen, before anything reads it (`BadInputError`, whose name the runner's one-line
    failure finds also when a remote worker raised it)."""
    pattern = spec.pattern
    walks = _WALKS if _LISTINGS is not None else {}  # the inputs' folders, walked once
    if any(c in pattern for c in GLOB_CHARS):
        found, root = fsio.match(pattern, walks), glob_root(pattern)
        missed = left_out(pattern, found, walks)
        if not found and not missed and names_a_path(pattern):
            found, root, missed = as_written(pattern)
    else:
        found = fsio.files_under(pattern, walks)
        one_file = len(found) == 1 and found[0].path == pattern.rstrip("/")
        root = glob_root(pattern) if one_file else pattern.rstrip("/")
        missed = left_out(folder_scope(pattern), found, walks)
    refuse_odd_files(found, missed)
    out = []
    for m in found:
        path = m.path
        rel = (
            path[len(root) :].lstrip("/")
            if root and path.startswith(root)
            else posixpath.basename(path)
        )
        out.append((spec.format, path, rel, m))
    return out


def names_a_path(pattern: str) -> bool:
    """A local pattern with glob characters that matches nothing but names a file or folder as
    written ("Moby [1851].txt"): read as that path. Only a pattern that matches no file is read
    so, so what a pattern matches never changes."""
    return fsio.is_local(pattern) and os.path.lexists(pattern.rstrip("/") or pattern)


def as_written(path: str) -> tuple[list[FileMetadata], str, list[str]]:
    """(files, root, names left out) of a local path holding glob characters, taken as written:
    a file, or a folder at every depth, listed as a path without them is (the same walk, joins
    and metadata), so its documents have the ids they would have under a plain name."""
    path = path.rstrip("/") or path
    if os.path.isdir(path):
        names = [os.path.join(d, f) for d, _, files in os.walk(path) for f in files]
        root = path
    else:
        names, root = [path], posixpath.dirname(path)
    found, missed = [], []
    for name in names:
        try:
            st = os.stat(name)
        except OSError:  # a dangling link, or gone since the walk
            missed.append(name)
            continue
        found.append(FileMetadata(name, st.st_size, st.st_mtime))
    return sorted(found, key=lambda m: m.path), root, missed


def folder_scope(pattern: str) -> str:
    """What a local pattern without glob characters is listed as: a folder's `/**`, or the
    path itself."""
    if fsio.is_local(pattern) and os.path.isdir(pattern):
        return pattern.rstrip("/") + "/**"
    return pattern


def left_out(scope: str, found: list[FileMetadata], walks: dict) -> list[str]:
    """The local names a listing of `scope` walked and matched but did not list: those that
    `os.stat` failed on, a dangling symbolic link (or a file removed since the walk). The
    listing leaves them out without a word; `walks` holds what it walked."""
    if not fsio.is_local(scope):
        return []
    if not any(c in scope for c in GLOB_CHARS):
        return [] if found else [scope]
    if scope.endswith("/"):
        scope += "*"  # as `fsio.local_match` reads it
    base = os.path.dirname(re.match(r"^[^[*?]*", scope).group(0))
    below = base.rstrip(os.sep) + os.sep
    walked = {
        path
        for folder, paths in walks.items()
        if folder == base or folder.startswith(below)
        for path in paths
    }
    matches = re.compile(FileSystem.translate_pattern(scope)).match
    return sorted(p for p in walked - {m.path for m in found} if matches(p))


def refuse_odd_files(found: list[FileMetadata], missed: list[str]) -> None:
    """A named pipe, socket or device among an input's files, or a dangling symbolic link, is
    refused: reading a pipe waits for a writer that never comes (the build would hang), and a
    dangling link would be left out uncounted."""
    for path in missed:
        if os.path.islink(path) and not os.path.exists(path):
            raise BadInputError(
                f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                "remove the link or restore what it points to"
            )
    for m in found:
        if m.size_in_bytes == 0 and fsio.is_local(m.path):  # how pipes and devices list
            kind = not_a_file(m.path)
            if kind:
                raise BadInputError(
                    f"{m.path} is {kind}, not a regular file, so it cannot be read as input; "
                    "remove it from the input folder, or name the input's files with a glob "
                    "that leaves it out"
                )


SPECIAL_FILES = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_a_file(path: str) -> str | None:
    """What a local name is when it is no regular file (links followed), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # gone since the listing: reading it says so
        return None
    return next((kind for test, kind in SPECIAL_FILES if test(mode)), None)


def refuse_unusable_inputs(specs) -> None:
    """Lists every input before any work starts (the listing is kept for the command, inside
    `one_listing`): a name that is no readable file stops the command in one line."""
    for spec in specs:
        try:
            listed(spec)
        except BadInputError as e:
            raise SystemExit(f"error: {e}") from None


IDS_OF_NAMES = ("text", "books")  # formats whose document ids are a file's name in its input


def refuse_shared_names(specs, dedup: bool) -> None:
    """Two files whose documents would take the same ids stop a build before any work starts,
    instead of when the ids meet (`pipeline.core.buckets.refuse_repeated_ids`), after OUT was
    made. Ids stay as they are (they decide the shards' bytes). With --dedup equal copies are
    dropped before the ids meet, so nothing is refused here."""
    if dedup:
        return
    line = shared_name(specs)
    if line:
        raise SystemExit(f"error: {line}")


def shared_name(specs) -> str | None:
    """The first clash of ids among the inputs' files, as a line, or None. Text and books ids
    are made of a file's name within its input; any file read twice under one name repeats
    every id (JSONL ids of records without one, Wikipedia's page ids). Empty files make no
    document and a multistream index is read with its dump, so neither can clash."""
    seen: dict[tuple, tuple[str, str, int]] = {}
    for spec in specs:
        for fmt, path, rel, m in listed(spec):
            if m.size_in_bytes == 0 or (fmt == "wikipedia" and is_index(path)):
                continue
            key = (fmt, rel) if fmt in IDS_OF_NAMES else (fmt, rel, path)
            if key in seen:
                return clash_line(seen[key], (path, spec.pattern, m.size_in_bytes), rel)
            seen[key] = (path, spec.pattern, m.size_in_bytes)
    return None


def clash_line(first: tuple[str, str, int], second: tuple[str, str, int], rel: str) -> str:
    """What is wrong with two listings of one name, and what to do. --dedup is named only for
    files of one size: it helps only when their documents are equal."""
    (path, pattern, size), (other, other_pattern, other_size) = first, second
    if path == other:
        return (
            f"{path} is read twice, as {rel} of the inputs {pattern} and {other_pattern}, so "
            "each of its documents would be there twice; give each file once"
        )
    copies = "pass --dedup (make: ARGS=--dedup) if they are copies, or " * (size == other_size)
    return (
        f"{path} and {other} have the same name within their inputs ({rel}), which names their "
        f"documents; rename one, {copies}give a folder above both as one input"
    )


def expand_pattern(spec: InputSpec) -> list[tuple[str, str, str]]:
    """(format, path, relative path) for every file the pattern names, sorted."""
    return [(fmt, path, rel) for fmt, path, rel, _ in listed(spec)]


class ReadFile(Step):
    """A group of read items (see `pack_reads`) -> document chunk files of about `chunk_bytes`
    of text, as `Chunk`s; the group's counts ride on its last `Chunk` (one with no path when
    nothing was read). Each chunk leaves a progress marker: stored bytes read, documents."""

    def __init__(self, tmp: str, chunk_bytes: int, skip_bad_input: bool):
        self.tmp = tmp
        self.chunk_bytes = chunk_bytes
        self.skip_bad_input = skip_bad_input

    def process(self, group):
        done = FileSystems.join(self.tmp, "items", item_key(group[0]) + ".json")
        records = read_marker(done).get("chunks")
        # read by an earlier attempt, or an interrupted build: taken when its files are intact
        if records is not None and all(intact(r["path"]) for r in records if r["path"]):
            yield from (Chunk.from_record(r["path"], r) for r in records)
            return
        chunks = list(read_group(group, self.tmp, self.chunk_bytes, self.skip_bad_input))
        inputs = sorted({item[1] for item in group})  # named when an id repeats (BuildBucket)
        write_marker(done, {"chunks": [asdict(c) for c in chunks], "inputs": inputs})
        yield from chunks


def read_group(group, tmp: str, chunk_bytes: int, skip_bad_input: bool):
    """The documents of a group's read items, in chunks of about `chunk_bytes` of text under
    `tmp`; the group's counts ride on its last `Chunk` (one with no path when nothing was read)."""
    opened = Opener()
    writer = ChunkWriter(tmp, item_key(group[0]), chunk_bytes, opened)
    counts: dict = {}
    for item in group:
        tally = Tally(skip_bad_input=skip_bad_input)
        opened.start_item(item[3].start if item[3] else 0)
        try:
            yield from writer.add_all(read_item(item, tally, skip_bad_input, opened.open))
        finally:
            if item[3] is None or item[3].start <= item[3].header_end:  # a first span
                tally.inc("files_read")
        for key, n in prefixed(item[0], tally.counts).items():
            counts[key] = counts.get(key, 0) + n
    last = writer.flush() or Chunk("")
    yield replace(last, counts=counts)


class Opener:
    """Opens the input files of a group as stored and follows how far they have been read."""

    def __init__(self):
        self.done = 0  # bytes of the group's finished items
        self.start = 0
        self.file = None

    def start_item(self, start: int):
        self.done = self.consumed()
        self.start, self.file = start, None

    def open(self, path: str):
        self.file = TrackedFile(open_raw(path))
        return self.file

    def consumed(self) -> int:
        here = max(0, self.file.pos - self.start) if self.file else 0
        return self.done + here


class TrackedFile:
    """A file object that remembers its position after every read (it stays known once the
    reader has closed the file)."""

    def __init__(self, f):
        self._f = f
        self.pos = 0

    def read(self, n=-1):
        data = self._f.read(n)
        self.pos = self._f.tell()
        return data

    def readinto(self, buffer):
        n = self._f.readinto(buffer)
        self.pos = self._f.tell()
        return n

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def read_item(item, tally: Tally, skip_bad_input: bool, opener=None):
    """Documents and pages of one read item; a bad file stops the run or, when skipped, is
    counted (what was read before the fault is kept)."""
    fmt, path, _, _ = item
    try:
        for doc in read_input(item, tally, opener or open_raw):
            if isinstance(doc, Document):  # Wikipedia pages are counted once rendered
                tally.inc("documents_read")
            yield doc
    except BadInputError:  # names the file and the place already
        if not skip_bad_input:
            raise
        tally.inc("files_dropped.unreadable")
    except (OSError, EOFError, ValueError) as e:
        if not skip_bad_input:
            raise ValueError(
                f"{path}: cannot be read as {fmt} input ({type(e).__name__}: {e}); the file is "
                "truncated or corrupt. Fix or remove it, or pass --skip-bad-input (make: "
                "ARGS=--skip-bad-input) to skip and count bad files"
            ) from e
        tally.inc("files_dropped.unreadable")


def item_key(item) -> str:
    """A name for a read item's chunks, the same on every run and worker."""
    _, path, _, span = item
    return f"{stable_hash(path, span.start if span else -1):016x}"


class ChunkWriter:
    """Documents in, a chunk file (and its progress marker) out whenever `chunk_bytes` of text
    have gathered."""

    def __init__(self, tmp: str, key: str, chunk_bytes: int, opened: Opener):
        self.tmp, self.key, self.chunk_bytes, self.opened = tmp, key, chunk_bytes, opened
        self.pending: list = []
        self.size = 0
        self.written = 0
        self.reported = 0

    def add_all(self, docs):
        """Yields a `Chunk` for each full chunk; the rest waits for `flush`."""
        for doc in docs:
            self.pending.append(doc)
            self.size += item_bytes(doc)
            if self.size >= self.chunk_bytes:
                yield self.write()

    def write(self) -> Chunk:
        name = f"{self.key}-{self.written:05d}"
        chunk = write_documents(
            FileSystems.join(self.tmp, "documents", name + ".arrow"), self.pending
        )
        consumed = self.opened.consumed()
        marker = {"bytes": consumed - self.reported, "documents": len(self.pending)}
        write_marker(FileSystems.join(self.tmp, "progress", name + ".json"), marker)
        self.reported = consumed
        self.pending, self.size, self.written = [], 0, self.written + 1
        return chunk

    def flush(self) -> Chunk | None:
        return self.write() if self.pending else None


def item_bytes(doc) -> int:
    if isinstance(doc, WikiPage):
        return len(doc.wikitext)
    return sum(map(len, doc.paragraphs))


def open_raw(path: str):
    """A file as stored: decompression is `read_input`'s, which notices truncated files."""
    return fsio.open_read(path)


def input_files(specs) -> list[tuple[str, int]]:
    """(path, stored size) of every input file."""
    return [(m.path, m.size_in_bytes) for spec in specs for *_, m in listed(spec)]


def input_bytes(specs) -> int:
    """The stored size of every input file (what the progress line counts against)."""
    return sum(size for _, size in input_files(specs))


MIN_CHUNK_BYTES, MAX_CHUNK_BYTES = 1 << 20, 32 << 20


def chunk_bytes_for(total: int) -> int:
    """Text per chunk: about 64 chunks spread the work over workers; the bounds keep files few
    on a large corpus and a worker's memory small (a chunk is held whole while it is worked)."""
    return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, total // 64))


def plan_reads(item: tuple[str, str, str]):
    """(format, path, rel, span): Wikipedia dumps with an index, and large uncompressed
    exports, are cut into spans read in parallel; other files are read whole (span None)."""
    fmt, path, rel = item
    spans = [None]
    if fmt == "wikipedia":
        if is_index(path):  # read with its dump, not as an export
            return
        spans = plan_wikipedia(path, fsio.size(path), open_raw, fsio.exists)
    for span in spans:
        yield fmt, path, rel, span


def read_sizes(item) -> tuple:
    """A read item and the bytes it covers (a span's length, or the file's stored size, from
    the listing just made when this process made it: one request fewer per file on gs://)."""
    fmt, path, rel, span = item
    if span is not None:
        return item, span.end - span.start
    return item, _SIZES[path] if path in _SIZES else fsio.listed_size(path)


def pack_reads(sized: list, chunk_bytes: int) -> list[tuple]:
    """Read items -> groups read by one worker call: consecutive small files (in path order)
    together up to `chunk_bytes`, so that a corpus of many small files (BooksCorpus has 17,000)
    makes chunks of about `chunk_bytes`, not one per file: a bucket reads every units file."""
    groups, current, size = [], [], 0
    for item, n in sorted(sized, key=lambda s: (s[0][0], s[0][1], s[0][3].start if s[0][3] else 0)):
        if current and size + n > chunk_bytes:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(item)
        size += n
    if current:
        groups.append(tuple(current))
    return groups


@dataclass(eq=False)
class ReadChunks(Stage):
    """Input patterns -> document chunks (files under `tmp`) as `Chunk` records with counts."""

    inputs: list[InputSpec]
    tmp: str
    chunk_bytes: int
    skip_bad_input: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.inputs = sorted(self.inputs, key=lambda s: (s.format, s.pattern))

    def expand(self, pbegin):
        read = ReadFile(self.tmp, self.chunk_bytes, self.skip_bad_input)
        return (
            pbegin
            | "Inputs" >> beam.Create(self.inputs)
            | "ListFiles" >> beam.FlatMap(expand_pattern)
            | "PlanReads" >> beam.FlatMap(plan_reads)
            | "Sizes" >> beam.Map(read_sizes)
            | "Gather" >> beam.combiners.ToList()
            | "Pack" >> beam.FlatMap(pack_reads, self.chunk_bytes)
            | "SpreadFiles" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(read)
        )
