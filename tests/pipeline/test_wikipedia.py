"""Wikipedia: wikitext rendered to prose, pages streamed from exports, multistream spans."""

from __future__ import annotations

import bz2
import io
import os
import pickle
import re

import numpy as np
import pytest

from pipeline.sources.compressed import DecompressingReader
from pipeline.sources.documents import Document, Tally
from pipeline.sources.readers import READERS
from pipeline.sources.spans import Span, fixed_spans
from pipeline.sources.wikipedia.pages import WikiPage, iter_pages
from pipeline.sources.wikipedia.prose import clean_line
from pipeline.sources.wikipedia.reader import read_wikipedia
from pipeline.sources.wikipedia.render import render_wikitext
from pipeline.sources.wikipedia.spans import (
    plan_spans,
    plan_wikipedia,
    read_span,
    stream_offsets,
)
from pipeline.sources.wikipedia.split import PageSplitter
from tests.pipeline.wikidata import (
    ARTICLES,
    BULGARIAN,
    MARKUP_RESIDUE,
    TABLE_MARKUP,
    export,
    gensim_xml,
    multistream,
    page_xml,
)


def render(wikitext: str) -> list[str]:
    return render_wikitext(wikitext, Tally())


@pytest.mark.parametrize(
    ("wikitext", "paragraphs"),
    [
        (
            "'''Paris''' is the [[capital city|capital]] of ''[[France]]''.",
            ["Paris is the capital of France."],
        ),
        ("Red [[apple]]s grow on [[tree|trees]] here.", ["Red apples grow on trees here."]),
        ("The road is {{convert|5|km|mi}} long today.", ["The road is 5 km long today."]),
        ("It runs {{convert|5|to|10|km}} in all.", ["It runs 5 to 10 km in all."]),
        ("She said {{lang|fr|bonjour}} to them.", ["She said bonjour to them."]),
        (
            "A fact.<ref>Source {{cite web|url=x}}</ref> More facts.<ref name=a/> End.",
            ["A fact. More facts. End."],
        ),
        (
            "[[File:X.jpg|thumb|A [[caption]] here]]Text here is prose.\n"
            "[[Image:Y.png|left|200px]]\n[[Category:Things]]\n[[de:Ding]]\n[[be-x-old:Рэч]]",
            ["Text here is prose."],
        ),
        (
            "Intro text is here.\n\n== History ==\nIt began long ago.\n* item one\n"
            "# item two\n; term : definition\n: indented\nAfter the list comes prose.",
            ["Intro text is here.", "It began long ago.", "After the list comes prose."],
        ),
        (
            'Before the table we write.\n{| class="wikitable"\n|-\n| a || b\n|}\n'
            "After the table we write.",
            ["Before the table we write.", "After the table we write."],
        ),
        (
            "{{Infobox person\n| name = X\n| birth = {{birth date|1900|1|1}}\n}}\n"
            "'''X''' was a person of note.",
            ["X was a person of note."],
        ),
        (
            "__NOTOC__\nA caf&eacute; &amp; bar<!-- hidden -->&nbsp;opened in town.",
            ["A café & bar opened in town."],
        ),
        (
            "See [http://example.org the site] and http://bare.example.org for more.",
            ["See the site and for more."],
        ),
        ("The city of [[Paris (France)|]] is old.", ["The city of Paris is old."]),
        ("[[:fr:Paris|Paris in French]] is a link.", ["Paris in French is a link."]),
        (
            "Code follows in the box below:\n x = 1\n y = 2\nBack to plain prose now.",
            ["Code follows in the box below:", "Back to plain prose now."],
        ),
        (
            "Aristotle ({{IPAc-en|ˈ|æ}};<ref>r</ref> {{lang-grc|Ἀ}}, ''Aristotélēs''; "
            "384–322 BC) was Greek.",
            ["Aristotle (Aristotélēs; 384–322 BC) was Greek."],
        ),
        ("Water is H<sub>2</sub>O at 10<sup>3</sup> scale.", ["Water is H2O at 103 scale."]),
        ("Short label\n\nNotes\n\nA real sentence.", ["A real sentence."]),
    ],
)
def test_render_golden_cases(wikitext: str, paragraphs: list[str]) -> None:
    assert render(wikitext) == paragraphs


def test_unparsed_table_rows_and_leftover_markup_are_dropped_and_counted() -> None:
    tally = Tally()
    text = "Good prose stays here.\n| bgcolor=yellow | SF\n! 73–9\nMore [[broken prose here."
    assert render_wikitext(text, tally) == ["Good prose stays here."]
    assert tally.counts["wiki_lines_dropped.markup_residue"] == 3


WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2003\u2028\u3000"


def spaces_by_pattern(line: str) -> str:
    """The cleaner's last step as regular expressions: runs of whitespace to one space, none
    before a closing mark."""
    return re.sub(r"\s+([.,;:!?)])", r"\1", re.sub(r"\s+", " ", line).strip())


def test_clean_line_collapses_whitespace_as_the_pattern_does() -> None:
    """The cleaner's `str.split` and `str.replace` against the regular expressions, on random
    lines of words, punctuation and every kind of whitespace (`\u200b` and the BOM are not
    whitespace to either); `(` and `)` are left out, as other rules of the cleaner act on them
    first, and `)` is covered on its own."""
    rng = np.random.default_rng(7)
    alphabet = list("ab.,;:!?") + list(WHITESPACE) + ["\u200b", "\ufeff"]
    for _ in range(5000):
        line = "".join(rng.choice(alphabet, size=int(rng.integers(1, 16))))
        assert clean_line(line) == spaces_by_pattern(line), repr(line)
    for line in ("a )", "a\u3000)b", "x \t) . ,"):
        assert clean_line(line) == spaces_by_pattern(line)


def test_articles_only_with_stable_ids_and_local_namespace_names() -> None:
    data = export(
        page_xml(12, "Anarchism", "'''Anarchism''' is a political philosophy. [[Datei:A.jpg]]"),
        page_xml(13, "Talk:Anarchism", "Some talk page text is here.", ns=1),
        page_xml(14, "Anarchy", "#REDIRECT [[Anarchism]]", redirect=True),
        page_xml(15, "Empty", "{{Infobox}}\n[[Kategorie:Leer]]"),
        page_xml(16, "Second", "A second article is here. [[Kategorie:Zwei]]"),
    )
    tally = Tally()
    docs = list(read_wikipedia(io.BytesIO(data), "dump.xml", tally))
    assert docs == [
        Document("wikipedia:12", "wikipedia", ("Anarchism is a political philosophy.",)),
        Document("wikipedia:16", "wikipedia", ("A second article is here.",)),
    ]
    assert tally.counts["wiki_pages"] == 5
    assert tally.counts["wiki_pages_skipped.not_article"] == 1
    assert tally.counts["wiki_pages_skipped.redirect"] == 1
    assert tally.counts["documents_dropped.wiki_no_prose"] == 1
    assert READERS["wikipedia"](io.BytesIO(data), "dump.xml", Tally(), "wikipedia") is not None


class Trickle:
    """Reads at most `n` bytes at a time: every tag ends up cut by a read boundary somewhere."""

    def __init__(self, data: bytes, n: int):
        self._f, self._n = io.BytesIO(data), n

    def read(self, size: int = -1) -> bytes:
        return self._f.read(self._n if size < 0 else min(size, self._n))


def test_page_splitting_does_not_depend_on_read_boundaries() -> None:
    data = export(*(page_xml(i, f"T{i}", f"Article number {i} has prose.") for i in range(1, 30)))
    whole = list(PageSplitter("x").split(io.BytesIO(data)))
    for n in (1, 5, 7, 64):
        splitter = PageSplitter("x")
        assert list(splitter.split(Trickle(data, n))) == whole
        assert splitter.closed and splitter.pages_seen == 29 and not splitter.stray


def test_an_oversized_page_is_skipped_and_counted_without_being_held() -> None:
    big = page_xml(2, "Big", "word " * 50_000)
    data = export(page_xml(1, "A", "First article text."), big, page_xml(3, "C", "Third one."))
    tally = Tally()
    docs = list(iter_pages(Trickle(data, 4096), "x.xml", tally, max_page_bytes=64_000))
    assert [p.page_id for p in docs] == ["1", "3"]
    assert tally.counts["documents_dropped.wiki_page_too_long"] == 1


def test_dump_on_a_single_line_reads_the_same() -> None:
    xml = gensim_xml(TABLE_MARKUP)
    flat = re.sub(rb"</page>\s*<page>", b"</page><page>", xml)
    flat = re.sub(rb">\s+<(/?)(page|mediawiki|siteinfo)", rb"><\1\2", flat)
    assert flat.count(b"\n") < xml.count(b"\n")
    assert list(read_wikipedia(io.BytesIO(flat), "f", Tally())) == list(
        read_wikipedia(io.BytesIO(xml), "f", Tally())
    )


