"""`wikiextractor:` input, Wikipedia as WikiExtractor writes it (`text/AA/wiki_00`, ...): real
articles rendered by the `wikipedia` format and written in WikiExtractor's layout read back as
the same paragraphs under the same page ids; the layout's variants; its damage stops the run
naming the file and line, or is skipped and counted; such a file given as another format (and
another format's file given as it) is refused before any work; a build of a folder of them,
plain and compressed as its `--compress` writes them."""

from __future__ import annotations

import bz2
import html
import io
import os

import pytest

from pipeline.core.buckets import RepeatedIdError
from pipeline.shell.cli import main
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.head import check_head
from pipeline.sources.wikiextractor import read_wikiextractor
from pipeline.sources.wikipedia.pages import iter_pages
from pipeline.sources.wikipedia.reader import page_document
from schemas.reader import ShardSet
from tests.pipeline.wikidata import ARTICLES, export, gensim_xml, page_xml


def block(ident: int, title: str, paragraphs: list[str]) -> str:
    """One article as WikiExtractor 3 writes it: escaped text (`--html-safe`, its default), the
    title unescaped in the tag and again as the first line, a blank line, a paragraph a line."""
    url = f"https://en.wikipedia.org/wiki?curid={ident}"
    body = "".join(html.escape(p, quote=False) + "\n" for p in paragraphs)
    return f'<doc id="{ident}" url="{url}" title="{title}">\n{title}\n\n{body}\n</doc>\n'


def read(data: str | bytes, name: str = "AA/wiki_00", skip: bool = False):
    raw = data.encode() if isinstance(data, str) else data
    tally = Tally(skip_bad_input=skip)
    docs = list(read_wikiextractor(io.BytesIO(raw), name, tally))
    return [(d.id, d.paragraphs) for d in docs], tally.counts


def real_articles() -> list[tuple[str, str, tuple[str, ...]]]:
    """(page id, title, paragraphs) of the real export's articles, as the `wikipedia` format
    renders them."""
    articles = []
    for page in iter_pages(io.BytesIO(gensim_xml(ARTICLES)), ARTICLES, Tally()):
        doc = page_document(page, Tally())
        if doc is not None:
            articles.append((page.page_id, page.title, doc.paragraphs))
    return articles


def test_real_articles_in_wikiextractors_layout_read_as_the_wikipedia_formats() -> None:
    articles = real_articles()
    assert len(articles) > 50
    text = "".join(block(int(i), title, list(ps)) for i, title, ps in articles)
    assert "&amp;" in text and "&lt;" in text  # the escaping is undone, not read as prose
    docs, counts = read(text)
    assert docs == [(f"wikiextractor:{i}", ps) for i, _, ps in articles]
    assert not counts


def test_the_layouts_variants() -> None:
    text = (
        '<doc id="6" url="u" title=""Weird Al" Yankovic">\n"Weird Al" Yankovic\n\n'
        "He sings.\n\n\nHe plays the accordion.\n</doc>\n"
        # WikiExtractor 2.x: no blank line after the title, a revid before the url
        '<doc id="7" revid="99" url="u" title="AT&T">\nAT&T\nA company &amp; more.\n</doc>\n'
        # a first line that is not the title is text; an article of its title alone is dropped
        '<doc id="8" url="u" title="Stub">\nStub\n\n</doc>\n'
        '<doc id="9" url="u" title="Alpha">\nBeta is not the title.\n</doc>\n'
        # a fork that writes the title on the tag's line; Windows line ends
        '<doc id="10" url="u" title="Same line">Same line\r\nText here.\r\n</doc>\r\n'
    )
    docs, counts = read(text)
    assert docs == [
        ("wikiextractor:6", ("He sings.", "He plays the accordion.")),
        ("wikiextractor:7", ("A company & more.",)),
        ("wikiextractor:9", ("Beta is not the title.",)),
        ("wikiextractor:10", ("Text here.",)),
    ]
    assert counts == {"documents_read": 1, "documents_dropped.wikiextractor_no_text": 1}


