"""ReadChunks: input patterns -> document chunk files, through Beam filesystems (local, gs://).

Files are listed when the pipeline runs (`pipeline.files.listing`, which a command has used
before any work starts to refuse what cannot be read), packed into groups in the same step, and
read a group per worker call (compressed files are decompressed by extension, and a truncated
one is an error). A reader's documents go to chunk files of bounded size
(`pipeline.files.chunks`), and only the small `Chunk` records go on, so the stages after
reading spread over workers without the corpus passing through the runner. Wikipedia dumps with
a multistream index, and large uncompressed exports, are cut into spans read in parallel
(`pipeline.sources.wikipedia.spans`); Wikipedia pages are rendered in the next stage
(`pipeline.sources.wikipedia.reader.rendered`). The readers themselves are plain Python, in
`pipeline.sources`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.core.keys import stable_hash
from pipeline.files import fsio
from pipeline.files.chunks import Chunk, intact, write_documents
from pipeline.files.code import same_sources
from pipeline.files.fsio import read_marker, write_marker
from pipeline.files.listing import (
    InputSpec,
    check_listing,
    expand_pattern,
    input_bytes,
    known_size,
    listed_here,
    listing_for_workers,
    one_listing,
)
from pipeline.files.tracked import Opener, open_raw
from pipeline.sources import line_spans
from pipeline.sources.archives import archive_kind
from pipeline.sources.documents import BadInputError, Document, Tally
from pipeline.sources.line_spans import (
    LINE_FORMATS,
    LINE_SPAN_BYTES,
    count_line_span,
    numbered,
    numbered_spans,
    plan_line_spans,
)
from pipeline.sources.parquet import plan_parquet_spans
from pipeline.sources.readers import read_input
from pipeline.sources.wikipedia.pages import WikiPage
from pipeline.sources.wikipedia.spans import is_index, plan_wikipedia
from pipeline.stages.base import Stage, Step
from pipeline.stages.counting import prefixed
from schemas.storage_errors import StoreError


@beam.typehints.with_output_types(Any)
class ReadFile(Step):
    """A group of read items (see `pack_reads`) -> document chunk files of about `chunk_bytes`
    of text, as `Chunk`s; the group's counts ride on its last `Chunk` (one with no path when
    nothing was read). Each chunk leaves a progress marker: stored bytes read, documents.

    Its output type is declared as the `Any` Beam infers for it, so Beam's type inference,
    which would trace `process` and the functions it calls through their bytecode when each
    graph is made, is not run (docs/benchmarks.md)."""

    def __init__(
        self, tmp: str, chunk_bytes: int, skip_bad_input: bool, fields=("text", "id"), code=""
    ):
        self.tmp = tmp
        self.chunk_bytes = chunk_bytes
        self.skip_bad_input = skip_bad_input
        # (text, id) of JSON Lines records, Parquet and Arrow columns, and the records a document
        self.fields = fields
        self.code = code  # the digest of the command's sources, which this worker's must be

    def setup(self) -> None:
        super().setup()
        same_sources(self.code)

    def process(self, group, numbers=None):
        if numbers:  # the spans of large text and JSON Lines files, each told the count before it
            group = tuple(numbered_item(item, numbers) for item in group)
        done = FileSystems.join(self.tmp, "items", item_key(group[0]) + ".json")
        records = read_marker(done).get("chunks")
        # read by an earlier attempt, or an interrupted build: taken when its files are intact
        if records is not None and all(intact(r["path"]) for r in records if r["path"]):
            yield from (Chunk.from_record(r["path"], r) for r in records)
            return
        chunks = list(
            read_group(group, self.tmp, self.chunk_bytes, self.skip_bad_input, self.fields)
        )
        inputs = sorted({item[1] for item in group})  # named when an id repeats (BuildBucket)
        write_marker(done, {"chunks": [asdict(c) for c in chunks], "inputs": inputs})
        yield from chunks


def read_group(group, tmp: str, chunk_bytes: int, skip_bad_input: bool, fields=("text", "id")):
    """The documents of a group's read items, in chunks of about `chunk_bytes` of text under
    `tmp`; the group's counts ride on its last `Chunk` (one with no path when nothing was read)."""
    opened = Opener()
    writer = ChunkWriter(tmp, item_key(group[0]), chunk_bytes, opened)
    counts: dict = {}
    for item in group:
        tally = Tally(skip_bad_input=skip_bad_input)
        opened.start_item(item[3])
        try:
            docs = read_item(item[:4], tally, skip_bad_input, opened.open, fields)
            yield from writer.add_all(docs, item[4])
        finally:
            if item[3] is None or item[3].start <= item[3].header_end:  # a first span
                tally.inc("files_read")
        for key, n in prefixed(item[0], tally.counts).items():
            counts[key] = counts.get(key, 0) + n
    last = writer.flush() or Chunk("")
    yield replace(last, counts=counts)