@pytest.mark.parametrize("name", [TABLE_MARKUP, ARTICLES])
def test_real_dumps_render_without_markup_residue(name: str) -> None:
    xml = gensim_xml(name)
    tally = Tally()
    docs = list(read_wikipedia(io.BytesIO(xml), name, tally))
    assert docs and all(d.paragraphs for d in docs)
    for doc in docs:
        for paragraph in doc.paragraphs:
            assert not [r for r in MARKUP_RESIDUE if r in paragraph], (doc.id, paragraph)
            assert "wikitable" not in paragraph and "colspan" not in paragraph
    pages = xml.count(b"<page>")
    skipped = tally.counts["wiki_pages_skipped.redirect"]
    skipped += tally.counts["wiki_pages_skipped.not_article"]
    assert (
        tally.counts["wiki_pages"]
        == pages
        == len(docs)
        + skipped
        + sum(n for k, n in tally.counts.items() if k.startswith("documents_dropped."))
    )
    ids = re.findall(rb"<page>\s*<title>[^<]*</title>\s*<ns>0</ns>\s*<id>(\d+)</id>", xml)
    # a page's id names its wiki where the export does (`<dbname>`): the table-markup export
    # is pages alone
    wiki = "enwiki:" if b"<dbname>enwiki</dbname>" in xml else ""
    assert {d.id for d in docs} <= {f"wikipedia:{wiki}{i.decode()}" for i in ids}


def test_real_dump_prose_keeps_link_text() -> None:
    docs = list(read_wikipedia(io.BytesIO(gensim_xml(TABLE_MARKUP)), "t", Tally()))
    first = docs[0]
    assert first.id == "wikipedia:217916"  # an export without <siteinfo> names no wiki
    assert first.paragraphs[0].startswith(
        "The constructive vote of no confidence (in German: konstruktives Misstrauensvotum,"
    )
    assert (
        "in West Germany, but is today also used in other nations, such as Spain"
        in (first.paragraphs[1])
    )


def test_utf16_export_with_localised_namespaces() -> None:
    xml = gensim_xml(BULGARIAN)
    assert xml[:2] == b"\xff\xfe"
    tally = Tally()
    [doc] = read_wikipedia(io.BytesIO(xml), BULGARIAN, tally)
    assert doc.paragraphs[0].startswith("Григорианският календар")
    assert tally.counts["wiki_pages_skipped.not_article"] == 2
    assert not any("Категория" in p or "Файл:" in p for p in doc.paragraphs)


def whole_pages(xml: bytes) -> list[WikiPage]:
    return list(iter_pages(io.BytesIO(xml), "x", Tally()))


def read_spans(data: bytes, spans: list[Span]) -> tuple[list[WikiPage], Tally]:
    tally, pages = Tally(), []
    for span in spans:
        pages.extend(read_span(io.BytesIO(data), "x", span, tally))
    return pages, tally


