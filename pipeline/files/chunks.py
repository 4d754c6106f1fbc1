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
uploaded whole. A units file `u.arrow` has beside it `u.arrow.index`: the byte offset and the
CRC-32 of every slice's batch; a bucket reads its few entries, then its batches (on a remote
filesystem in two ranged requests), and checks each batch against its CRC.

Every chunk file carries checksums written with it and checked whenever it is read back: the
CRC-32 of each record batch (a document or sentence file's, few, in its schema's metadata; a
units file's in its index), and one over its record (`chunk`) and that list, so neither the
counts a resumed build takes nor any byte of its rows can change unseen. Arrow's footer is never
read: the batches are found from the schema message's end and their recorded sizes. A resumed
build checks every file it takes whole (`finished`; a remote units file, which is never read
whole, by its record alone), and makes a damaged one again; a damage found later, while a file is
read, removes the file and stops the build naming it (`DamagedChunkError`): `--resume` then
makes it again.
The slices are small there (about 16 KiB) and large locally, where the file is mapped and a
bucket touches only the rows it takes: how many buckets a build has is not known when units are
written, so only slices small beside any bucket keep a bucket's reads near what it needs.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import pyarrow as pa

from pipeline.core.instances import TokenizedDoc
from pipeline.files.fsio import atomic_create, is_local, read_bytes, remove, write_bytes
from pipeline.sources.documents import Document
from pipeline.sources.wikipedia.pages import WikiPage

# Target bytes of one slice of a units file: remote, what a bucket may read beyond its range at
# each end; local, few batches (a mapped file costs nothing beyond the rows read).
REMOTE_SLICE_BYTES, LOCAL_SLICE_BYTES = 16 << 10, 256 << 10
MAX_SLICE_BITS = 16
INDEX_SUFFIX = ".index"
INDEX_ENTRY = np.dtype([("at", "<u8"), ("crc", "<u8")])  # a batch's offset, and its CRC-32


class DamagedChunkError(ValueError):
    """An intermediate file whose bytes do not match the checksums written with it."""

    def __init__(self, path: str, what: str):
        super().__init__(
            f"{path}: this intermediate file of the build is damaged ({what}); it was removed: "
            "run the same command with --resume to make it again"
        )
        self.path = path


def damaged(path: str, what: str) -> DamagedChunkError:
    """The error for a damaged chunk file, once the file (and its index) are gone, so that a
    resumed build makes it again; a documents file also loses its read group's record."""
    gone = [path, path + INDEX_SUFFIX]
    folder, name = path.rsplit("/", 1) if "/" in path else ("", path)
    if folder.endswith("/documents") or folder == "documents":
        gone.append(folder[: -len("documents")] + "items/" + name.split("-")[0] + ".json")
    try:
        remove(gone)
    except OSError:
        pass  # still named in the error
    return DamagedChunkError(path, what)


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


def write_table(path: str, table: pa.Table, chunk=None, batches=None, indexed=False) -> None:
    """Write whole or not at all; `chunk` (its record, counts included) goes into the file's
    metadata, so a resumed build can take the file as it is. `batches`, when given, are the
    file's record batches (of `table`'s schema); their sizes and CRC-32s go into the metadata
    too, unless `indexed` (a units file, whose index holds them)."""
    if batches is None:
        batches = table.to_batches() or [pa.RecordBatch.from_pylist([], table.schema)]
    metadata = {}
    if chunk is not None:
        record = {k: v for k, v in asdict(chunk).items() if k != "path"}
        metadata[b"chunk"] = json.dumps(record).encode()
    if not indexed:
        metadata[b"batches"] = json.dumps(batch_sums(batches)).encode()
    metadata[b"check"] = str(metadata_check(metadata)).encode()
    schema = table.schema.with_metadata(metadata)
    with atomic_create(path) as f, pa.ipc.new_file(f, schema) as writer:
        for batch in batches:
            writer.write(batch)


def batch_sums(batches) -> list[list[int]]:
    """(size, CRC-32) of each record batch's message as the file holds it."""
    out = []
    for batch in batches:
        message = batch.serialize()
        out.append([message.size, zlib.crc32(message)])
    return out


def metadata_check(metadata: dict) -> int:
    """The CRC-32 of a chunk file's record and batch list: its counts and layout are checked
    like its rows."""
    return zlib.crc32(metadata.get(b"chunk", b"") + b"\0" + metadata.get(b"batches", b""))


def checked_metadata(path: str, schema: pa.Schema) -> dict:
    metadata = schema.metadata or {}
    if b"check" not in metadata:
        raise damaged(path, "no checksum: not written by this version")
    if metadata[b"check"] != str(metadata_check(metadata)).encode():
        raise damaged(path, "its record does not match its checksum")
    return metadata


def schema_end(head) -> int:
    """Where the first record batch of an Arrow file starts: after the magic and the schema
    message (a continuation marker, its length, the message)."""
    return (
        ARROW_MAGIC + 8 + int.from_bytes(bytes(head[ARROW_MAGIC + 4 : ARROW_MAGIC + 8]), "little")
    )


def checked_batches(path: str, data, start: int, sums, schema: pa.Schema) -> list[pa.RecordBatch]:
    """The record batches of `data` (bytes from `start` of the file), each checked against its
    (size, CRC-32); the first that does not match raises `DamagedChunkError`."""
    out, at = [], 0
    for i, (size, crc) in enumerate(sums):
        part = data.slice(at, size) if at + size <= data.size else None
        if part is None or zlib.crc32(part) != crc:
            raise damaged(path, f"record batch {i} at byte {start + at} does not match its CRC-32")
        try:
            out.append(pa.ipc.read_record_batch(pa.ipc.read_message(part), schema))
        except (pa.ArrowInvalid, OSError, ValueError) as e:  # a checksum collision, or our bug
            raise damaged(path, f"record batch {i} cannot be read: {e}") from None
        at += size
    return out


def whole_file(path: str):
    """A chunk file's bytes: mapped locally, else one request."""
    if is_local(path):
        return pa.memory_map(path).read_buffer()
    return pa.py_buffer(read_bytes(path))


def read_checked(path: str) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """A document or sentence file read whole, every batch checked, and its schema."""
    data = whole_file(path)
    schema, end = parse_head(path, data)
    metadata = checked_metadata(path, schema)
    if b"batches" not in metadata:
        raise damaged(path, "no list of its batches: not a document or sentence file")
    sums = json.loads(metadata[b"batches"])
    return schema, checked_batches(path, data.slice(end), end, sums, schema)


def parse_head(path: str, data) -> tuple[pa.Schema, int]:
    """The schema message at the head of an Arrow file's bytes, and where it ends."""
    if len(data) < ARROW_MAGIC + 8 or bytes(data[:6]) != b"ARROW1":
        raise damaged(path, "not an Arrow file")
    end = schema_end(data)
    try:
        return pa.ipc.read_schema(pa.py_buffer(bytes(data[ARROW_MAGIC:end]))), end
    except (pa.ArrowInvalid, OSError, ValueError):
        raise damaged(path, "its schema cannot be read") from None


ARROW_MAGIC = 8  # "ARROW1" and its padding, before the schema message
HEAD_BYTES = 64 << 10  # what a remote `finished` reads first: the schema message, usually


def finished(path: str) -> Chunk | None:
    """The record of a chunk file written before (by an earlier attempt or build), when all its
    checksums hold; else None (it is made again). The whole file is checked, except a remote
    units file: one read of its head, where the schema and its record are (its batches are
    checked as buckets read them). A miss is one request."""
    try:
        if is_local(path):
            if not os.path.exists(path):
                return None
            schema = check_whole(path, whole_file(path))
        else:
            schema = head_schema(path)
            if b"batches" in checked_metadata(path, schema):  # not units: read whole anyway
                schema = check_whole(path, whole_file(path))
        record = json.loads(checked_metadata(path, schema)[b"chunk"])
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, pa.ArrowInvalid):
        return None  # not one of ours, or damaged: made again
    if "ids" in schema.names and "slices" not in record:
        return None  # units in an older layout: made again
    return Chunk.from_record(path, record)


