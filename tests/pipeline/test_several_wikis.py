"""The Wikipedias of several languages in one build, as multilingual BERT was trained: a page id
is unique only within its wiki (page 12 of the English and of the German Wikipedia are two
articles), so a page's document id names its wiki as the dump's `<siteinfo>` does
(`<dbname>enwiki</dbname>`: `wikipedia:enwiki:12`), and a WikiExtractor block's by its url's
host (`wikiextractor:en.wikipedia.org:12`). The same wiki given twice is still refused."""

from __future__ import annotations

import gzip
import io
import os

import pytest

from pipeline.sources.documents import Tally
from pipeline.sources.wikiextractor import read_wikiextractor
from pipeline.sources.wikipedia.pages import parse_siteinfo
from pipeline.sources.wikipedia.reader import read_wikipedia
from schemas.cli import main as schemas_main
from schemas.reader import ShardSet
from tests.helpers import build_shards
from tests.pipeline.wikidata import (
    ARTICLES,
    BULGARIAN,
    HEADER,
    ZH_DOCS,
    export,
    gensim_xml,
    multistream,
    page_xml,
)

PROSE = "{} is an article of its own. It has a second sentence, and a third one follows it."


def wiki_export(dbname: str, *pages: str) -> bytes:
    """`export` of `pages` whose siteinfo names its wiki."""
    header = HEADER.replace("<siteinfo>", f"<siteinfo><dbname>{dbname}</dbname>", 1)
    assert header != HEADER
    return export(*pages).replace(HEADER.encode(), header.encode(), 1)


def relabelled(xml: bytes, dbname: str) -> bytes:
    """gensim's real English export as if another wiki's: its pages keep their ids."""
    assert b"<dbname>enwiki</dbname>" in xml
    return xml.replace(b"<dbname>enwiki</dbname>", f"<dbname>{dbname}</dbname>".encode(), 1)


def first_pages(xml: bytes, n: int) -> bytes:
    """An export cut after its `n`th page, closed as a whole one is."""
    cut = 0
    for _ in range(n):
        cut = xml.index(b"</page>", cut) + len(b"</page>\n")
    return xml[:cut] + b"</mediawiki>\n"


def ids(xml: bytes) -> list[str]:
    return [d.id for d in read_wikipedia(io.BytesIO(xml), "f", Tally())]


def test_a_pages_id_names_the_wiki_its_dump_names():
    assert parse_siteinfo(wiki_export("dewiki")).wiki == "dewiki"
    assert parse_siteinfo(b"<mediawiki><siteinfo><dbname> zh_classicalwiki </dbname>").wiki == (
        "zh_classicalwiki"
    )
    assert parse_siteinfo(export()).wiki == ""  # a siteinfo without a dbname
    page = page_xml(12, "Zwölf", PROSE.format("Zwölf"))
    assert ids(wiki_export("dewiki", page)) == ["wikipedia:dewiki:12"]
    assert ids(export(page)) == ["wikipedia:12"]
    real = ids(gensim_xml(ARTICLES))
    assert len(real) > 50 and all(i.startswith("wikipedia:enwiki:") for i in real)


def test_two_wikis_whose_page_ids_meet_build_together_also_from_a_multistream_dump(tmp_path):
    """The real English export's first 80 pages, and the same pages as another wiki's
    multistream dump: every page id meets its twin, and both are built (the second read by its
    index's streams, where the siteinfo is the dump's first stream)."""
    english = first_pages(gensim_xml(ARTICLES), 80)
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "enwiki-pages-articles.xml").write_bytes(english)
    dump, index = multistream(relabelled(english, "simplewiki"), 20)
    name = tmp_path / "simple" / "simplewiki-20240101-pages-articles-multistream"
    name.parent.mkdir()
    (name.parent / f"{name.name}.xml.bz2").write_bytes(dump)
    (name.parent / f"{name.name}-index.txt.bz2").write_bytes(index)
    both = str(tmp_path / "both")
    inputs = f"wikipedia:{tmp_path}/en,wikipedia:{name.parent}"
    assert build_shards(both, "--vocab-size", "500", inputs=inputs) == 0
    together = ShardSet.open(both).manifest.counts["total"]
    alone = len(ids(english))  # its articles with prose, read apart
    assert alone > 10
    assert together["documents_read"] == together["documents_used"] == 2 * alone


