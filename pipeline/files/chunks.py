"""The build's intermediate files: what passes between stages on disk, not in the runner.

Beam's local runner holds every PCollection that crosses a grouping or side-input barrier in
memory, so the build's data never crosses one. Each stage reads chunk files, writes chunk files
(Arrow IPC, through Beam filesystems, under the build's temporary area), and passes on only a
small `Chunk` record: its path, sizes and counts. Three kinds follow each other:

- documents: what a reader made of one input file or span (Wikipedia pages still unrendered);
- sentences: documents split into sentences;
- units: every dupe pass of every tokenized document, sorted by its bucket hash, in one record
  batch per slice of the hash space, with an index beside the file (`pipeline.files.units`).

A chunk that exists is complete: it is written under a temporary name and renamed, or on gs://
uploaded whole. A units file `u.arrow` has beside it `u.arrow.index`: the byte offset and the
CRC-32C of every slice's batch; a bucket reads its few entries, then its batches (on a remote
filesystem in two ranged requests), and checks each batch against its CRC.

Every chunk file carries checksums written with it and checked whenever it is read back: the
CRC-32C (Castagnoli's polynomial, computed by `google-crc32c`'s C extension with the processor's
own instruction, faster than zlib's CRC-32: docs/benchmarks.md) of each record batch (a document
or sentence file's, few, in its schema's metadata; a units file's in its index), and one over
its record (`chunk`) and that list, so neither the counts a resumed build takes nor any byte of
its rows can change unseen. Arrow's footer is never read: the batches are found from the schema
message's end and their recorded sizes. A resumed build checks every file it takes whole
(`finished`; a remote units file, which is never read whole, by its record alone), and makes a
damaged one again; a damage found later, while a file is read, removes the file and stops the
build naming it (`DamagedChunkError`): `--resume` then makes it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import pyarrow as pa
from google_crc32c import value as crc32c

from pipeline.files.fsio import atomic_create, is_local, read_bytes, remove
from pipeline.sources.documents import Document
from pipeline.sources.wikipedia.pages import WikiPage

INDEX_SUFFIX = ".index"
INDEX_ENTRY = np.dtype([("at", "<u8"), ("crc", "<u8")])  # a batch's offset, and its CRC-32C
# The metadata key of a chunk file's check over its record: a file written with another
# checksum (CRC-32, before) has none, so a resumed build makes it again.
CHECK_KEY = b"crc32c"


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
    items: int = 0  # documents (or pages), or units (document passes)
    parts: int = 0  # paragraphs, or sentences
    tokens: int = 0  # units: tokens of the document passes
    counts: dict = field(default_factory=dict)  # "source/name" -> n, this step's own
    slices: int = 0  # units: batch s holds the units with h >> (64 - slices) == s
    id_type: str = ""  # units: the Arrow type of the token ids (to decode a batch alone)
    sizes: dict = field(default_factory=dict)  # sentences: characters per input group

    @classmethod
    def from_record(cls, path: str, record: dict) -> Chunk:
        known = {f.name for f in fields(cls)} - {"path"}
        return cls(path, **{k: v for k, v in record.items() if k in known})


def write_table(path: str, table: pa.Table, chunk=None, batches=None, indexed=False) -> None:
    """Write whole or not at all; `chunk` (its record, counts included) goes into the file's
    metadata, so a resumed build can take the file as it is. `batches`, when given, are the
    file's record batches (of `table`'s schema); their sizes and CRC-32Cs go into the metadata
    too, unless `indexed` (a units file, whose index holds them)."""
    if batches is None:
        batches = table.to_batches() or [pa.RecordBatch.from_pylist([], table.schema)]
    metadata = {}
    if chunk is not None:
        record = {k: v for k, v in asdict(chunk).items() if k != "path"}
        metadata[b"chunk"] = json.dumps(record).encode()
    if not indexed:
        metadata[b"batches"] = json.dumps(batch_sums(batches)).encode()
    metadata[CHECK_KEY] = str(metadata_check(metadata)).encode()
    schema = table.schema.with_metadata(metadata)
    with atomic_create(path) as f, pa.ipc.new_file(f, schema) as writer:
        for batch in batches:
            writer.write(batch)


def batch_sums(batches) -> list[list[int]]:
    """(size, CRC-32C) of each record batch's message as the file holds it."""
    out = []
    for batch in batches:
        message = batch.serialize()
        out.append([message.size, crc32c(message)])
    return out


def metadata_check(metadata: dict) -> int:
    """The CRC-32C of a chunk file's record and batch list: its counts and layout are checked
    like its rows."""
    return crc32c(metadata.get(b"chunk", b"") + b"\0" + metadata.get(b"batches", b""))


