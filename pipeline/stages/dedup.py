"""Exact de-duplication of documents and of paragraphs across the whole corpus (optional).

BooksCorpus holds the same book under several names and the same licence, preface or blurb
in thousands of books; Wikipedia dumps can be given twice. Both stages key by a content hash,
so no worker needs the corpus:
1. documents with the same paragraphs: the copy with the smallest document id is kept
   (a combiner keeps one document per key before the shuffle);
2. paragraphs of at least `min_paragraph_chars` characters that occur more than once: the
   occurrence with the smallest (document id, position) is kept, the others are removed from
   their documents, and a document left with nothing is dropped.
The choice depends only on ids and contents, never on the order workers read in. Removed
copies are counted by source: `documents_dropped.duplicate`, `paragraphs_dropped.duplicate`,
`documents_dropped.duplicate_paragraphs`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, replace

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.files.chunks import Chunk, read_documents, write_documents
from pipeline.sources.documents import Document, Tally
from pipeline.sources.wikipedia.reader import rendered
from pipeline.stages.base import Stage, Step
from pipeline.stages.counting import count_key, merge_counts


@dataclass(frozen=True)
class DedupConfig:
    documents: bool = True  # drop documents whose paragraphs equal another's
    paragraphs: bool = True  # drop repeated paragraphs
    min_paragraph_chars: int = 64  # shorter ones ("Yes.", "Chapter 1") repeat by nature

    def __post_init__(self):
        if self.min_paragraph_chars < 1:
            raise ValueError(f"min_paragraph_chars must be >= 1 (got {self.min_paragraph_chars})")


def content_key(*parts: str) -> bytes:
    """A 128-bit hash of the parts (stable across processes and machines)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.digest()


def document_key(doc: Document) -> bytes:
    return content_key(str(doc.presplit), *doc.paragraphs)


def paragraph_refs(doc: Document, min_chars: int):
    """(paragraph hash, (document id, position)) for each paragraph long enough to de-duplicate."""
    for i, paragraph in enumerate(doc.paragraphs):
        if len(paragraph) >= min_chars:
            yield content_key(paragraph), (doc.id, i)


def later_copies(refs) -> list[tuple[str, int]]:
    """All occurrences of one paragraph but the first by (document id, position)."""
    return sorted(refs)[1:]


def remove_paragraphs(doc: Document, positions: set[int]) -> Document | None:
    kept = tuple(p for i, p in enumerate(doc.paragraphs) if i not in positions)
    return replace(doc, paragraphs=kept) if kept else None


class KeepSmallestId(beam.CombineFn):
    """Per content hash: the document with the smallest id, and the copies dropped by source."""

    def create_accumulator(self):
        return None, {}

    def add_input(self, acc, doc: Document):
        return self.merge_accumulators([acc, (doc, {})])

    def merge_accumulators(self, accumulators):
        best, dropped = None, {}
        for doc, counts in accumulators:
            for source, n in counts.items():
                dropped[source] = dropped.get(source, 0) + n
            if doc is None:
                continue
            if best is None or (doc.id, doc.source) < (best.id, best.source):
                best, doc = doc, best
            if doc is not None:
                dropped[doc.source] = dropped.get(doc.source, 0) + 1
        return best, dropped

    def extract_output(self, acc):
        return acc


def kept_copy(element) -> tuple[Document, dict]:
    """(hash, (kept document, copies dropped by source)) -> the document and its counts."""
    _, (doc, dropped) = element
    return doc, {count_key(s, "documents_dropped.duplicate"): n for s, n in dropped.items()}


def rebuilt(grouped: dict):
    """Documents of one id (with their counts), and the positions of its paragraphs that are
    later copies -> (document without them, or None when nothing is left; counts)."""
    positions = set(grouped["copies"])
    for doc, counts in grouped["docs"]:
        counts = Counter(counts)
        removed = sum(1 for i in positions if i < len(doc.paragraphs))
        if removed:
            counts[count_key(doc.source, "paragraphs_dropped.duplicate")] += removed
        kept = remove_paragraphs(doc, positions)
        if kept is None:
            counts[count_key(doc.source, "documents_dropped.duplicate_paragraphs")] += 1
        yield kept, dict(counts)


class EmitKept(Step):
    def process(self, element):
        yield kept_copy(element)


class RebuildDocument(Step):
    def process(self, element):
        yield from rebuilt(element[1])


