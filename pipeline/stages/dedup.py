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
from dataclasses import dataclass, replace

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.files.chunks import Chunk, read_documents, write_documents
from pipeline.sources.documents import Document, Tally
from pipeline.sources.wikipedia.reader import rendered
from pipeline.stages.base import Step
from pipeline.stages.counting import COUNTS, SEP, CountingDoFn


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


class EmitKept(CountingDoFn):
    def process(self, element):
        _, (doc, dropped) = element
        for source, n in sorted(dropped.items()):
            self.count(source, "documents_dropped.duplicate", n)
        yield doc


class RebuildDocument(CountingDoFn):
    def process(self, element):
        _, grouped = element
        positions = set(grouped["copies"])
        for doc in grouped["docs"]:
            removed = sum(1 for i in positions if i < len(doc.paragraphs))
            self.count(doc.source, "paragraphs_dropped.duplicate", removed)
            kept = remove_paragraphs(doc, positions)
            if kept is None:
                self.count(doc.source, "documents_dropped.duplicate_paragraphs")
                continue
            yield kept


class Deduplicate(beam.PTransform):
    """Documents -> de-duplicated documents; returns (documents, per-bundle counts)."""

    def __init__(self, cfg: DedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        counts = []
        if self.cfg.documents:
            kept = (
                docs
                | "KeyByContent" >> beam.Map(lambda d: (document_key(d), d))
                | "SmallestId" >> beam.CombinePerKey(KeepSmallestId())
                | "EmitKept" >> beam.ParDo(EmitKept()).with_outputs(COUNTS, main="main")
            )
            docs = kept.main
            counts.append(kept[COUNTS])
        if self.cfg.paragraphs:
            docs, paragraph_counts = docs | "Paragraphs" >> _DropRepeatedParagraphs(self.cfg)
            counts.append(paragraph_counts)
        if not counts:
            counts.append(docs.pipeline | "NoCounts" >> beam.Create([]))
        return docs, counts | "FlattenCounts" >> beam.Flatten()


class _DropRepeatedParagraphs(beam.PTransform):
    def __init__(self, cfg: DedupConfig):
        super().__init__()
        self.cfg = cfg

    def expand(self, docs):
        copies = (
            docs
            | "Refs" >> beam.FlatMap(paragraph_refs, self.cfg.min_paragraph_chars)
            | "GroupRefs" >> beam.GroupByKey()
            | "LaterCopies" >> beam.FlatMap(lambda kv: later_copies(kv[1]))
        )
        by_id = docs | "KeyById" >> beam.Map(lambda d: (d.id, d))
        out = (
            {"docs": by_id, "copies": copies}
            | "Join" >> beam.CoGroupByKey()
            | "Rebuild" >> beam.ParDo(RebuildDocument()).with_outputs(COUNTS, main="main")
        )
        return out.main, out[COUNTS]


class RenderChunk(Step):
    """A document chunk -> the same chunk with its Wikipedia pages rendered (and counted)."""

    def __init__(self, tmp: str):
        self.tmp = tmp

    def process(self, chunk: Chunk):
        if not chunk.path:
            return
        tally = Tally()
        docs = list(rendered(read_documents(chunk.path), tally))
        name = "rendered-" + chunk.path.rsplit("/", 1)[-1]
        path = FileSystems.join(self.tmp, "documents", name)
        written = write_documents(path, docs) if docs else Chunk("")
        yield replace(written, counts={f"wikipedia{SEP}{k}": n for k, n in tally.counts.items()})


def write_batch(docs: list[Document], tmp: str) -> Chunk:
    name = f"dedup-{content_key(docs[0].id).hex()}.arrow"
    return write_documents(FileSystems.join(tmp, "documents", name), docs)


class DeduplicateChunks(beam.PTransform):
    """Document chunks -> de-duplicated document chunks, and count records (`Chunk`s without
    a file, like the other stages' records, so the build sums them the same way).

    Unlike every other stage, de-duplication groups the documents themselves by content, so on
    the local runner it holds the corpus in memory: it is for corpora that fit (Dataflow's
    shuffle has no such bound)."""

    def __init__(self, cfg: DedupConfig, tmp: str):
        super().__init__()
        self.cfg = cfg
        self.tmp = tmp

    def expand(self, chunks):
        ready = chunks | "Render" >> beam.ParDo(RenderChunk(self.tmp))
        docs = ready | "Documents" >> beam.FlatMap(
            lambda c: read_documents(c.path) if c.path else []
        )
        docs, counts = docs | "Deduplicate" >> Deduplicate(self.cfg)
        out = (
            docs
            | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=4096)
            | "Write" >> beam.Map(write_batch, self.tmp)
        )
        render_counts = ready | "RenderCounts" >> beam.Map(lambda c: c.counts)
        records = (
            (counts, render_counts)
            | "AllCounts" >> beam.Flatten()
            | "AsRecords" >> beam.Map(lambda counts: Chunk("", counts=counts))
        )
        return out, records
