"""The build's intermediate files: what passes between stages on disk, not in the runner.

Beam's local runner holds every PCollection that crosses a grouping or side-input barrier in
memory, so the build's data never crosses one. Each stage reads chunk files, writes chunk files
(Arrow IPC, through Beam filesystems, under the build's temporary area), and passes on only a
small `Chunk` record: its path, sizes and counts. Three kinds follow each other:

- documents: what a reader made of one input file or span (Wikipedia pages still unrendered);
- sentences: documents split into sentences;
- units: every dupe pass of every tokenized document, sorted by its bucket hash `h`, in record
  batches whose first `h` the `Chunk` keeps, so a bucket (a range of `h`) reads only its batches.

A chunk is written under a temporary name and renamed, so a chunk that exists is complete.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.fsio import atomic_create
from pipeline.instances import TokenizedDoc
from pipeline.sources.documents import Document
from pipeline.sources.wikipedia.pages import WikiPage

UNIT_BATCH_ROWS = 256  # a bucket reads whole record batches: small ones waste little


@dataclass(frozen=True)
class Chunk:
    """A small record for one chunk file: what the stages after it and the manifest need."""

    path: str  # "" when the step made nothing (the counts still travel)
    items: int = 0  # documents (or pages), or units
    parts: int = 0  # paragraphs, or sentences
    tokens: int = 0  # units: tokens of the documents (one pass)
    counts: dict = field(default_factory=dict)  # "source/name" -> n, this step's own
    starts: tuple[int, ...] = ()  # units: the first h of each record batch


def write_table(path: str, table: pa.Table, max_rows: int | None = None, chunk=None) -> None:
    """Write under a temporary name, then rename; `chunk` (its record, counts included) goes
    into the file's metadata, so a resumed build can take the file as it is."""
    if chunk is not None:
        record = {k: v for k, v in asdict(chunk).items() if k != "path"}
        table = table.replace_schema_metadata({b"chunk": json.dumps(record).encode()})
    with atomic_create(path) as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table, max_chunksize=max_rows)


def finished(path: str) -> Chunk | None:
    """The record of a chunk file written before (by an earlier attempt or build), or None."""
    if not FileSystems.exists(path):
        return None
    try:
        metadata = open_table(path).schema.metadata or {}
        record = json.loads(metadata[b"chunk"])
    except (OSError, KeyError, ValueError, pa.ArrowInvalid):
        return None  # not one of ours, or damaged: made again
    return Chunk(path, **{**record, "starts": tuple(record.get("starts", ()))})


def open_table(path: str) -> pa.ipc.RecordBatchFileReader:
    if "://" not in path:  # local: mapped, so a bucket touches only the rows it reads
        return pa.ipc.open_file(pa.memory_map(path))
    return open_stream(path)


def open_stream(path: str) -> pa.ipc.RecordBatchFileReader:
    """Through a seekable Beam file: the footer, then only the batches asked for are read (a
    bucket reads a few batches of each units file, never the whole file)."""
    f = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    return pa.ipc.open_file(pa.PythonFile(f, mode="r"))


DOCUMENT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("paragraphs", pa.list_(pa.large_string())),
        ("presplit", pa.bool_()),
        ("page", pa.bool_()),  # an unrendered Wikipedia page: id is the page id, one paragraph
        ("prefixes", pa.list_(pa.string())),  # a page's non-prose link prefixes
    ]
)


def write_documents(path: str, items: Sequence[Document | WikiPage]) -> Chunk:
    """Documents and unrendered pages, in reading order."""
    rows = {name: [] for name in DOCUMENT_SCHEMA.names}
    for item in items:
        page = isinstance(item, WikiPage)
        rows["id"].append(item.page_id if page else item.id)
        rows["source"].append("wikipedia" if page else item.source)
        rows["paragraphs"].append([item.wikitext] if page else list(item.paragraphs))
        rows["presplit"].append(False if page else item.presplit)
        rows["page"].append(page)
        rows["prefixes"].append(sorted(item.non_prose_prefixes) if page else [])
    write_table(path, pa.table(rows, schema=DOCUMENT_SCHEMA))
    parts = sum(len(p) for p in rows["paragraphs"])
    return Chunk(path, items=len(items), parts=parts)


def read_documents(path: str) -> Iterator[Document | WikiPage]:
    table = open_table(path).read_all().to_pydict()
    for i, doc_id in enumerate(table["id"]):
        paragraphs = table["paragraphs"][i]
        if table["page"][i]:
            yield WikiPage(doc_id, "", paragraphs[0], frozenset(table["prefixes"][i]))
        else:
            yield Document(doc_id, table["source"][i], tuple(paragraphs), table["presplit"][i])