def uncounted(doc: Document) -> tuple[Document, dict]:
    return doc, {}


def keyed_by_content(doc: Document) -> tuple[bytes, Document]:
    return document_key(doc), doc


@dataclass(eq=False)
class Deduplicate(Stage):
    """Documents -> (document, counts): each document kept, with the counts of the copies
    dropped for it; a document left with no paragraph comes as None, its counts still travel."""

    cfg: DedupConfig

    def expand(self, docs):
        if self.cfg.documents:
            kept = (
                docs
                | "KeyByContent" >> beam.Map(keyed_by_content)
                | "SmallestId" >> beam.CombinePerKey(KeepSmallestId())
                | "EmitKept" >> beam.ParDo(EmitKept())
            )
        else:
            kept = docs | "Uncounted" >> beam.Map(uncounted)
        if self.cfg.paragraphs:
            kept = kept | "Paragraphs" >> DropRepeatedParagraphs(self.cfg.min_paragraph_chars)
        return kept


@dataclass(eq=False)
class DropRepeatedParagraphs(Stage):
    """(document, counts) -> the same with every later copy of a paragraph of at least
    `min_chars` characters removed, and counted."""

    min_chars: int

    def expand(self, kept):
        copies = (
            kept
            | "Refs" >> beam.FlatMap(lambda dc, n: paragraph_refs(dc[0], n), self.min_chars)
            | "GroupRefs" >> beam.GroupByKey()
            | "LaterCopies" >> beam.FlatMap(lambda kv: later_copies(kv[1]))
        )
        by_id = kept | "KeyById" >> beam.Map(lambda dc: (dc[0].id, dc))
        return (
            {"docs": by_id, "copies": copies}
            | "Join" >> beam.CoGroupByKey()
            | "Rebuild" >> beam.ParDo(RebuildDocument())
        )


def rendered_chunk(chunk: Chunk, tmp: str) -> Chunk:
    """A document chunk -> the same documents with their Wikipedia pages rendered, in a chunk of
    their own (without a file when none is left), with the counts of the rendering."""
    tally = Tally()
    docs = list(rendered(read_documents(chunk.path), tally))
    name = "rendered-" + chunk.path.rsplit("/", 1)[-1]
    written = write_documents(FileSystems.join(tmp, "documents", name), docs) if docs else Chunk("")
    return replace(written, counts={count_key("wikipedia", k): n for k, n in tally.counts.items()})


class RenderChunk(Step):
    def __init__(self, tmp: str):
        self.tmp = tmp

    def process(self, chunk: Chunk):
        if chunk.path:
            yield rendered_chunk(chunk, self.tmp)


def write_batch(batch: list[tuple[Document | None, dict]], tmp: str) -> Chunk:
    """(document, counts) pairs -> a document chunk with their counts (without a file when
    every document of the batch was dropped)."""
    docs = [doc for doc, _ in batch if doc is not None]
    counts = merge_counts(c for _, c in batch)
    if not docs:
        return Chunk("", counts=counts)
    name = f"dedup-{content_key(docs[0].id).hex()}.arrow"
    return replace(write_documents(FileSystems.join(tmp, "documents", name), docs), counts=counts)


def chunk_documents(chunk: Chunk):
    return read_documents(chunk.path) if chunk.path else []


def counts_only(chunk: Chunk) -> Chunk:
    return Chunk("", counts=chunk.counts)


@dataclass(eq=False)
class DeduplicateChunks(Stage):
    """Document chunks -> de-duplicated document chunks, each with the counts of what was
    dropped for its documents, and records without a file that carry the rendering's counts.

    Unlike every other stage, de-duplication groups the documents themselves by content, so on
    the local runner it holds the corpus in memory: it is for corpora that fit (Dataflow's
    shuffle has no such bound)."""

    cfg: DedupConfig
    tmp: str

    def expand(self, chunks):
        ready = chunks | "Render" >> beam.ParDo(RenderChunk(self.tmp))
        written = (
            ready
            | "Documents" >> beam.FlatMap(chunk_documents)
            | "Deduplicate" >> Deduplicate(self.cfg)
            | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
            | "Write" >> beam.Map(write_batch, self.tmp)
        )
        render_counts = ready | "RenderCounts" >> beam.Map(counts_only)
        return (written, render_counts) | "WithRenderCounts" >> beam.Flatten()
