"""Large Wikipedia inputs read by many workers at once, each a span of the file.

Wikipedia's `-multistream` dumps are concatenations of bz2 streams of 100 pages each, and their
`-multistream-index.txt.bz2` gives each stream's byte offset. Groups of whole streams are
independent: `plan_spans` cuts a dump into spans of about `target_bytes` that workers decompress
and parse in parallel. An uncompressed `.xml` export is split the same way at arbitrary offsets:
a span owns the pages whose `<page>` tag starts inside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.compressed import DecompressingReader, compression_of
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.spans import BoundedReader, Span, fixed_spans
from pipeline.sources.streams import CHUNK_BYTES, iter_lines
from pipeline.sources.wikipedia.pages import WikiPage, iter_span_pages, parse_siteinfo
from pipeline.sources.wikipedia.split import MAX_HEADER_BYTES

# compressed bytes per span of a multistream dump, several times that in XML (docs/benchmarks.md,
# "Figures moved from other pages and from code comments")
SPAN_BYTES = 64 << 20
# bytes per span of an uncompressed export: small enough that an export of a few hundred MB is
# read by every worker at once (larger spans left one worker reading while the others waited
# for rendering to start; docs/benchmarks.md, raw formats)
XML_SPAN_BYTES = 32 << 20
INDEX_SUFFIX = "-index.txt.bz2"
# a damaged index stops the run also under --skip-bad-input: it is read while reads are planned
INDEX_ADVICE = (
    "Fetch the index again, or move it away from the dump (the dump is then read whole, by "
    "one worker)"
)
MULTISTREAM_SUFFIX = "-multistream.xml.bz2"


def index_path(path: str) -> str | None:
    """The index that Wikimedia publishes beside a `-multistream` dump, or None."""
    if path.endswith(MULTISTREAM_SUFFIX):
        return path[: -len(".xml.bz2")] + INDEX_SUFFIX
    return None


def is_index(path: str) -> bool:
    """A multistream index: read by the planner, not an input of its own."""
    return path.endswith("-multistream" + INDEX_SUFFIX)


def stream_offsets(index: BinaryIO, name: str) -> list[int]:
    """Distinct stream offsets, ascending, from a decompressed multistream index.

    Lines are `offset:page_id:title`, 100 pages per stream; only one int per stream is kept,
    so enwiki's 24 M index lines become ~240 k offsets.
    """
    offsets: list[int] = []
    tally = Tally()
    for number, line in enumerate(iter_lines(index, tally), start=1):
        head = line.split(":", 1)[0]
        if not head.isdigit():
            if line.strip():
                raise BadInputError(f"{name}:{number}: not an index line: {line[:80]!r}")
            continue
        offset = int(head)
        if offsets and offset < offsets[-1]:
            raise BadInputError(f"{name}:{number}: offsets go backwards ({offset})")
        if not offsets or offset != offsets[-1]:
            offsets.append(offset)
    return offsets


def plan_spans(offsets: list[int], size: int, target_bytes: int = SPAN_BYTES) -> list[Span]:
    """Whole streams grouped into spans of about `target_bytes`, covering [offsets[0], size).

    The bytes before the first indexed stream hold the dump's header: every span records
    where it ends, so that a worker can read the namespace names from it.
    """
    if not offsets:
        return []
    bounds = [o for o in offsets if 0 <= o < size] + [size]
    spans, start = [], bounds[0]
    for cut in bounds[1:]:
        if cut - start >= target_bytes or cut == size:
            spans.append(Span(start, cut, header_end=bounds[0]))
            start = cut
    return spans


def plan_wikipedia(path: str, size: int, open_raw, exists) -> list[Span | None]:
    """How to read one Wikipedia input: spans, or [None] for one reader of the whole file.

    `open_raw(path)` opens a file without decompression and `exists(path)` tells whether one
    is there (Beam's `FileSystems`). A dump whose index is missing is read whole.
    """
    index = index_path(path)
    if index is not None and exists(index):
        with open_raw(index) as f:
            stream = DecompressingReader(f, "bz2", index, INDEX_ADVICE)
            offsets = stream_offsets(stream, index)
        if offsets:
            return list(plan_spans(offsets, size, SPAN_BYTES))
    if compression_of(path) is None and size > XML_SPAN_BYTES:
        with open_raw(path) as f:
            head = f.read(2)
        if head not in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 cannot be cut at any byte
            return list(fixed_spans(size, XML_SPAN_BYTES))
    return [None]


def read_span(raw: BinaryIO, rel: str, span: Span, tally: Tally) -> Iterator[WikiPage]:
    """The articles of one span of a Wikipedia input (`raw`: the file, not decompressed)."""
    label = f"{rel} [bytes {span.start}-{span.end}]"
    if span.header_end:  # a multistream dump: bz2 streams, the header in the first one
        first = BoundedReader(raw, 0, span.header_end)
        header = _read_header(DecompressingReader(first, "bz2", rel))
        stream = DecompressingReader(BoundedReader(raw, span.start, span.end), "bz2", label)
        yield from iter_span_pages(stream, label, tally, parse_siteinfo(header))
        return
    header = _read_header(BoundedReader(raw, 0, None))
    stream = BoundedReader(raw, span.start, None)
    yield from iter_span_pages(stream, label, tally, parse_siteinfo(header), span.end - span.start)


def _read_header(f) -> bytes:
    """The bytes before the first <page> (at most MAX_HEADER_BYTES)."""
    header = b""
    while len(header) < MAX_HEADER_BYTES:
        chunk = f.read(CHUNK_BYTES)
        header += chunk
        cut = header.find(b"<page>")
        if cut >= 0:
            return header[:cut]
        if not chunk:
            break
    return header[:MAX_HEADER_BYTES]