def intact(path: str) -> bool:
    """Whether a local document or sentence file's checksums all hold (a damaged one is
    removed); a remote one is taken as it is, its checksums checked when it is read."""
    if not is_local(path):
        return True
    try:
        check_whole(path, whole_file(path))
    except (OSError, ValueError, pa.ArrowInvalid):
        return False
    return True


def check_whole(path: str, data: pa.Buffer) -> pa.Schema:
    """A chunk file's bytes, every batch checked (a units file's against its index); its
    schema."""
    schema, end = parse_head(path, data)
    metadata = checked_metadata(path, schema)
    if b"batches" in metadata:
        sums = json.loads(metadata[b"batches"])
    else:  # units
        index = np.frombuffer(read_bytes(path + INDEX_SUFFIX), dtype=INDEX_ENTRY)
        if not len(index) or int(index["at"][0]) != end:
            raise damaged(path, "its index does not match it")
        sums = np.stack([np.diff(index["at"]), index["crc"][:-1]], axis=1).tolist()
    checked_batches(path, data.slice(end), end, sums, schema)
    return schema


def head_schema(path: str) -> pa.Schema:
    """The schema (with its metadata) of an Arrow file, from its head: the magic, then the
    schema message (a continuation marker, its length, the message)."""
    head = read_bytes(path, 0, HEAD_BYTES)
    if len(head) < ARROW_MAGIC + 8 or not head.startswith(b"ARROW1"):
        raise ValueError(f"{path}: not an Arrow file")
    end = schema_end(head)
    if end > len(head):
        head = read_bytes(path, 0, end)
    return pa.ipc.read_schema(pa.py_buffer(head[ARROW_MAGIC:end]))


