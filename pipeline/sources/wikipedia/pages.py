"""Page chunks of a MediaWiki XML export -> `WikiPage` articles (namespace 0, not redirects).

Each `<page>` chunk from `pipeline.sources.wikipedia.split` is parsed on its own, so a
malformed page is one bad record. Pages that are not articles (other namespaces, redirects) are
counted (`wiki_pages_skipped.*`), not dropped: they were never documents. `iter_pages` reads a
whole export; `iter_span_pages` reads any run of whole pages, such as the bz2 streams of a
`-multistream` dump, with the dump's `Siteinfo` read once from its header.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from pipeline.sources.documents import REFETCH_OR_SKIP, BadInputError, Tally
from pipeline.sources.streams import decode
from pipeline.sources.wikipedia.split import MAX_PAGE_BYTES, PageSplitter, as_utf8
from pipeline.sources.wikipedia.variants import variant_language

# Namespace prefixes whose links are not prose; a dump's own (localised) names are added. A dump
# names each namespace once, not its aliases: the Chinese and Japanese wikis' aliases for files
# and categories (`[[文件:...]]`, `[[分类:...]]`, `[[画像:...]]`) are listed here.
NON_PROSE_PREFIXES = frozenset({"file", "image", "media", "category"})
NON_PROSE_PREFIXES |= frozenset("文件 档案 檔案 图像 圖像 媒体 媒體".split())
NON_PROSE_PREFIXES |= frozenset("分类 分類 画像 カテゴリ".split())
NON_PROSE_NAMESPACES = (-2, 6, 14)  # Media, File, Category

_NAMESPACE = re.compile(rb'<namespace key="(-?\d+)"[^>]*?(?:/>|>([^<]*)</namespace>)')
_LANGUAGE = re.compile(rb'<mediawiki\b[^>]*?\sxml:lang="([^"]*)"')
_DBNAME = re.compile(rb"<dbname>\s*([A-Za-z0-9_-]+)\s*</dbname>")


@dataclass(frozen=True)
class Siteinfo:
    """What a page needs from its dump's header: namespace names (lower case) by key, whether
    its wiki converts between script variants (`-{ }-` markup, `.variants`), and the wiki's
    database name (`<dbname>enwiki</dbname>`; "" when the export gives none), which makes page
    ids, numbered per wiki, ids of one document among several wikis' dumps."""

    namespaces: tuple[tuple[str, int], ...] = ()
    variants: bool = False
    wiki: str = ""

    @property
    def non_prose_prefixes(self) -> frozenset[str]:
        local = {name for name, key in self.namespaces if key in NON_PROSE_NAMESPACES}
        return NON_PROSE_PREFIXES | local

    def namespace_of(self, title: str) -> int:
        """For exports without <ns> (schema < 0.6): the key of the title's prefix, else 0."""
        prefix, colon, _ = title.partition(":")
        if not colon:
            return 0
        return dict(self.namespaces).get(prefix.strip().lower(), 0)


@dataclass(frozen=True)
class WikiPage:
    """An article as read from the dump, before rendering (small enough to ship between workers)."""

    page_id: str
    title: str
    wikitext: str
    non_prose_prefixes: frozenset[str] = NON_PROSE_PREFIXES
    variants: bool = False  # its wiki converts between script variants (Chinese: `-{ }-`)
    wiki: str = ""  # its wiki's database name (`enwiki`), "" when the export names none
    input_index: int = 0  # its input, in the command's order of them (as a `Document`'s)

    def document_id(self, source: str = "wikipedia") -> str:
        """`wikipedia:enwiki:12`: a page id is unique within its wiki only (page 12 of the
        English and of the German Wikipedia are two articles); `wikipedia:12` for an export
        that does not name its wiki."""
        return f"{source}:{self.wiki}:{self.page_id}" if self.wiki else f"{source}:{self.page_id}"


def parse_siteinfo(header: bytes) -> Siteinfo:
    """Namespace names and the wiki's database name from the bytes before the first <page>
    (the <siteinfo> block), and the export's language (`<mediawiki xml:lang=...>`)."""
    names = []
    for key, name in _NAMESPACE.findall(header):
        if name and name.strip():
            names.append((html.unescape(name.decode("utf-8", "replace")).strip().lower(), int(key)))
    lang = _LANGUAGE.search(header)
    variants = lang is not None and variant_language(lang.group(1).decode("ascii", "replace"))
    dbname = _DBNAME.search(header)
    return Siteinfo(tuple(names), variants, dbname.group(1).decode() if dbname else "")


