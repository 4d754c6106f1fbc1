"""Wikipedia in Chinese and Japanese: `-{ }-` conversion markup rendered as a reader of the
simplified variant sees it on the wikis that convert (by the export's `xml:lang`), and left as
text elsewhere, in the dump and in WikiExtractor's output of it (by its blocks' url); the Chinese
and Japanese names of files and categories dropped as the English ones are; paragraphs that end
like a Chinese or Japanese sentence kept as prose."""

from __future__ import annotations

import html
import io
import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.files.chunks import read_documents, read_table, write_documents, write_table
from pipeline.shell.cli import main
from pipeline.sources.documents import Tally
from pipeline.sources.readers import READERS
from pipeline.sources.wikipedia.pages import WikiPage, parse_siteinfo
from pipeline.sources.wikipedia.variants import converted

ARTICLE = """'''计算机'''（-{zh-hans:计算机;zh-hant:電腦}-）是一种利用[[电子学]]原理的设备。\
它可以进行-{A|zh-cn:软件;zh-tw:軟體}-计算。[[文件:X.jpg|thumb|一张图的说明]]

第二段有-{R|中文}-内容，也有{{lang|en|English}}。另有-{H|zh-cn:打印机;zh-tw:印表機}-规则。

[[File:Y.png|thumb|另一张图的说明]]
[[分类:计算机]]
[[Category:设备]]"""


@pytest.mark.parametrize(
    "markup, shown",
    [
        ("a-{zh-hans:计算机;zh-hant:電腦}-b", "a计算机b"),
        ("-{zh-hant:電腦; zh-hans:电脑;}-", "电脑"),  # the preferred variant, wherever it stands
        ("-{zh-tw:臺灣;zh-hk:台灣}-", "臺灣"),  # none preferred named: the first
        ("-{A|zh-cn:软件;zh-tw:軟體}-", "软件"),
        ("-{R|zh-cn:原样}-", "zh-cn:原样"),
        ("-{简单}-", "简单"),
        ("-{H|zh-cn:打印机;zh-tw:印表機}-x", "x"),
        ("-{T|zh-cn:标题;zh-tw:標題}-", ""),
        ("-{-|zh-cn:规则}-", ""),
        ("-{zh-hans;zh-hant|只给这两种}-", "只给这两种"),
        ("-{[[链接|文本]]}-", "[[链接|文本]]"),  # a link's bar is not a flag's
        ("x -{a -{zh-hans:内;zh-hant:內}- b}- y", "x a 内 b y"),
        ("-{sr-ec:Београд;sr-el:Beograd}-", "Београд"),
        ("5-{{convert|1|km}}-{a}-", "5-{{convert|1|km}}a"),  # `-{{` opens a template
        ("-{a;b}-", "a;b"),
    ],
)
def test_conversion_markup_shows_what_the_simplified_reader_sees(markup, shown):
    assert converted(markup) == shown


def zh_export(text: str, lang: str) -> bytes:
    """One article in an export of the `lang` wiki, laid out line by line as a real dump is
    (which WikiExtractor needs), its namespaces named as the Chinese wiki's dump names them."""
    header = (
        f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" xml:lang="{lang}">\n'
        f"  <siteinfo>\n    <base>https://{lang}.wikipedia.org/wiki/Main</base>\n"
        "    <namespaces>\n"
        + "".join(
            f'      <namespace key="{key}" case="first-letter">{name}</namespace>\n'
            for key, name in ((6, "File"), (10, "Template"), (14, "Category"))
        )
        + "    </namespaces>\n  </siteinfo>\n"
    )
    page = (
        "  <page>\n    <title>计算机</title>\n    <ns>0</ns>\n    <id>7</id>\n"
        '    <revision>\n      <id>70</id>\n      <text xml:space="preserve">'
        f"{html.escape(text, quote=False)}</text>\n    </revision>\n  </page>\n"
    )
    return (header + page + "</mediawiki>\n").encode()


@pytest.mark.parametrize("lang, variants", [("zh", True), ("sr", True), ("en", False)])
def test_the_exports_language_says_whether_its_wiki_converts(lang, variants):
    assert parse_siteinfo(zh_export("", lang)).variants is variants
    assert parse_siteinfo(zh_export("", "zh-classical")).variants is False