def test_one_wiki_in_two_dumps_is_still_refused_naming_the_wiki(tmp_path):
    page = page_xml(7, "S", PROSE.format("S"))
    for name, other in (("a", page_xml(1, "A", PROSE.format("A"))), ("b", page)):
        (tmp_path / f"{name}.xml").write_bytes(wiki_export("enwiki", page, other))
    inputs = f"wikipedia:{tmp_path}/a.xml,wikipedia:{tmp_path}/b.xml"
    with pytest.raises(SystemExit, match="one Wikipedia page in two dumps") as e:
        build_shards(str(tmp_path / "out"), "--vocab-size", "300", inputs=inputs)
    assert "document id 'wikipedia:enwiki:7' occurs twice" in str(e.value)


def block(host: str, ident: int, title: str) -> str:
    url = f"https://{host}/wiki?curid={ident}"
    body = PROSE.format(title) + "\n" + PROSE.format(title + " again") + "\n"
    return f'<doc id="{ident}" url="{url}" title="{title}">\n{title}\n\n{body}</doc>\n'


def test_wikiextractors_output_of_two_wikis_builds_together_and_one_wiki_twice_does_not(
    tmp_path,
):
    text = block("en.wikipedia.org", 12, "Anarchism") + block("DE.wikipedia.org", 12, "Zwölf")
    docs = list(read_wikiextractor(io.BytesIO(text.encode()), "AA/wiki_00", Tally()))
    assert [d.id for d in docs] == [
        "wikiextractor:en.wikipedia.org:12",
        "wikiextractor:de.wikipedia.org:12",
    ]
    for lang in ("en", "de"):
        folder = tmp_path / lang / "AA"
        folder.mkdir(parents=True)
        pages = "".join(block(f"{lang}.wikipedia.org", i, f"T{lang}{i}") for i in (1, 2, 3))
        (folder / "wiki_00").write_text(pages, encoding="utf-8")
    out = str(tmp_path / "out")
    inputs = f"wikiextractor:{tmp_path}/en,wikiextractor:{tmp_path}/de"
    assert build_shards(out, "--vocab-size", "300", inputs=inputs) == 0
    assert ShardSet.open(out).manifest.counts["total"]["documents_used"] == 6
    os.rename(tmp_path / "de" / "AA" / "wiki_00", tmp_path / "de" / "AA" / "wiki_01")
    (tmp_path / "de" / "AA" / "wiki_01").write_text(
        "".join(block("en.wikipedia.org", i, f"Ten{i}") for i in (1, 2, 3)), encoding="utf-8"
    )
    with pytest.raises(SystemExit, match="one article in two files of WikiExtractor's output"):
        build_shards(str(tmp_path / "again"), "--vocab-size", "300", inputs=inputs)


@pytest.mark.skipif(not ZH_DOCS.is_dir(), reason="make corpora has not fetched the kernel docs")
def test_a_corpus_of_three_languages_builds_with_the_flags_the_docs_give(tmp_path, capsys):
    """gensim's English export (its first 80 pages) and its Bulgarian one (UTF-16) and the
    kernel's Chinese documentation as books, cased, cut at 。！？, with an alphabet of 5,000: a
    set that validates, its documents those of each input read apart, no note of [UNK]
    pieces."""
    books = tmp_path / "zh"
    books.mkdir()
    for path in sorted(ZH_DOCS.glob("admin-guide/*.rst.gz")):
        (books / f"{path.name[: -len('.rst.gz')]}.txt").write_bytes(
            gzip.decompress(path.read_bytes())
        )
    exports = [first_pages(gensim_xml(ARTICLES), 80), gensim_xml(BULGARIAN)]
    for name, xml in zip(("en", "bg"), exports, strict=True):
        (tmp_path / f"{name}wiki.xml").write_bytes(xml)
    inputs = f"wikipedia:{tmp_path}/enwiki.xml,wikipedia:{tmp_path}/bgwiki.xml,books:{books}"
    out = str(tmp_path / "out")
    flags = ("--cased", "--cjk-sentences", "--limit-alphabet", "5000", "--dupe-factor", "2")
    assert build_shards(out, *flags, inputs=inputs) == 0
    assert "[UNK]" not in capsys.readouterr().out
    assert schemas_main(["validate", out]) == 0
    by_source = ShardSet.open(out).manifest.counts["by_source"]
    pages = sum(len(ids(xml)) for xml in exports)
    assert by_source["wikipedia"]["documents_used"] == pages > 10
    assert by_source["books"]["documents_used"] == len(list(books.glob("*.txt"))) > 10