def read_item(item, tally: Tally, skip_bad_input: bool, opener=None, fields=("text", "id")):
    """Documents and pages of one read item; a bad file stops the run or, when skipped, is
    counted (what was read before the fault is kept)."""
    fmt, path, _, _ = item
    try:
        for doc in read_input(item, tally, opener or open_raw, *fields):
            if isinstance(doc, Document):  # Wikipedia pages are counted once rendered
                tally.inc("documents_read")
            yield doc
    except BadInputError:  # names the file and the place already
        if not skip_bad_input:
            raise
        tally.inc("files_dropped.unreadable")
    except StoreError:  # the store's, not the file's: said as such, never skipped
        raise
    except (OSError, EOFError, ValueError) as e:
        if not skip_bad_input:
            raise ValueError(unreadable_line(fmt, path, e)) from e
        tally.inc("files_dropped.unreadable")


def unreadable_line(fmt: str, path: str, e: BaseException) -> str:
    """What stops a build at an input file it cannot read: one the build listed at its start
    and found gone (moved or removed while it ran) is said to be so, not to be damaged."""
    if isinstance(e, FileNotFoundError):
        return (
            f"{path}: this {fmt} input file was listed when the build started and is gone now "
            "(moved or removed while the build ran); put it back and run the same command with "
            "--resume, or run it again without --resume to build from the files there are"
        )
    return (
        f"{path}: cannot be read as {fmt} input ({type(e).__name__}: {e}); the file is "
        "truncated or corrupt. Fix or remove it, or pass --skip-bad-input (make: "
        "ARGS=--skip-bad-input) to skip and count bad files"
    )


def item_key(item) -> str:
    """A name for a read item's chunks, the same on every run and worker."""
    _, path, _, span = item[:4]
    return f"{stable_hash(path, span.start if span else -1):016x}"


class ChunkWriter:
    """Documents in, a chunk file (and its progress marker) out whenever `chunk_bytes` of text
    have gathered."""

    def __init__(self, tmp: str, key: str, chunk_bytes: int, opened: Opener):
        self.tmp, self.key, self.chunk_bytes, self.opened = tmp, key, chunk_bytes, opened
        self.pending: list = []
        self.inputs: list[int] = []  # the index of each pending document's input
        self.size = 0
        self.written = 0
        self.reported = 0

    def add_all(self, docs, input_index: int = 0):
        """Yields a `Chunk` for each full chunk; the rest waits for `flush`. `input_index`: the
        documents' input, in the command's order of its inputs (`input_order`)."""
        for doc in docs:
            self.pending.append(doc)
            self.inputs.append(input_index)
            self.size += item_bytes(doc)
            if self.size >= self.chunk_bytes:
                yield self.write()

    def write(self) -> Chunk:
        name = f"{self.key}-{self.written:05d}"
        path = FileSystems.join(self.tmp, "documents", name + ".arrow")
        chunk = write_documents(path, self.pending, self.inputs)
        consumed = self.opened.consumed()
        marker = {"bytes": consumed - self.reported, "documents": len(self.pending)}
        write_marker(FileSystems.join(self.tmp, "progress", name + ".json"), marker)
        self.reported = consumed
        self.pending, self.inputs, self.size = [], [], 0
        self.written += 1
        return chunk

    def flush(self) -> Chunk | None:
        return self.write() if self.pending else None


def item_bytes(doc) -> int:
    if isinstance(doc, WikiPage):
        return len(doc.wikitext)
    return sum(map(len, doc.paragraphs))


MIN_CHUNK_BYTES, MAX_CHUNK_BYTES = 1 << 20, 32 << 20
READ_PIECES = 64  # the pieces a read stage is cut into at least: chunks, spans


def chunk_bytes_for(total: int) -> int:
    """Text per chunk: about 64 chunks spread the work over workers; the bounds keep files few
    on a large corpus and a worker's memory small (a chunk is held whole while it is worked)."""
    return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, total // READ_PIECES))


NO_SPANS = 1 << 62  # a span size no file reaches: every file read whole


def plan_reads(item: tuple[str, str, str], span_bytes: int | None = None):
    """(format, path, rel, span): Wikipedia dumps with an index, and large uncompressed
    exports, text and JSON Lines files, and large Parquet files (by row groups), are cut into
    spans read in parallel; other files, and archives, are read whole (span None)."""
    fmt, path, rel = item
    spans = [None]
    if archive_kind(path):  # a stream of members, read whole
        pass
    elif fmt == "wikipedia":
        if is_index(path):  # read with its dump, not as an export
            return
        spans = plan_wikipedia(path, fsio.size(path), open_raw, fsio.exists)
    elif fmt in LINE_FORMATS or fmt == "parquet":
        size = known_size(path)
        size = fsio.size(path) if size is None else size
        plan = plan_parquet_spans if fmt == "parquet" else partial(plan_line_spans, fmt)
        spans = plan(path, size, open_raw, span_bytes or LINE_SPAN_BYTES)
    for span in spans:
        yield fmt, path, rel, span


