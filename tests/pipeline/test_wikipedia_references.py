"""References cut before the wikitext tokenizer sees them (`without_plain_references`): the
paragraphs rendered stay those of the whole wikitext, on real articles, on each place where a
reference must stay, and on random markup."""

from __future__ import annotations

import io
import random

import pytest

from pipeline.sources.documents import Tally
from pipeline.sources.wikipedia.pages import iter_pages
from pipeline.sources.wikipedia.render import (
    render_uncut,
    render_wikitext,
    without_plain_references,
)
from tests.pipeline.wikidata import ARTICLES, BULGARIAN, TABLE_MARKUP, gensim_xml

PROSE = "Some words of prose that are long enough to be kept, said the man. "
END = " And more words of prose to end it with, said she."


def both_ways(wikitext: str) -> tuple[list[str], list[str]]:
    return render_wikitext(wikitext, Tally()), render_uncut(wikitext, Tally())


@pytest.mark.parametrize("name", [ARTICLES, TABLE_MARKUP, BULGARIAN])
@pytest.mark.slow
def test_real_articles_render_the_same_paragraphs(name) -> None:
    pages = list(iter_pages(io.BytesIO(gensim_xml(name)), name, Tally()))
    assert pages
    for page in pages:
        cut, whole = both_ways(page.wikitext)
        assert cut == whole, page.title
    if name == ARTICLES:  # most of its references go: what the tokenizer is spared
        before = sum(len(p.wikitext) for p in pages)
        after = sum(len(without_plain_references(p.wikitext)) for p in pages)
        assert after < 0.8 * before


@pytest.mark.parametrize(
    ("markup", "cut"),
    [
        ("a fact.<ref>Smith 2001, p. 3</ref> More", True),
        ('a fact<ref name="s">{{cite web|url=http://x.org|title=T}}</ref>, more', True),
        ("a fact<ref>''Title'' and '''bold''' [[a|b]]</ref> more", True),
        ("a fact<ref>one</ref><ref>two</ref>.", True),
        ("a fact.<ref>at the very end</ref>", True),
        ("see [http://x.org site]<ref>x</ref> more", True),
        # each place where cutting would change the parse: the reference stays
        ("[[Foo<ref>x</ref>]] bar", False),  # in a link's title
        ("[[Fo<ref>x</ref>o]] bar", False),
        ("{{conv<ref>x</ref>ert|1|km}} bar", False),  # in a template's name
        ("&am<ref>x</ref>p; bar", False),  # splitting an entity
        ("&amp<ref>x</ref>; bar", False),
        ("<!-<ref>x</ref>- c --> bar", False),  # splitting a comment's marker
        ("\n<ref>x</ref> indented line that is long enough to count as prose here.", False),
        ("\n <ref>x</ref> y", False),  # after a line's leading space
        ("\n<ref>x</ref>* not a list", False),
        ('<span title="a<ref>b</ref>">t</span> bar', False),  # in a tag's attributes
        ("<ref name=a>open <ref>x</ref> bar", False),  # after a reference left open
        ("<REF name=a>open <ref>x</ref> bar", False),  # in any case
        ("{{e\n}}{{<ref>x</ref>\nf}} bar", False),  # after a close from the line before
        ("a ]] [[b<ref>x</ref> c]] more", False),
        ("a<ref>]] x [[</ref> more", False),  # its brackets out of order
        ("see http://x.org{{e\n}}<ref>x</ref>. more", False),  # after what a line before began
        ("a<ref>Ordeal of the Union'' (1959)</ref> more", False),  # italic left open
        ("''a<ref>x</ref> b'' more", False),  # inside italic
        ("a<ref>[[unclosed</ref> more", False),  # a bracket left open
        ("a<ref>x\ny</ref> more", False),  # over two lines
        ("a<ref\n>x</ref> more", False),
        ("a<ref>x <br> y</ref> more", False),  # a tag inside
        ("a<ref name=b/> more", False),  # no text: nothing to spare
        ("\n*<ref>x</ref>: y", False),  # after a list's marker
        ("see http://x.org<ref>x</ref>) more", False),  # ending a bare URL
        ("a<references><ref name=a>x</ref></references> more", False),
    ],
)
def test_a_reference_is_cut_only_where_nothing_reads_it_as_something_else(markup, cut) -> None:
    wikitext = PROSE + markup + END
    assert (without_plain_references(wikitext) != wikitext) is cut
    rendered, whole = both_ways(wikitext)
    assert rendered == whole


FRAGMENTS = [
    *("word", "Some prose words here", "x", " ", " ", "\t", "\n", "\n\n", "\n ", "=", "-"),
    *("é", "—"),
    *(".", ",", ":", ";", "!", "?", "(", ")", '"', "'", "''", "'''", "'''''", "<", ">", "/>"),
    *("[[", "]]", "[[Foo|", "[[File:a.jpg|thumb|", "[[Category:X]]", "[", "]", "{", "}", "|"),
    *("{{", "}}", "{{lang|fr|", "{{quote|", "{{!}}", "{{convert|5|km}}", "-{", "}-", "~~~~"),
    *("<ref>", "</ref>", "</ref >", "< ref>", "<ref\n>", "<ref name=a>", "<ref group=note>"),
    *("<ref name=b/>", "<REF>", "</REF>", "<references>", "</references>"),
    *("<ref>plain</ref>", "<ref>{{cite|a=b}}</ref>", "<ref>''t''</ref>", "<ref>[[a|b]] c</ref>"),
    *("<ref>[http://x.org t]</ref>", '<ref name="q">plain [x]</ref>', "<ref>a ''b'' c</ref>"),
    *("&amp;", "&am", "p;", "&nbsp;", "&#123;", "<!--", "-->", "__NOTOC__", "File:", "Category:"),
    *("\n==", "\n=", "\n*", "\n#", "\n:", "\n;", "\n----", "{|", "|}", "<br>", "<div>", "</div>"),
    *("<nowiki>", "</nowiki>", "<pre>", "</pre>", "<math>", "</math>", "<span>", "</span>"),
    *("<gallery>", "</gallery>", "<blockquote>", "</blockquote>", "[http://x.org ", "http://y.com"),
]


def test_random_markup_renders_the_same_paragraphs() -> None:
    """Fragments of markup strung together at random (seeded): wherever a reference is cut, the
    paragraphs are those of the whole text."""
    rng = random.Random(20261204)
    cut = 0
    for _ in range(3000):
        middle = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 40)))
        wikitext = PROSE + middle + END
        if without_plain_references(wikitext) == wikitext:
            continue
        cut += 1
        rendered, whole = both_ways(wikitext)
        assert rendered == whole, wikitext
    assert cut > 400


def test_a_line_of_many_references_is_read_once() -> None:
    """50,000 references on one line, each cut: the text before each is taken in from where the
    last one stopped (rescanning the line for each, as a first version did, took seconds,
    growing with the square of their number: docs/benchmarks.md)."""
    line = "Prose words here." + "a<ref>x</ref> " * 50_000
    assert without_plain_references(line) == "Prose words here." + "a " * 50_000