def read(data: bytes) -> list[str]:
    [doc] = READERS["wikipedia"](io.BytesIO(data), "zhwiki.xml", Tally(), "wikipedia")
    return list(doc.paragraphs)


SIMPLIFIED = "计算机（计算机）是一种利用电子学原理的设备。它可以进行软件计算。"


def test_a_chinese_article_reads_as_its_simplified_prose():
    assert read(zh_export(ARTICLE, "zh")) == [
        SIMPLIFIED,
        "第二段有中文内容，也有English。另有规则。",
    ]
    # on a wiki without variants `-{` is text, as MediaWiki shows it there
    assert "-{zh-hans:计算机;zh-hant:電腦}-" in read(zh_export(ARTICLE, "en"))[0]


def test_a_chunk_keeps_whether_a_page_converts(tmp_path):
    pages = [WikiPage("1", "", "-{a}-", frozenset({"file"}), v) for v in (True, False)]
    write_documents(str(tmp_path / "c.arrow"), pages)
    assert [p.variants for p in read_documents(str(tmp_path / "c.arrow"))] == [True, False]
    # a chunk an earlier version wrote (an interrupted build resumed) has no such column
    older = read_table(str(tmp_path / "c.arrow")).drop_columns(["variants"])
    write_table(str(tmp_path / "old.arrow"), older)
    assert [p.variants for p in read_documents(str(tmp_path / "old.arrow"))] == [False, False]


def test_a_build_of_a_chinese_dump_trains_on_one_variant(tmp_path):
    """Through the build's chunk files, with --cjk-sentences: the traditional variant's
    characters (only in the rules) never reach the vocab; in an export without variants they
    do, with the markup's letters."""
    vocabs = {}
    for lang in ("zh", "en"):
        (tmp_path / lang).mkdir()
        (tmp_path / lang / "wiki.xml").write_bytes(zh_export(ARTICLE, lang))
        out = str(tmp_path / f"out-{lang}")
        argv = ["build", "--input", f"wikipedia:{tmp_path / lang}", "--out", out]
        assert main([*argv, "--workers", "1", "--cjk-sentences", "--vocab-size", "200"]) == 0
        vocabs[lang] = set((tmp_path / f"out-{lang}" / "vocab.txt").read_text().split("\n"))
    assert not {"電", "軟", "體", "印", "表"} & vocabs["zh"] and "计" in vocabs["zh"]
    assert {"電", "軟", "體"} <= vocabs["en"] and "h" in vocabs["en"]


def test_wikiextractors_output_of_a_chinese_dump_is_rendered_as_the_dump_is(tmp_path):
    """WikiExtractor leaves the conversion markup in its text; its block's url names the wiki.
    (It drops `{{lang|en|English}}`, which the wikipedia format keeps.)"""
    pytest.importorskip("wikiextractor")
    texts = {}
    for lang in ("zh", "en"):
        (tmp_path / f"{lang}.xml").write_bytes(zh_export(ARTICLE, lang))
        cmd = [sys.executable, "-m", "wikiextractor.WikiExtractor", str(tmp_path / f"{lang}.xml")]
        cmd += ["-o", str(tmp_path / lang), "-q", "--processes", "1"]
        subprocess.run(cmd, check=True, capture_output=True)
        data = (tmp_path / lang / "AA" / "wiki_00").read_bytes()
        assert b"-{zh-hans:" in data and f'url="https://{lang}.wikipedia.org/'.encode() in data
        [doc] = READERS["wikiextractor"](io.BytesIO(data), "wiki_00", Tally(), "wikiextractor")
        texts[lang] = list(doc.paragraphs)
    assert texts["zh"] == [SIMPLIFIED, "第二段有中文内容，也有。另有规则。"]
    assert "-{zh-hans:计算机;zh-hant:電腦}-" in texts["en"][0]


@settings(max_examples=300, deadline=None)
@given(st.text("-{}|;:=>zhansA Hx電脑", max_size=40))
@example("-{-{a}-}-")
def test_any_text_renders_to_a_text_without_markup_left_to_render(text):
    """No text raises, and what is rendered holds no markup a second pass would render (short
    texts nest less deep than `MAX_DEPTH`); without `-{` a text is itself."""
    once = converted(text)
    assert converted(once) == once and len(once) <= len(text)
    if "-{" not in text:
        assert once == text