def read_sizes(item, input_index: int = 0) -> tuple:
    """A read item, its input's index added, and the bytes it covers (a span's length, or the
    file's stored size, from the listing just made when this process made it: one request fewer
    per file on gs://)."""
    fmt, path, rel, span = item
    if span is not None:
        return (*item, input_index), span.end - span.start
    size = known_size(path)
    return (*item, input_index), size if size is not None else fsio.listed_size(path)


def plan_groups(
    specs,
    chunk_bytes: int,
    digest: str | None = None,
    record: str | None = None,
    span_bytes: int | None = None,
) -> list[tuple]:
    """Every input pattern listed, cut into read items, sized and packed (`pack_reads`), in one
    step: as one element per file through four steps of the runner, a corpus of many small
    files kept one worker busy alone before any file was read (what that cost:
    docs/benchmarks.md, raw formats, 2026-12-05). The groups do not depend on the order of
    `specs`. A worker that lists the input itself checks it against the command's listing
    (`digest`; `check_listing`); one forked from the command reads the command's own.
    `span_bytes`: of the spans of a large text, JSON Lines or Parquet file (`LINE_SPAN_BYTES`),
    or a `READ_PIECES`th of the whole input when that is more: a corpus of many such files is
    read a file a worker, which spreads it already (cutting them would only add the count)."""
    fresh = not listed_here(specs)
    with one_listing():
        if digest is not None and fresh:
            check_listing(specs, digest, record)
        span_bytes = max(span_bytes or LINE_SPAN_BYTES, input_bytes(specs) // READ_PIECES)
        sized = [
            read_sizes(planned, k)
            for k, spec in enumerate(input_order(specs))
            for item in expand_pattern(spec)
            for planned in plan_reads(item, span_bytes)
        ]
    return pack_reads(sized, chunk_bytes)


def input_order(specs) -> list:
    """The inputs in the order their documents are numbered by (`Document.input_index`)."""
    return sorted(specs, key=lambda s: (s.format, s.pattern))


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
    record: str | None = None  # a build's resume record, which names a file changed since
    text_field: str = "text"  # of JSON Lines, Parquet and Arrow records
    id_field: str | None = "id"  # likewise
    code: str = ""  # the digest of the command's sources (`pipeline.files.code`)
    # every so many records make a document (`--records-per-document`); 0: each its own
    per_document: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.inputs = input_order(self.inputs)
        self.digest = listing_for_workers(self.inputs)  # what workers that list must find

    def expand(self, pbegin):
        fields = (self.text_field, self.id_field, self.per_document)
        read = ReadFile(self.tmp, self.chunk_bytes, self.skip_bad_input, fields, self.code)
        # read here, in the command's process, and handed to the worker that plans the reads;
        # records joined into documents are read a file whole: a span knows not where a
        # document of them starts
        spans = NO_SPANS if self.per_document else line_spans.LINE_SPAN_BYTES
        plan = (self.chunk_bytes, self.digest, self.record, spans)
        groups = (
            pbegin
            | "Inputs" >> beam.Create([tuple(self.inputs)])
            | "PlanReads" >> beam.FlatMap(plan_groups, *plan)
        )
        numbers = (  # ids number a text file's documents from its start: its spans counted first
            groups
            | "LineSpans" >> beam.FlatMap(line_spans_of)
            | "SpreadSpans" >> beam.Reshuffle()
            | "CountSpans" >> beam.Map(count_span)
            | "Counted" >> beam.combiners.ToList()
            | "SpanNumbers" >> beam.Map(numbered_spans)
        )
        return (
            groups
            | "SpreadFiles" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(read, beam.pvalue.AsSingleton(numbers))
        )


def line_spans_of(group) -> list:
    """The read items of a group that are spans of text or JSON Lines files."""
    return [item for item in group if item[3] is not None and item[0] in LINE_FORMATS]


def count_span(item) -> tuple:
    """((path, start), (count, seen)) of a span of a text or JSON Lines file
    (`count_line_span`); a file that cannot be read counts nothing here: its read step says so
    (or, with --skip-bad-input, counts it)."""
    fmt, path, rel, span = item[:4]
    try:
        with open_raw(path, span.end) as raw:
            return (path, span.start), count_line_span(raw, fmt, rel, span)
    except (OSError, EOFError, ValueError):
        return (path, span.start), (0, False)


def numbered_item(item, numbers: dict):
    """A read item whose span of a text or JSON Lines file is told the count before it."""
    fmt, path, rel, span, *rest = item
    if span is None or fmt not in LINE_FORMATS:
        return item
    return (fmt, path, rel, numbered(span, path, numbers), *rest)
