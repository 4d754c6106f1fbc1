"""ReadDocuments: input patterns -> `Document`s, through Beam filesystems (local, gs://, ...).

Files are listed when the pipeline runs, read one per worker call (compressed files are
decompressed by extension, and a truncated one is an error), and the documents redistributed
right after so that a large file does not pin the stages that follow to one worker. Wikipedia
dumps with a multistream index, and large uncompressed exports, are cut into spans read in
parallel (`pipeline.multistream`); Wikipedia pages are rendered after the redistribution.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.counting import COUNTS, CountingDoFn
from pipeline.documents import READERS, BadInputError, Document, Tally
from pipeline.multistream import is_index, plan_wikipedia, read_input
from pipeline.wikipedia import WikiPage, page_document

GLOB_CHARS = "*?["


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


def expand_pattern(spec: InputSpec) -> list[tuple[str, str, str]]:
    """(format, path, relative path) for every file the pattern names, sorted."""
    pattern = spec.pattern
    if not any(c in pattern for c in GLOB_CHARS) and FileSystems.exists(pattern.rstrip("/") + "/"):
        pattern = pattern.rstrip("/") + "/**"
    root = glob_root(pattern)
    found = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list]
    out = []
    for path in sorted(found):
        rel = (
            path[len(root) :].lstrip("/")
            if root and path.startswith(root)
            else posixpath.basename(path)
        )
        out.append((spec.format, path, rel))
    return out


class ReadFile(CountingDoFn):
    def __init__(self, skip_bad_input: bool):
        self.skip_bad_input = skip_bad_input

    def process(self, item):
        fmt, path, rel, span = item
        tally = Tally(skip_bad_input=self.skip_bad_input)
        try:
            for doc in read_input(item, tally, open_raw):
                if isinstance(doc, Document):  # Wikipedia pages are counted once rendered
                    tally.inc("documents_read")
                yield doc
        except BadInputError:  # names the file and the place already
            if not self.skip_bad_input:
                raise
            tally.inc("files_dropped.unreadable")
        except (OSError, EOFError, ValueError) as e:
            if not self.skip_bad_input:
                raise ValueError(
                    f"{path}: cannot be read as {fmt} input ({type(e).__name__}: {e}); the file is "
                    "truncated or corrupt. Fix or remove it, or pass --skip-bad-input to skip and "
                    "count bad files"
                ) from e
            tally.inc("files_dropped.unreadable")
        finally:
            if span is None or span.start <= span.header_end:  # a file's first span
                tally.inc("files_read")
            self.count_all(fmt, tally.counts)


def open_raw(path: str):
    """A file as stored: decompression is `read_input`'s, which notices truncated files."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def plan_reads(item: tuple[str, str, str]):
    """(format, path, rel, span): Wikipedia dumps with an index, and large uncompressed
    exports, are cut into spans read in parallel; other files are read whole (span None)."""
    fmt, path, rel = item
    spans = [None]
    if fmt == "wikipedia":
        if is_index(path):  # read with its dump, not as an export
            return
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
        spans = plan_wikipedia(path, size, open_raw, FileSystems.exists)
    for span in spans:
        yield fmt, path, rel, span


class RenderPages(CountingDoFn):
    """Wikipedia pages -> documents, once the pages are spread over workers; others pass."""

    def process(self, item):
        if not isinstance(item, WikiPage):
            yield item
            return
        tally = Tally()
        doc = page_document(item, tally, "wikipedia")
        if doc is not None:
            tally.inc("documents_read")
            yield doc
        self.count_all("wikipedia", tally.counts)


class ReadDocuments(beam.PTransform):
    """Documents of every input (Wikipedia pages rendered), and per-bundle counts."""

    def __init__(self, inputs: list[InputSpec], skip_bad_input: bool = False):
        super().__init__()
        self.inputs = sorted(inputs, key=lambda s: (s.format, s.pattern))
        self.skip_bad_input = skip_bad_input

    def expand(self, pbegin):
        read = (
            pbegin
            | "Inputs" >> beam.Create(self.inputs)
            | "ListFiles" >> beam.FlatMap(expand_pattern)
            | "PlanReads" >> beam.FlatMap(plan_reads)
            | "SpreadFiles" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(ReadFile(self.skip_bad_input)).with_outputs(COUNTS, main="main")
        )
        rendered = (
            read.main
            | "SpreadDocuments" >> beam.Reshuffle()
            | "RenderPages" >> beam.ParDo(RenderPages()).with_outputs(COUNTS, main="main")
        )
        counts = (read[COUNTS], rendered[COUNTS]) | "ReadCounts" >> beam.Flatten()
        return rendered.main, counts
