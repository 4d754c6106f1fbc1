"""The build's intermediate files: what passes between stages on disk, not in the runner.

Beam's local runner holds every PCollection that crosses a grouping or side-input barrier in
memory, so the build's data never crosses one. Each stage reads chunk files, writes chunk files
(Arrow IPC, through Beam filesystems, under the build's temporary area), and passes on only a
small `Chunk` record: its path, sizes and counts. Three kinds follow each other:

- documents: what a reader made of one input file or span (Wikipedia pages still unrendered);
- sentences: documents split into sentences;
- units: every dupe pass of every tokenized document, sorted by its bucket hash `h`, in one
  record batch per slice of the hash space (the `slices` top bits of `h`), so a bucket (a range
  of `h`) reads only the slices it overlaps.

A chunk that exists is complete: it is written under a temporary name and renamed, or on gs://
uploaded whole. On a remote filesystem a bucket reads exactly the bytes of its slices of each
units file: a units file `u.arrow` has beside it `u.arrow.index`, the byte offset of every
slice's batch, and a bucket reads its few entries, then its batches, in two ranged requests.
The slices are small there (about 16 KiB) and large locally, where the file is mapped and a
bucket touches only the rows it takes: how many buckets a build has is not known when units are
written, so only slices small beside any bucket keep a bucket's reads near what it needs.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import pyarrow as pa

from pipeline.fsio import atomic_create, is_local, read_bytes, write_bytes
from pipeline.instances import TokenizedDoc
from pipeline.sources.documents import Document
from pipeline.sources.wikipedia.pages import WikiPage

# Target bytes of one slice of a units file: remote, what a bucket may read beyond its range at
# each end; local, few batches (a mapped file costs nothing beyond the rows read).
REMOTE_SLICE_BYTES, LOCAL_SLICE_BYTES = 16 << 10, 256 << 10
MAX_SLICE_BITS = 16
INDEX_SUFFIX = ".index"


@dataclass(frozen=True)
class Chunk:
    """A small record for one chunk file: what the stages after it and the manifest need."""

    path: str  # "" when the step made nothing (the counts still travel)
    items: int = 0  # documents (or pages), or units
    parts: int = 0  # paragraphs, or sentences
    tokens: int = 0  # units: tokens of the documents (one pass)
    counts: dict = field(default_factory=dict)  # "source/name" -> n, this step's own
    slices: int = 0  # units: batch s holds the units with h >> (64 - slices) == s
    id_type: str = ""  # units: the Arrow type of the token ids (to decode a batch alone)

    @classmethod
    def from_record(cls, path: str, record: dict) -> Chunk:
        known = {f.name for f in fields(cls)} - {"path"}
        return cls(path, **{k: v for k, v in record.items() if k in known})


def write_table(path: str, table: pa.Table, chunk=None, batches=None) -> None:
    """Write whole or not at all; `chunk` (its record, counts included) goes into the file's
    metadata, so a resumed build can take the file as it is. `batches`, when given, are the
    file's record batches (of `table`'s schema)."""
    if chunk is not None:
        record = {k: v for k, v in asdict(chunk).items() if k != "path"}
        table = table.replace_schema_metadata({b"chunk": json.dumps(record).encode()})
    with atomic_create(path) as f, pa.ipc.new_file(f, table.schema) as writer:
        for batch in batches if batches is not None else [table]:
            writer.write(batch)


ARROW_MAGIC = 8  # "ARROW1" and its padding, before the schema message
HEAD_BYTES = 64 << 10  # what a remote `finished` reads first: the schema message, usually


def finished(path: str) -> Chunk | None:
    """The record of a chunk file written before (by an earlier attempt or build), or None.
    Remote: one read of the file's head, where the schema and its record are (a miss is one
    request)."""
    try:
        if is_local(path):
            if not os.path.exists(path):
                return None
            schema = open_table(path).schema
        else:
            schema = head_schema(path)
        record = json.loads((schema.metadata or {})[b"chunk"])
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, pa.ArrowInvalid):
        return None  # not one of ours, or damaged: made again
    if "ids" in schema.names and "slices" not in record:
        return None  # units in an older layout: made again
    return Chunk.from_record(path, record)


def head_schema(path: str) -> pa.Schema:
    """The schema (with its metadata) of an Arrow file, from its head: the magic, then the
    schema message (a continuation marker, its length, the message)."""
    head = read_bytes(path, 0, HEAD_BYTES)
    if len(head) < ARROW_MAGIC + 8 or not head.startswith(b"ARROW1"):
        raise ValueError(f"{path}: not an Arrow file")
    end = ARROW_MAGIC + 8 + int.from_bytes(head[ARROW_MAGIC + 4 : ARROW_MAGIC + 8], "little")
    if end > len(head):
        head = read_bytes(path, 0, end)
    return pa.ipc.read_schema(pa.py_buffer(head[ARROW_MAGIC:end]))


def open_table(path: str) -> pa.ipc.RecordBatchFileReader:
    """A finished chunk file: mapped locally (a bucket touches only the rows it reads), else
    read whole in one request (documents and sentences are read whole anyway)."""
    if is_local(path):
        return pa.ipc.open_file(pa.memory_map(path))
    return pa.ipc.open_file(pa.py_buffer(read_bytes(path)))


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
    """(h, pass, document) units, sorted here by (h, pass, id), one record batch per slice of
    the hash space (empty ones too: batch s is slice s); remote, with the slices' byte offsets
    beside the file. `documents`, `tokens` (one pass) and `counts` are kept with the file."""
    units = sorted(units, key=lambda u: (u[0], u[1], u[2].id))
    id_type = pa.from_numpy_dtype(units[0][2].ids.dtype) if units else pa.uint16()
    h = np.array([u[0] for u in units], dtype=np.uint64)
    table = pa.table(
        {
            "h": h,
            "pass": np.array([u[1] for u in units], dtype=np.uint32),
            "id": [u[2].id for u in units],
            "source": [u[2].source for u in units],
            "ids": large_lists([u[2].ids for u in units], id_type),
            "offsets": large_lists([u[2].offsets for u in units], pa.int64()),
        },
        schema=unit_schema(id_type),
    )
    target = LOCAL_SLICE_BYTES if is_local(path) else REMOTE_SLICE_BYTES
    bits = min(MAX_SLICE_BITS, max(0, math.ceil(math.log2(max(1, table.nbytes / target)))))
    chunk = Chunk(path, documents, 0, tokens, counts or {}, bits, str(id_type))
    whole = table.combine_chunks().to_batches()[0] if len(table) else None
    bounds = np.searchsorted(slice_of(h, bits), np.arange((1 << bits) + 1), side="left")
    batches = [
        whole.slice(a, b - a) if whole is not None else pa.RecordBatch.from_pylist([], table.schema)
        for a, b in itertools.pairwise(bounds.tolist())
    ]
    if not is_local(path):  # where each batch starts, after the magic and the schema message
        record = {k: v for k, v in asdict(chunk).items() if k != "path"}
        schema = table.schema.with_metadata({b"chunk": json.dumps(record).encode()})
        sizes = [ARROW_MAGIC + schema.serialize().size] + [b.serialize().size for b in batches]
        write_bytes(path + INDEX_SUFFIX, np.cumsum(sizes, dtype="<u8").tobytes())
    write_table(path, table, chunk, batches)
    return chunk


def slice_of(h: np.ndarray, bits: int) -> np.ndarray:
    """The slice of each bucket hash: its top `bits` bits."""
    return h >> np.uint64(64 - bits) if bits else np.zeros(len(h), dtype=np.uint64)


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
    """The (pass, document) units of a units chunk with lo <= h < hi; reads only their slices."""
    shift = 64 - chunk.slices
    first, last = lo >> shift, (hi - 1) >> shift
    out = []
    for batch in unit_batches(chunk, first, last + 1):
        if not batch.num_rows:
            continue
        h = batch.column(0).to_numpy()
        keep = h >= np.uint64(lo)
        if hi < 1 << 64:
            keep &= h < np.uint64(hi)
        out.extend(batch_units(batch, np.flatnonzero(keep)))
    return out


def read_bucket_units(chunks: Sequence[Chunk], lo: int, hi: int) -> list[tuple[int, TokenizedDoc]]:
    """`read_units` of every chunk, in order; remote files are read side by side, since a
    bucket asks every units file for a few slices and each asking is a round trip."""
    if all(is_local(c.path) for c in chunks):
        return [u for c in chunks for u in read_units(c, lo, hi)]
    with ThreadPoolExecutor(max_workers=REMOTE_READERS) as pool:
        parts = list(pool.map(lambda c: read_units(c, lo, hi), chunks))
    return [u for part in parts for u in part]


REMOTE_READERS = 16


def unit_batches(chunk: Chunk, first: int, stop: int) -> Iterator[pa.RecordBatch]:
    """Record batches [first, stop) of a units file: from its memory map locally; elsewhere
    its offsets from the index beside it, then exactly those bytes, each one ranged read."""
    if is_local(chunk.path):
        reader = open_table(chunk.path)
        yield from (reader.get_batch(b) for b in range(first, stop))
        return
    index = read_bytes(chunk.path + INDEX_SUFFIX, 8 * first, 8 * (stop + 1))
    start, end = np.frombuffer(index, dtype="<u8")[[0, -1]].tolist()
    if start == end:
        return
    messages = pa.ipc.MessageReader.open_stream(pa.py_buffer(read_bytes(chunk.path, start, end)))
    schema = unit_schema(pa.type_for_alias(chunk.id_type))
    for _ in range(first, stop):
        yield pa.ipc.read_record_batch(messages.read_next_message(), schema)


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