def test_multistream_spans_read_what_the_whole_dump_holds() -> None:
    xml = gensim_xml(ARTICLES)
    dump, index = multistream(xml, pages_per_stream=10)
    whole = list(iter_pages(DecompressingReader(io.BytesIO(dump), "bz2", "d"), "d", Tally()))
    assert whole == whole_pages(xml) and len(whole) > 100
    offsets = stream_offsets(DecompressingReader(io.BytesIO(index), "bz2", "i"), "i")
    assert len(offsets) == -(-xml.count(b"<page>") // 10)
    spans = plan_spans(offsets, len(dump), target_bytes=150_000)
    assert len(spans) > 3
    assert [s.start for s in spans[1:]] == [s.end for s in spans[:-1]]
    assert spans[0].start == offsets[0] and spans[-1].end == len(dump)
    pages, tally = read_spans(dump, spans)
    assert pages == whole
    assert tally.counts["wiki_pages"] == xml.count(b"<page>")


def test_plain_xml_is_cut_at_any_offset_without_losing_or_repeating_pages() -> None:
    xml = gensim_xml(ARTICLES)
    spans = fixed_spans(len(xml), target_bytes=250_000)
    assert len(spans) > 10
    pages, tally = read_spans(xml, spans)
    assert pages == whole_pages(xml)
    assert tally.counts["wiki_pages"] == xml.count(b"<page>")


def open_raw(path: str):
    return open(path, "rb")


def test_plan_finds_the_index_beside_a_multistream_dump(tmp_path) -> None:
    dump, index = multistream(gensim_xml(TABLE_MARKUP), pages_per_stream=2)
    path = tmp_path / "enwiki-20240101-pages-articles-multistream.xml.bz2"
    path.write_bytes(dump)
    plan = plan_wikipedia(str(path), len(dump), open_raw, os.path.exists)
    assert plan == [None]  # no index: one reader for the whole file
    (tmp_path / "enwiki-20240101-pages-articles-multistream-index.txt.bz2").write_bytes(index)
    plan = plan_wikipedia(str(path), len(dump), open_raw, os.path.exists)
    assert plan and all(isinstance(s, Span) for s in plan)
    assert plan[-1].end == len(dump)


def test_what_is_shipped_between_workers_pickles() -> None:
    page = WikiPage("1", "T", "Some ''text''.", frozenset({"file"}))
    assert pickle.loads(pickle.dumps(page)) == page
    assert pickle.loads(pickle.dumps(Span(1, 2, 3))) == Span(1, 2, 3)


def test_bz2_compressed_export_reads_through_checked_decompression() -> None:
    data = bz2.compress(export(page_xml(1, "A", "An article of prose.")))
    docs = list(read_wikipedia(DecompressingReader(io.BytesIO(data), "bz2", "a.bz2"), "a", Tally()))
    assert [d.paragraphs for d in docs] == [("An article of prose.",)]


def test_beam_reads_a_multistream_dump_in_spans_like_the_whole_file(tmp_path, monkeypatch) -> None:
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    import pipeline.sources.wikipedia.spans as wiki_spans
    from pipeline.files.chunks import read_documents
    from pipeline.files.listing import InputSpec
    from pipeline.runners.run import make_pipeline, pipeline_options
    from pipeline.sources.wikipedia.reader import rendered
    from pipeline.stages.counting import SumCounts
    from pipeline.stages.read import ReadChunks, plan_reads

    xml = gensim_xml(TABLE_MARKUP)
    dump, index = multistream(xml, pages_per_stream=1)
    path = tmp_path / "enwiki-20240101-pages-articles-multistream.xml.bz2"
    path.write_bytes(dump)
    (tmp_path / "enwiki-20240101-pages-articles-multistream-index.txt.bz2").write_bytes(index)
    monkeypatch.setattr(wiki_spans, "SPAN_BYTES", 1)  # a span per stream
    spans = [item[3] for item in plan_reads(("wikipedia", str(path), path.name))]
    assert len(spans) == 5 and all(isinstance(s, Span) for s in spans)
    expected = list(read_wikipedia(io.BytesIO(xml), "x", Tally()))
    with make_pipeline(pipeline_options([], "DirectRunner", 1)) as p:
        chunks = p | ReadChunks([InputSpec("wikipedia", str(tmp_path))], str(tmp_path / "tmp"), 1)
        docs = chunks | beam.FlatMap(
            lambda c: rendered(read_documents(c.path), Tally()) if c.path else []
        )
        assert_that(docs, equal_to(expected))
        counts = chunks | beam.Map(lambda c: c.counts)
        total = (counts,) | SumCounts() | beam.Map(lambda d: d["wikipedia/files_read"])
        assert_that(total, equal_to([1]), label="OneFileRead")


def test_shards_built_from_a_real_dump_hold_no_markup(tmp_path) -> None:
    from schemas.reader import ShardSet
    from schemas.shard import ShardColumns
    from tests.helpers import build_shards

    (tmp_path / "wiki").mkdir()
    (tmp_path / "wiki" / TABLE_MARKUP).write_bytes(bz2.compress(gensim_xml(TABLE_MARKUP)))
    out = str(tmp_path / "out")
    args = ("--vocab-size", "2000", "--dupe-factor", "1", "--cased")
    assert build_shards(out, *args, inputs=f"wikipedia:{tmp_path}/wiki") == 0
    shards = ShardSet.open(out)
    pieces, text = shards.vocab.pieces, []
    for i in range(len(shards)):
        cols = ShardColumns.from_table(shards.table(i))
        ids = cols.input_ids.astype(np.int64)
        for r in range(cols.num_rows):
            row = ids[cols.input_offsets[r] : cols.input_offsets[r + 1]].copy()
            lo, hi = cols.masked_offsets[r], cols.masked_offsets[r + 1]
            row[cols.masked_positions[lo:hi].astype(np.int64)] = cols.masked_labels[lo:hi]
            text.append(" ".join(pieces[t] for t in row).replace(" ##", ""))
    decoded = "\n".join(text)
    assert "constructive vote of no confidence" in decoded
    spaced = [" ".join(r) for r in MARKUP_RESIDUE] + ["& amp ;", "< ref", "thumb |"]
    assert not [r for r in MARKUP_RESIDUE + tuple(spaced) if r in decoded]