GOOD = block(1, "Good", ["A good article."])


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        (GOOD + '<doc id="2" url="u" title="Cut">\nCut\n\nThe file ends', 7, "ends first"),
        ('<doc id="2" url="u" title="A">\nA\n' + GOOD, 1, "line 3 opens another"),
        ('<doc url="u" title="No id">\nNo id\nText.\n</doc>\n' + GOOD, 1, 'without an id="..."'),
        ("Some prose before any block.\n" + GOOD, 1, "text outside any <doc ...> block"),
    ],
    ids=["cut-short", "unclosed", "no-id", "outside"],
)
def test_damage_stops_the_run_naming_the_line_or_is_skipped_and_counted(text, line, what):
    with pytest.raises(BadInputError, match=rf"^AA/wiki_00:{line}: .*{what}"):
        read(text)
    docs, counts = read(text, skip=True)
    assert ("wikiextractor:1", ("A good article.",)) in docs
    assert counts["documents_dropped.wikiextractor_bad_record"] == 1


def check(fmt: str, tmp_path, data: bytes, name: str = "wiki_00") -> None:
    path = tmp_path / name
    path.write_bytes(data)
    check_head(fmt, str(path), name, lambda p: open(p, "rb"))


@pytest.mark.parametrize("fmt", ["text", "books", "wikipedia"])
def test_its_files_given_as_another_format_are_refused_before_any_work(fmt, tmp_path) -> None:
    with pytest.raises(BadInputError, match="^wiki_00: WikiExtractor's output.*--format wikiext"):
        check(fmt, tmp_path, GOOD.encode())


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b'{"id": "1", "url": "u", "title": "A", "text": "A text."}\n', "JSON Lines.*jsonl"),
        (export(page_xml(1, "A", "An article here.")), "MediaWiki XML export.*wikipedia"),
        (b"Just prose, one sentence per line.\n", "not WikiExtractor's output"),
    ],
    ids=["its-json-output", "a-dump", "prose"],
)
def test_other_files_given_as_wikiextractor_are_refused_saying_what_they_are(data, said, tmp_path):
    with pytest.raises(BadInputError, match=f"^wiki_00: .*{said}"):
        check("wikiextractor", tmp_path, data)
    check("wikiextractor", tmp_path, GOOD.encode())  # and its own files pass


def test_one_article_in_two_files_is_refused_as_a_repeat() -> None:
    message = str(RepeatedIdError.of("wikiextractor:12", equal=False))
    assert "one article in two files of WikiExtractor's output" in message


def test_a_folder_of_its_output_builds_compressed_files_among_them(tmp_path) -> None:
    articles = real_articles()
    half = len(articles) // 2
    folder = tmp_path / "text"
    (folder / "AA").mkdir(parents=True)
    (folder / "AB").mkdir()
    first = "".join(block(int(i), t, list(ps)) for i, t, ps in articles[:half])
    rest = "".join(block(int(i), t, list(ps)) for i, t, ps in articles[half:])
    (folder / "AA" / "wiki_00").write_text(first + block(1, "Stub", []), encoding="utf-8")
    (folder / "AB" / "wiki_00.bz2").write_bytes(bz2.compress(rest.encode()))
    out = str(tmp_path / "out")
    argv = ["build", "--input", f"wikiextractor:{folder}", "--out", out, "--workers", "1"]
    assert main([*argv, "--vocab-size", "500"]) == 0
    counts = ShardSet.open(out).manifest.counts["by_source"]["wikiextractor"]
    assert counts["documents_read"] == len(articles) + 1
    assert counts["documents_used"] == len(articles)
    assert counts["documents_dropped.wikiextractor_no_text"] == 1
    assert os.listdir(os.path.join(out, "shards"))