def parse_page(chunk: bytes, where: str, tally: Tally, site: Siteinfo) -> WikiPage | None:
    """One `<page>` element -> the article it holds, or None (counted) when it is not one."""
    tally.inc("wiki_pages")
    text = decode(chunk, tally)
    try:
        page = ET.fromstring(text)
    except ET.ParseError as e:
        tally.bad("wiki_malformed_page", where, f"malformed <page> XML ({e})")
        return None
    title = page.findtext("title") or ""
    page_id = (page.findtext("id") or "").strip()
    if not page_id.isdigit():
        tally.bad("wiki_malformed_page", where, f"<page> {title!r} has no numeric <id>")
        return None
    ns_text = page.findtext("ns")
    ns = int(ns_text) if ns_text and ns_text.strip().lstrip("-").isdigit() else None
    if (site.namespace_of(title) if ns is None else ns) != 0:
        tally.inc("wiki_pages_skipped.not_article")
        return None
    revisions = page.findall("revision")
    wikitext = (revisions[-1].findtext("text") or "") if revisions else ""
    if page.find("redirect") is not None or wikitext.lstrip()[:9].lower() == "#redirect":
        tally.inc("wiki_pages_skipped.redirect")
        return None
    return WikiPage(page_id, title, wikitext, site.non_prose_prefixes, site.variants, site.wiki)


def iter_pages(
    f: BinaryIO, rel: str, tally: Tally, max_page_bytes: int = MAX_PAGE_BYTES
) -> Iterator[WikiPage]:
    """Articles of a complete MediaWiki XML export, in order.

    The stream must start like an export and end with `</mediawiki>`: a missing end means the
    file was cut short, which some decompressors do not report.
    """
    splitter = PageSplitter(rel, max_page_bytes)
    site = None
    for offset, chunk in splitter.split(as_utf8(f)):
        if site is None:
            site = _check_header(splitter.header, rel)
        page = parse_page(chunk, f"{rel} (byte {offset} of the XML)", tally, site)
        if page is not None:
            yield page
    if not splitter.pages_seen and not splitter.header.strip():
        tally.drop("empty_file")
        return
    if not splitter.pages_seen:
        _check_header(splitter.header, rel)
    if not splitter.closed:
        raise BadInputError(
            f"{rel}: the XML ends before </mediawiki>; the file is truncated. {REFETCH_OR_SKIP}"
        )
    _count_damage(splitter, rel, tally)


def iter_span_pages(
    f: BinaryIO,
    label: str,
    tally: Tally,
    site: Siteinfo,
    stop_at: int | None = None,
    max_page_bytes: int = MAX_PAGE_BYTES,
) -> Iterator[WikiPage]:
    """Articles of a run of pages cut from an export (UTF-8, no header needed): those whose
    `<page>` starts before `stop_at` bytes into `f`, or all of them."""
    splitter = PageSplitter(label, max_page_bytes, keep_header=False)
    for offset, chunk in splitter.split(f):
        if stop_at is not None and offset >= stop_at:
            break
        page = parse_page(chunk, f"{label} (byte {offset} of the span)", tally, site)
        if page is not None:
            yield page
    _count_damage(splitter, label, tally)


def _count_damage(splitter: PageSplitter, label: str, tally: Tally) -> None:
    if splitter.oversized:
        tally.drop("wiki_page_too_long", splitter.oversized)
    if splitter.stray:
        where = f"{label}: {splitter.stray} damaged <page> boundaries"
        tally.bad("wiki_malformed_page", where, "markup outside any page", splitter.stray)


def _check_header(header: bytes, rel: str) -> Siteinfo:
    refuse_non_export(header, rel)
    return parse_siteinfo(header)


def refuse_non_export(header: bytes, rel: str) -> None:
    """`header`, the bytes before an export's first `<page>`, must open `<mediawiki>`."""
    if b"<mediawiki" not in header[:4096]:
        start = header[:60].decode("utf-8", "replace")
        raise BadInputError(
            f"{rel}: not a MediaWiki XML export (it starts with {start!r}); pass the right "
            "--format (FORMAT=text, books or jsonl), or --skip-bad-input to skip such files"
        )
