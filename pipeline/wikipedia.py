"""MediaWiki XML exports -> one `Document` per article, in bounded memory.

Reading is split in two so that the costly half can run anywhere:
- `iter_pages` scans the (decompressed) XML byte stream for `<page>...</page>` chunks, never
  holding more than one page, parses each chunk on its own (a malformed page is one bad record,
  not the end of the file) and keeps articles only: namespace 0, not redirects. It works on a
  whole export and on any run of whole pages, such as the bz2 streams of a `-multistream` dump.
- `render_wikitext` turns one article's wikitext into paragraphs of running prose with
  `mwparserfromhell` (a maintained, tested wikitext parser with a C tokenizer, used by Wikimedia
  bots; regex cleaners such as WikiExtractor's leave residue on nested templates and tables).
  Templates, infoboxes, tables, references, files and images, categories, interlanguage links,
  comments, headings, lists and preformatted text are dropped; link text is kept; entities are
  decoded. A line that still holds markup after rendering is dropped and counted.
"""

from __future__ import annotations

import codecs
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import mwparserfromhell
from mwparserfromhell.nodes import (
    Comment,
    ExternalLink,
    Heading,
    HTMLEntity,
    Tag,
    Template,
    Text,
    Wikilink,
)

from pipeline.documents import CHUNK_BYTES, BadInputError, Document, Tally, decode

MAX_PAGE_BYTES = 32 << 20  # the largest enwiki article is ~1.5 MB of wikitext; beyond: skipped
MAX_HEADER_BYTES = 4 << 20  # <mediawiki><siteinfo>...; no <page> by then: not an export
PAGE_OPEN, PAGE_CLOSE = b"<page>", b"</page>"
DUMP_CLOSE = b"</mediawiki>"

# Namespace prefixes whose links are not prose; a dump's own (localised) names are added.
NON_PROSE_PREFIXES = frozenset({"file", "image", "media", "category"})
NON_PROSE_NAMESPACES = (-2, 6, 14)  # Media, File, Category
DROP_TAGS = frozenset(
    "ref references table gallery math chem ce pre nowiki code source syntaxhighlight timeline "
    "imagemap score graph hiero inputbox templatedata categorytree mapframe maplink poem "
    "blockquote sup sub hr noinclude includeonly onlyinclude section".split()
)
LIST_MARKUP = frozenset("*#;:")
LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(-[a-z0-9]{2,8})*|simple")
RESIDUE = ("[[", "]]", "{{", "}}", "{|", "|}", "<ref", "thumb|", "&amp;", "&lt;", "&gt;")

_NAMESPACE = re.compile(rb'<namespace key="(-?\d+)"[^>]*?(?:/>|>([^<]*)</namespace>)')
_MAGIC_WORD = re.compile(r"__[A-Z]{3,}__")
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_APOSTROPHES = re.compile(r"'{2,}")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_OPEN_PAREN_PUNCT = re.compile(r"\(\s*[,;:]\s*")
_PUNCT_CLOSE_PAREN = re.compile(r"\s*[,;:]\s*\)")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?)])")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Siteinfo:
    """What a page needs from its dump's header: namespace names (lower case) by key."""

    namespaces: tuple[tuple[str, int], ...] = ()

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


def parse_siteinfo(header: bytes) -> Siteinfo:
    """Namespace names from the bytes before the first <page> (the <siteinfo> block)."""
    names = []
    for key, name in _NAMESPACE.findall(header):
        if name and name.strip():
            names.append((html.unescape(name.decode("utf-8", "replace")).strip().lower(), int(key)))
    return Siteinfo(tuple(names))


# ---------------------------------------------------------------- byte stream -> page chunks


class Utf16ToUtf8:
    """A UTF-16 export (BOM first) read as UTF-8 bytes, chunk by chunk."""

    def __init__(self, f: BinaryIO, first: bytes):
        self._f = f
        self._decoder = codecs.getincrementaldecoder("utf-16")()
        self._first = first

    def read(self, n: int = CHUNK_BYTES) -> bytes:
        while True:
            raw = self._first + self._f.read(n)
            self._first = b""
            text = self._decoder.decode(raw, final=not raw)
            if text or not raw:  # an odd byte count can decode to nothing yet: read on
                return text.encode("utf-8")