SENTENCE_SCHEMA = pa.schema(
    [("id", pa.string()), ("source", pa.string()), ("sentences", pa.list_(pa.large_string()))]
)


def write_sentences(
    path: str, docs: Sequence[tuple[str, str, tuple[str, ...]]], counts: dict | None = None
) -> Chunk:
    """(id, source, sentences) per document; `counts` are the step's own, kept with the file."""
    table = pa.table(
        {
            "id": [d[0] for d in docs],
            "source": [d[1] for d in docs],
            "sentences": [list(d[2]) for d in docs],
        },
        schema=SENTENCE_SCHEMA,
    )
    chunk = Chunk(path, items=len(docs), parts=sum(len(d[2]) for d in docs), counts=counts or {})
    write_table(path, table, chunk=chunk)
    return chunk


def read_sentences(path: str) -> list[tuple[str, str, list[str]]]:
    t = open_table(path).read_all().to_pydict()
    return list(zip(t["id"], t["source"], t["sentences"], strict=True))


def unit_schema(id_type: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            ("h", pa.uint64()),  # the bucket hash of (pass, document)
            ("pass", pa.uint32()),
            ("id", pa.string()),
            ("source", pa.string()),
            ("ids", pa.large_list(id_type)),
            ("offsets", pa.large_list(pa.int64())),  # sentence k: ids[offsets[k]:offsets[k+1]]
        ]
    )


def write_units(
    path: str, units: Sequence[tuple[int, int, TokenizedDoc]], documents=0, tokens=0, counts=None
) -> Chunk:
    """(h, pass, document) units, sorted here by (h, pass, id); `starts` indexes the batches.
    `documents`, `tokens` (one pass) and `counts` are kept with the file."""
    units = sorted(units, key=lambda u: (u[0], u[1], u[2].id))
    id_type = pa.from_numpy_dtype(units[0][2].ids.dtype) if units else pa.uint16()
    table = pa.table(
        {
            "h": np.array([u[0] for u in units], dtype=np.uint64),
            "pass": np.array([u[1] for u in units], dtype=np.uint32),
            "id": [u[2].id for u in units],
            "source": [u[2].source for u in units],
            "ids": large_lists([u[2].ids for u in units], id_type),
            "offsets": large_lists([u[2].offsets for u in units], pa.int64()),
        },
        schema=unit_schema(id_type),
    )
    starts = tuple(int(u[0]) for u in units[::UNIT_BATCH_ROWS])
    chunk = Chunk(path, documents, 0, tokens, counts or {}, starts)
    write_table(path, table, UNIT_BATCH_ROWS, chunk)
    return chunk


def large_lists(arrays: Sequence[np.ndarray], value_type: pa.DataType) -> pa.LargeListArray:
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    return pa.LargeListArray.from_arrays(offsets, pa.array(values, type=value_type))


def hash_range(bucket: int, buckets: int) -> tuple[int, int]:
    """The h of bucket b: those with (h * buckets) >> 64 == b, i.e. lo <= h < hi."""
    lo = -((-bucket << 64) // buckets)
    hi = -((-(bucket + 1) << 64) // buckets)
    return lo, hi


def read_units(chunk: Chunk, lo: int, hi: int) -> list[tuple[int, TokenizedDoc]]:
    """The (pass, document) units of a units chunk with lo <= h < hi; reads only their batches."""
    first = max(0, bisect.bisect_right(chunk.starts, lo) - 1)
    stop = bisect.bisect_left(chunk.starts, hi)
    if first >= stop:
        return []
    reader = open_table(chunk.path)
    out = []
    for b in range(first, stop):
        batch = reader.get_batch(b)
        h = batch.column(0).to_numpy()
        keep = h >= np.uint64(lo)
        if hi < 1 << 64:
            keep &= h < np.uint64(hi)
        out.extend(batch_units(batch, np.flatnonzero(keep)))
    return out


def batch_units(batch: pa.RecordBatch, rows: np.ndarray) -> Iterator[tuple[int, TokenizedDoc]]:
    """The units of some rows of a units batch; their ids and offsets are views of the batch."""
    passes = batch.column(1).to_numpy()
    ids, sources = batch.column(2).to_pylist(), batch.column(3).to_pylist()
    tokens, token_at = batch.column(4).values.to_numpy(), batch.column(4).offsets.to_numpy()
    offsets, offset_at = batch.column(5).values.to_numpy(), batch.column(5).offsets.to_numpy()
    for r in rows.tolist():
        doc = TokenizedDoc(
            ids[r],
            tokens[token_at[r] : token_at[r + 1]],
            offsets[offset_at[r] : offset_at[r + 1]],
            sources[r],
        )
        yield int(passes[r]), doc
