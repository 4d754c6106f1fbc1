"""Stage 2, split: document chunks -> sentence chunks (id, source, sentences).

Wikipedia pages are rendered here (after reading spread them over workers: rendering is the
costly part), paragraphs over `--max-paragraph-chars` dropped and counted, and prose split by
Punkt (`pipeline.core.sentences`), with `--cjk-sentences` also at Chinese and Japanese full stops
(where not asked for, the sentences that run past one are counted); pre-split input (`text`,
JSONL with sentences) passes as is.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import apache_beam as beam

from pipeline.core.sentences import runs_past_cjk_stop, sentence_tokenizer, split_paragraphs
from pipeline.core.smoothing import group_of
from pipeline.core.tokenize import loses_marks_lowercased, stripped_chars
from pipeline.files.chunks import Chunk, finished, read_documents, write_sentences
from pipeline.sources.documents import CJK_STOPS, Document, Tally
from pipeline.sources.wikipedia.reader import rendered
from pipeline.stages.base import Stage, next_path
from pipeline.stages.counting import CountingStep


def split_document(doc: Document, max_paragraph_chars: int, punkt, count, cjk: bool = False):
    """A document -> (id, source, sentences), or None when no sentence is left; paragraphs over
    `max_paragraph_chars` are dropped. `punkt()` gives the sentence tokenizer (made when first
    needed), `count(source, name, n)` takes the counts; `cjk`: prose is cut at Chinese and
    Japanese full stops too (else the sentences that run past one are counted). The sentences
    with letters whose marks lowercasing would strip are counted too, for the build's note."""
    paragraphs = [p for p in doc.paragraphs if len(p) <= max_paragraph_chars]
    count(doc.source, "paragraphs_dropped.too_long", len(doc.paragraphs) - len(paragraphs))
    sentences = paragraphs if doc.presplit else split_paragraphs(paragraphs, punkt(), cjk)
    found = _other_scripts().search  # a character either count below looks for
    other = [s for s in sentences if not s.isascii() and found(s)]
    if not (doc.presplit or cjk):
        count(doc.source, "sentences_past_cjk_stops", sum(map(runs_past_cjk_stop, other)))
    marked = sum(map(loses_marks_lowercased, other))
    count(doc.source, "sentences_losing_marks_if_lowercased", marked)
    if not sentences:
        count(doc.source, "documents_dropped.no_sentences")
        return None
    count(doc.source, "sentences", len(sentences))
    return doc.id, doc.source, tuple(sentences)


@functools.lru_cache(maxsize=1)
def _other_scripts() -> re.Pattern:
    """Any Chinese or Japanese sentence end or letter that lowercasing strips marks from: one
    search of a sentence that holds none (English with curly quotes) spares the two counts'."""
    return re.compile(f"[{re.escape(CJK_STOPS + stripped_chars())}]")


class SplitChunk(CountingStep):
    """A document chunk -> a sentence chunk of (id, source, sentences)."""

    def __init__(
        self, tmp: str, max_paragraph_chars: int, punkt_json: str | None = None, cjk: bool = False
    ):
        self.tmp = tmp
        self.max_paragraph_chars = max_paragraph_chars
        self.punkt_json = punkt_json
        self.cjk = cjk

    def setup(self):
        super().setup()
        self.tokenizer = None  # Punkt, made for the first document that is not split yet

    def punkt(self):
        self.tokenizer = self.tokenizer or sentence_tokenizer(self.punkt_json)
        return self.tokenizer

    def process(self, chunk: Chunk):
        if not chunk.path:
            return
        target = next_path(self.tmp, "sentences", chunk)
        done = finished(target)  # an earlier attempt's, or an interrupted build's
        if done is not None:
            yield done
            return
        tally = Tally()
        keep, out, groups = self.max_paragraph_chars, [], []
        for d in rendered(read_documents(chunk.path), tally):
            split = split_document(d, keep, self.punkt, self.count, self.cjk)
            if split is not None:
                out.append(split)
                groups.append(group_of(d.input_index, d.id, d.source))
        for name, n in tally.counts.items():
            self.count("wikipedia", name, n)
        counts = self.take_counts()
        yield write_sentences(target, out, counts, groups) if out else Chunk("", counts=counts)


@dataclass(eq=False)
class SplitSentences(Stage):
    """Document chunks -> sentence chunks; Punkt on prose, nothing on pre-split input."""

    tmp: str
    max_paragraph_chars: int
    punkt_json: str | None = None  # None: English parameters
    cjk_sentences: bool = False  # prose cut at Chinese and Japanese full stops too

    def expand(self, chunks):
        split = SplitChunk(self.tmp, self.max_paragraph_chars, self.punkt_json, self.cjk_sentences)
        return chunks | "Spread" >> beam.Reshuffle() | "Split" >> beam.ParDo(split)