def read_table(path: str) -> pa.Table:
    """A finished document or sentence file, read whole and checked."""
    schema, batches = read_checked(path)
    return pa.Table.from_batches(batches, schema)


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
    table = read_table(path).to_pydict()
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
    t = read_table(path).to_pydict()
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
    # where each batch starts, after the magic and the schema message, and its CRC-32
    sums = np.array(batch_sums(batches), dtype=np.uint64).reshape(-1, 2)
    record = {k: v for k, v in asdict(chunk).items() if k != "path"}
    metadata = {b"chunk": json.dumps(record).encode()}
    metadata[b"check"] = str(metadata_check(metadata)).encode()
    head = ARROW_MAGIC + table.schema.with_metadata(metadata).serialize().size
    index = np.zeros(len(batches) + 1, dtype=INDEX_ENTRY)
    index["at"] = np.cumsum(np.concatenate([[head], sums[:, 0]]), dtype=np.uint64)
    index["crc"][:-1] = sums[:, 1]
    write_bytes(path + INDEX_SUFFIX, index.tobytes())
    write_table(path, table, chunk, batches, indexed=True)
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


def unit_batches(chunk: Chunk, first: int, stop: int) -> list[pa.RecordBatch]:
    """Record batches [first, stop) of a units file, each checked against its CRC-32: their
    offsets and sums from the index beside it, then exactly their bytes (from its memory map
    locally; elsewhere each one ranged read)."""
    path = chunk.path
    size = INDEX_ENTRY.itemsize
    index = read_bytes(path + INDEX_SUFFIX, size * first, size * (stop + 1))
    if len(index) != size * (stop + 1 - first):
        raise damaged(path, "its index is too short")
    entries = np.frombuffer(index, dtype=INDEX_ENTRY)
    start, end = int(entries["at"][0]), int(entries["at"][-1])
    if start == end:
        return []
    if is_local(path):
        data = pa.memory_map(path).read_buffer()
        if end > data.size:
            raise damaged(path, "shorter than its index says")
        data = data.slice(start, end - start)
    else:
        data = pa.py_buffer(read_bytes(path, start, end))
    sums = np.stack([np.diff(entries["at"]), entries["crc"][:-1]], axis=1).tolist()
    if chunk.id_type:
        schema = unit_schema(pa.type_for_alias(chunk.id_type))
    else:  # a record made without it: the file's own (one more read)
        schema = head_schema(path)
    return checked_batches(path, data, start, sums, schema)


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