def checked_metadata(path: str, schema: pa.Schema) -> dict:
    metadata = schema.metadata or {}
    if CHECK_KEY not in metadata:
        raise damaged(path, "no checksum: not written by this version")
    if metadata[CHECK_KEY] != str(metadata_check(metadata)).encode():
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
    (size, CRC-32C); the first that does not match raises `DamagedChunkError`."""
    out, at = [], 0
    for i, (size, crc) in enumerate(sums):
        part = data.slice(at, size) if at + size <= data.size else None
        if part is None or crc32c(part) != crc:
            raise damaged(path, f"record batch {i} at byte {start + at} does not match its CRC-32C")
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
        ("variants", pa.bool_()),  # a page's wiki converts between script variants
        ("wiki", pa.string()),  # a page's wiki (its dump's <dbname>), "" when not named
        ("input", pa.int32()),  # the index of the document's input (`Document.input_index`)
    ]
)


def write_documents(
    path: str, items: Sequence[Document | WikiPage], inputs: Sequence[int] | None = None
) -> Chunk:
    """Documents and unrendered pages, in reading order; `inputs`: the index of each one's
    input (else its own `input_index`)."""
    rows = {name: [] for name in DOCUMENT_SCHEMA.names}
    rows["input"] = list(inputs) if inputs is not None else [i.input_index for i in items]
    for item in items:
        page = isinstance(item, WikiPage)
        rows["id"].append(item.page_id if page else item.id)
        rows["source"].append("wikipedia" if page else item.source)
        rows["paragraphs"].append([item.wikitext] if page else list(item.paragraphs))
        rows["presplit"].append(False if page else item.presplit)
        rows["page"].append(page)
        rows["prefixes"].append(sorted(item.non_prose_prefixes) if page else [])
        rows["variants"].append(page and item.variants)
        rows["wiki"].append(item.wiki if page else "")
    write_table(path, pa.table(rows, schema=DOCUMENT_SCHEMA))
    parts = sum(len(p) for p in rows["paragraphs"])
    return Chunk(path, items=len(items), parts=parts)


def read_documents(path: str) -> Iterator[Document | WikiPage]:
    table = read_table(path).to_pydict()
    # a chunk of an older build has neither column
    variants = table.get("variants") or [False] * len(table["id"])
    wikis = table.get("wiki") or [""] * len(table["id"])
    inputs = table.get("input") or [0] * len(table["id"])
    for i, doc_id in enumerate(table["id"]):
        paragraphs = table["paragraphs"][i]
        if table["page"][i]:
            prefixes = frozenset(table["prefixes"][i])
            yield WikiPage(doc_id, "", paragraphs[0], prefixes, variants[i], wikis[i], inputs[i])
        else:
            source, presplit = table["source"][i], table["presplit"][i]
            yield Document(doc_id, source, tuple(paragraphs), presplit, inputs[i])


SENTENCE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("sentences", pa.list_(pa.large_string())),
        ("group", pa.string()),  # the document's input group (`pipeline.core.smoothing`)
    ]
)


def write_sentences(
    path: str,
    docs: Sequence[tuple[str, str, tuple[str, ...]]],
    counts: dict | None = None,
    groups: Sequence[str] | None = None,
) -> Chunk:
    """(id, source, sentences) per document, and its input group (`groups`, else ""); `counts`
    are the step's own, kept with the file; the record sums each group's characters."""
    groups = list(groups) if groups is not None else [""] * len(docs)
    table = pa.table(
        {
            "id": [d[0] for d in docs],
            "source": [d[1] for d in docs],
            "sentences": [list(d[2]) for d in docs],
            "group": groups,
        },
        schema=SENTENCE_SCHEMA,
    )
    sizes: dict[str, int] = {}
    for doc, group in zip(docs, groups, strict=True):
        sizes[group] = sizes.get(group, 0) + sum(map(len, doc[2]))
    parts = sum(len(d[2]) for d in docs)
    chunk = Chunk(path, items=len(docs), parts=parts, counts=counts or {}, sizes=sizes)
    write_table(path, table, chunk=chunk)
    return chunk


def read_sentences(path: str) -> list[tuple[str, str, list[str]]]:
    return read_sentence_groups(path)[0]


def read_sentence_groups(path: str) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
    """The (id, source, sentences) of a sentence chunk, and each document's input group."""
    t = read_table(path).to_pydict()
    docs = list(zip(t["id"], t["source"], t["sentences"], strict=True))
    return docs, t.get("group") or [""] * len(docs)