def as_utf8(f: BinaryIO) -> BinaryIO:
    """The stream itself, or a transcoding view when it starts with a UTF-16 byte order mark."""
    first = f.read(4)
    if first[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return Utf16ToUtf8(f, first)
    return _Prefixed(first[3:] if first.startswith(codecs.BOM_UTF8) else first, f)


class _Prefixed:
    """`head` then the rest of `f` (lets a caller peek at the first bytes of a stream)."""

    def __init__(self, head: bytes, f: BinaryIO):
        self._head, self._f = head, f

    def read(self, n: int = CHUNK_BYTES) -> bytes:
        if self._head:
            out, self._head = self._head, b""
            return out + self._f.read(max(0, n - len(out)))
        return self._f.read(n)


@dataclass
class PageSplitter:
    """Cuts a MediaWiki XML byte stream into `<page>...</page>` chunks, one page in memory.

    Records what lies outside pages: `header` (up to the first page), whether `</mediawiki>`
    closed the stream, and stray markup between pages (a page whose `<page>` tag was damaged).
    """

    max_page_bytes: int = MAX_PAGE_BYTES
    header: bytes = b""
    closed: bool = False
    pages_seen: int = 0
    oversized: int = 0
    stray: int = 0

    def split(self, f: BinaryIO) -> Iterator[tuple[int, bytes]]:
        """(offset in the stream, page bytes) for every page, in order."""
        buf, base, pos, start = b"", 0, 0, -1  # start: offset in buf of the open page, or -1
        skipping = False
        while chunk := f.read(CHUNK_BYTES):
            keep = start if start >= 0 else pos
            buf, base, pos = buf[keep:] + chunk, base + keep, pos - keep
            start = 0 if start >= 0 else -1
            while True:
                if start < 0:
                    i = buf.find(PAGE_OPEN, pos)
                    if i < 0:
                        cut = max(pos, len(buf) - len(PAGE_OPEN) + 1)
                        self._outside(buf[pos:cut])
                        pos = cut
                        break
                    self._outside(buf[pos:i])
                    start, pos = i, i + len(PAGE_OPEN)
                j = buf.find(PAGE_CLOSE, pos)
                if j < 0:
                    if not skipping and len(buf) - start > self.max_page_bytes:
                        skipping, self.oversized = True, self.oversized + 1
                    if skipping:  # forget the page body, keep what may begin `</page>`
                        start = max(start, len(buf) - len(PAGE_CLOSE) + 1)
                    pos = max(pos, len(buf) - len(PAGE_CLOSE) + 1)
                    break
                end = j + len(PAGE_CLOSE)
                if not skipping:
                    yield from self._page(buf, start, end, base)
                skipping, start, pos = False, -1, end
        if start >= 0:
            self.stray += 1  # the stream ended inside a page
        else:
            self._outside(buf[pos:])

    def _page(self, buf: bytes, start: int, end: int, base: int) -> Iterator[tuple[int, bytes]]:
        # A page whose </page> was lost runs into the next one: split at the inner <page>.
        inner = buf.rfind(PAGE_OPEN, start + len(PAGE_OPEN), end)
        if inner >= 0:
            self.stray += 1
            start = inner
        self.pages_seen += 1
        yield base + start, buf[start:end]

    def _outside(self, data: bytes) -> None:
        if not data:
            return
        if self.pages_seen == 0 and not self.stray:
            if len(self.header) < MAX_HEADER_BYTES:
                self.header += data[: MAX_HEADER_BYTES - len(self.header)]
            return
        rest = data.strip()
        if rest.endswith(DUMP_CLOSE):
            self.closed = True
            rest = rest[: -len(DUMP_CLOSE)].strip()
        if rest:
            self.stray += 1


# ---------------------------------------------------------------- page chunk -> article


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
    return WikiPage(page_id, title, wikitext, site.non_prose_prefixes)


def iter_pages(
    f: BinaryIO,
    rel: str,
    tally: Tally,
    site: Siteinfo | None = None,
    whole_file: bool = True,
    max_page_bytes: int = MAX_PAGE_BYTES,
) -> Iterator[WikiPage]:
    """Articles of a MediaWiki XML stream, in order.

    With `whole_file`, the stream must be a complete export: it must start like one and end
    with `</mediawiki>` (a missing end means the file was cut short, which decompressors do
    not always report). `site` defaults to the stream's own header.
    """
    splitter = PageSplitter(max_page_bytes)
    for offset, chunk in splitter.split(as_utf8(f) if whole_file else f):
        if site is None:
            site = _check_header(splitter.header, rel, whole_file)
        page = parse_page(chunk, f"{rel} (byte {offset} of the XML)", tally, site)
        if page is not None:
            yield page
    if splitter.oversized:
        tally.drop("wiki_page_too_long", splitter.oversized)
    if splitter.stray:
        where = f"{rel}: {splitter.stray} damaged <page> boundaries"
        tally.bad("wiki_malformed_page", where, "markup outside any page", splitter.stray)
    if whole_file:
        if not splitter.pages_seen:
            _check_header(splitter.header, rel, whole_file)
        if not splitter.closed:
            raise BadInputError(f"{rel}: the XML ends before </mediawiki>; the file is truncated")


def _check_header(header: bytes, rel: str, whole_file: bool) -> Siteinfo:
    if whole_file and b"<mediawiki" not in header[:4096]:
        start = header[:60].decode("utf-8", "replace")
        raise BadInputError(f"{rel}: not a MediaWiki XML export (it starts with {start!r})")
    return parse_siteinfo(header)


# ---------------------------------------------------------------- wikitext -> prose


def render_wikitext(wikitext: str, tally: Tally, non_prose=NON_PROSE_PREFIXES) -> list[str]:
    """Paragraphs of running prose, in order (see the module docstring for what is dropped)."""
    code = mwparserfromhell.parse(wikitext)
    pieces: list[str] = []
    line_start, skip_line = True, False
    for node in code.nodes:
        if isinstance(node, Text):
            line_start, skip_line = _top_text(node.value, pieces, line_start, skip_line)
            continue
        if skip_line:
            continue
        if isinstance(node, Heading) or (isinstance(node, Tag) and node.wiki_markup in LIST_MARKUP):
            skip_line = True  # the rest of the line is the heading or list item
        else:
            pieces.append(_inline(node, non_prose))
        line_start = False
    return _paragraphs("".join(pieces), tally)


def _top_text(value: str, pieces: list[str], line_start: bool, skip: bool) -> tuple[bool, bool]:
    """Top-level text, line by line: a line opened by a space is preformatted (code), dropped."""
    for k, part in enumerate(value.split("\n")):
        if k:
            pieces.append("\n")
            line_start, skip = True, False
        if line_start and part[:1] == " " and part.strip():
            skip = True
        if not skip:
            pieces.append(part)
        if part:
            line_start = False
    return line_start, skip


def _inline(node, non_prose) -> str:
    if isinstance(node, Text):
        return node.value
    if isinstance(node, Wikilink):
        return _link(node, non_prose)
    if isinstance(node, ExternalLink):
        return _render(node.title, non_prose) if node.title is not None else ""
    if isinstance(node, HTMLEntity):
        return node.normalize()
    if isinstance(node, Tag):
        name = str(node.tag).strip().lower()
        if name in DROP_TAGS or node.wiki_markup == "{|":
            return ""
        if name == "br":
            return " "
        return _render(node.contents, non_prose) if node.contents is not None else ""
    if isinstance(node, Template):
        return _template(node, non_prose)
    if isinstance(node, (Comment, Heading)):
        return ""
    return ""  # arguments ({{{1}}}) and anything newer: not prose


def _render(code, non_prose) -> str:
    return "".join(_inline(n, non_prose) for n in code.nodes)


def _link(node: Wikilink, non_prose) -> str:
    title = str(node.title).strip().replace("_", " ")
    visible = title.startswith(":")  # [[:Category:X]] is a link shown in the text
    title = title.lstrip(":").strip()
    prefix, colon, rest = title.partition(":")
    prefix = prefix.strip().lower()
    if colon and not visible:
        if prefix in non_prose:
            return ""
        if node.text is None and LANGUAGE_PREFIX.fullmatch(prefix):
            return ""  # interlanguage link
    if node.text is not None:
        text = _render(node.text, non_prose)
        if text.strip():
            return text
        title = re.sub(r"\s*\(.*\)$", "", rest if colon else title)  # the pipe trick
    return title.split("#", 1)[0] or title.lstrip("#")


# Inline templates whose output is part of the sentence: name -> positional params kept.
KEEP_TEMPLATES = {"lang": (2,), "nowrap": (1,), "nobr": (1,), "nobreak": (1,), "ill": (1,)}
KEEP_TEMPLATES |= {"mvar": (1,), "var": (1,), "sic": (1,), "not a typo": (1,), "small": (1,)}
RANGE_WORDS = frozenset({"to", "-", "–", "and", "or", "by", "x", "×", "+"})


def _template(node: Template, non_prose) -> str:
    name = str(node.name).strip().lower().replace("_", " ")
    positional = [p.value for p in node.params if not p.showkey]
    if name in ("convert", "cvt") and len(positional) >= 2:
        values = [_render(v, non_prose).strip() for v in positional[:4]]
        n = 4 if len(values) == 4 and values[1] in RANGE_WORDS else 2
        return " ".join(values[:n])
    keep = KEEP_TEMPLATES.get(name)
    if not keep or len(positional) < max(keep):
        return ""
    return " ".join(_render(positional[i - 1], non_prose).strip() for i in keep)


def clean_line(line: str) -> str:
    """Rendered text of one line -> prose: leftover tags, quote marks, empty brackets, spaces."""
    line = _MAGIC_WORD.sub("", line)
    line = _HTML_TAG.sub("", line)
    line = _APOSTROPHES.sub("", line)
    line = _EMPTY_PARENS.sub("", line)
    line = _OPEN_PAREN_PUNCT.sub("(", line)
    line = _PUNCT_CLOSE_PAREN.sub(")", line)
    line = _SPACES.sub(" ", line).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", line)


def _paragraphs(text: str, tally: Tally) -> list[str]:
    """Blank-line separated blocks, their lines joined (a single newline is a soft break)."""
    paragraphs: list[str] = []
    current: list[str] = []
    for raw in text.split("\n"):
        line = clean_line(raw)
        if line and any(token in line for token in RESIDUE):
            tally.inc("wiki_lines_dropped.markup_residue")
            line = ""
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return [p for p in paragraphs if any(c.isalpha() for c in p)]


def page_document(page: WikiPage, tally: Tally, source: str = "wikipedia") -> Document | None:
    """Render one article; None (counted) when no prose is left or the renderer fails."""
    try:
        paragraphs = render_wikitext(page.wikitext, tally, page.non_prose_prefixes)
    except (RecursionError, ValueError, TypeError):  # the parser's own limits, never seen so far
        tally.drop("wiki_render_error")
        return None
    if not paragraphs:
        tally.drop("wiki_no_prose")
        return None
    return Document(f"{source}:{page.page_id}", source, tuple(paragraphs))


def read_wikipedia(
    f: BinaryIO, rel: str, tally: Tally, source: str = "wikipedia"
) -> Iterator[Document]:
    """A whole MediaWiki XML export (`.xml`, or `.xml.bz2` decompressed by the caller)."""
    for page in iter_pages(f, rel, tally):
        doc = page_document(page, tally, source)
        if doc is not None:
            yield doc
