"""MediaWiki XML exports -> one `Document` per article, in bounded memory.

Reading is split in two so that the costly half can run anywhere:
- `iter_pages` scans the (decompressed) XML byte stream for `<page>...</page>` chunks, never
  holding more than one page, parses each chunk on its own (a malformed page is one bad record,
  not the end of the file) and keeps articles only: namespace 0, not redirects. It works on a
  whole export and on any run of whole pages, such as the bz2 streams of a `-multistream` dump.
- `render_wikitext` turns one article's wikitext into paragraphs of running prose with
  `mwparserfromhell` (a maintained, tested wikitext parser with a C tokenizer, used by Wikimedia
  bots; regex cleaners such as WikiExtractor's leave residue on nested templates and tables).
  It walks the parser's token stream rather than its node tree: the same parse, without the
  tree building that dominates `mwparserfromhell.parse` (about 3x faster, see bench/wiki_bench).
  Templates, infoboxes, tables, references, files and images, categories, interlanguage links,
  comments, headings, lists and preformatted text are dropped; link text is kept; entities are
  decoded. A line that still holds markup after rendering is dropped and counted.

Ids are `wikipedia:<page id>`. Pages that are not articles (other namespaces, redirects) are
counted (`wiki_pages_skipped.*`), not dropped: they were never documents.
"""

from __future__ import annotations

import codecs
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from mwparserfromhell.parser import CTokenizer, tokens
from mwparserfromhell.parser.tokenizer import Tokenizer

from pipeline.boilerplate import PrefixedReader
from pipeline.documents import CHUNK_BYTES, BadInputError, Document, Tally, decode

MAX_PAGE_BYTES = 32 << 20  # articles hold a few MB of wikitext at most; beyond: skipped
MAX_HEADER_BYTES = 4 << 20  # <mediawiki><siteinfo>...; no <page> by then: not an export
PAGE_OPEN, PAGE_CLOSE = b"<page>", b"</page>"
DUMP_CLOSE = b"</mediawiki>"
MAX_GAP_BYTES = 1 << 16  # between pages: whitespace, or the closing tag

# Namespace prefixes whose links are not prose; a dump's own (localised) names are added.
NON_PROSE_PREFIXES = frozenset({"file", "image", "media", "category"})
NON_PROSE_NAMESPACES = (-2, 6, 14)  # Media, File, Category
DROP_TAGS = frozenset(
    "ref references table gallery math chem ce pre nowiki code source syntaxhighlight timeline "
    "imagemap score graph hiero inputbox templatedata categorytree mapframe maplink "
    "noinclude includeonly onlyinclude section".split()
)
LIST_MARKUP = frozenset("*#;:")
LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(-[a-z0-9]{1,8})*|simple")
MIN_WORDS = 4  # shorter paragraphs are kept only when they end like a sentence
SENTENCE_ENDS = tuple(".!?\"'”’…)")
RESIDUE = ("[[", "]]", "{{", "}}", "{|", "|}", "|-", "<ref", "thumb|", "&amp;", "&lt;", "&gt;")
RESIDUE += ("colspan=", "rowspan=", "bgcolor=", 'style="', "class=")

_NAMESPACE = re.compile(rb'<namespace key="(-?\d+)"[^>]*?(?:/>|>([^<]*)</namespace>)')
_MAGIC_WORD = re.compile(r"__[A-Z]{3,}__")
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_APOSTROPHES = re.compile(r"'{2,}")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_OPEN_PAREN_PUNCT = re.compile(r"\(\s*(?:[,;:]\s*)+")
_PUNCT_CLOSE_PAREN = re.compile(r"(?:\s*[,;:])+\s*\)")
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
    return PrefixedReader(first[3:] if first.startswith(codecs.BOM_UTF8) else first, f)


@dataclass
class PageSplitter:
    """Cuts a MediaWiki XML byte stream into `<page>...</page>` chunks, one page in memory.

    Records what lies outside pages: `header` (up to the first page), whether `</mediawiki>`
    closed the stream, and stray markup between pages (a page whose `<page>` tag was damaged).
    """

    name: str  # for messages
    max_page_bytes: int = MAX_PAGE_BYTES
    keep_header: bool = True  # False: a span cut from a file; what precedes its first page is
    # the end of a page that belongs to the previous span
    header: bytes = b""
    closed: bool = False
    pages_seen: int = 0
    oversized: int = 0
    stray: int = 0
    _gap: bytes = b""  # text between two pages, up to MAX_GAP_BYTES

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
                    self._end_gap()
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
            self._end_gap(last=True)

    def _page(self, buf: bytes, start: int, end: int, base: int) -> Iterator[tuple[int, bytes]]:
        # A page whose </page> was lost runs into the next one: split at the inner <page>.
        inner = buf.rfind(PAGE_OPEN, start + len(PAGE_OPEN), end)
        if inner >= 0:
            self.stray += 1
            start = inner
        self.pages_seen += 1
        yield base + start, buf[start:end]

    def _outside(self, data: bytes) -> None:
        if not self.pages_seen and not self.stray:
            if not self.keep_header:
                return
            self.header += data
            if len(self.header) > MAX_HEADER_BYTES:
                raise BadInputError(
                    f"{self.name}: no <page> in the first {MAX_HEADER_BYTES >> 20} MiB; "
                    "this is not a MediaWiki XML export"
                )
        elif data:
            self._gap = (self._gap + data)[-MAX_GAP_BYTES:]

    def _end_gap(self, last: bool = False) -> None:
        """Between pages only whitespace may lie; at the end, `</mediawiki>` too."""
        gap, self._gap = self._gap.strip(), b""
        if last and gap.endswith(DUMP_CLOSE):
            self.closed, gap = True, gap[: -len(DUMP_CLOSE)].strip()
        if gap and (self.pages_seen or self.stray):
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
        raise BadInputError(f"{rel}: the XML ends before </mediawiki>; the file is truncated")
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
    if b"<mediawiki" not in header[:4096]:
        start = header[:60].decode("utf-8", "replace")
        raise BadInputError(f"{rel}: not a MediaWiki XML export (it starts with {start!r})")
    return parse_siteinfo(header)


# ---------------------------------------------------------------- wikitext -> prose

# Inline templates whose output is part of the sentence: name -> positional params kept.
KEEP_TEMPLATES = {"lang": (2,), "nowrap": (1,), "nobr": (1,), "nobreak": (1,), "ill": (1,)}
KEEP_TEMPLATES |= {"mvar": (1,), "var": (1,), "sic": (1,), "not a typo": (1,), "small": (1,)}
CONVERT_TEMPLATES = frozenset({"convert", "cvt"})
RANGE_WORDS = frozenset({"to", "-", "–", "and", "or", "by", "x", "×", "+"})
# Each construct's opening token and the tokens that close it (the stream is balanced).
CLOSERS = {
    tokens.TemplateOpen: (tokens.TemplateOpen, (tokens.TemplateClose,)),
    tokens.ArgumentOpen: (tokens.ArgumentOpen, (tokens.ArgumentClose,)),
    tokens.WikilinkOpen: (tokens.WikilinkOpen, (tokens.WikilinkClose,)),
    tokens.ExternalLinkOpen: (tokens.ExternalLinkOpen, (tokens.ExternalLinkClose,)),
    tokens.HTMLEntityStart: (tokens.HTMLEntityStart, (tokens.HTMLEntityEnd,)),
    tokens.HeadingStart: (tokens.HeadingStart, (tokens.HeadingEnd,)),
    tokens.CommentStart: (tokens.CommentStart, (tokens.CommentEnd,)),
    tokens.TagOpenOpen: (tokens.TagOpenOpen, (tokens.TagCloseSelfclose, tokens.TagCloseClose)),
}


def render_wikitext(wikitext: str, tally: Tally, non_prose=NON_PROSE_PREFIXES) -> list[str]:
    """Paragraphs of running prose, in order (see the module docstring for what is dropped)."""
    stream = (CTokenizer or Tokenizer)().tokenize(wikitext, 0, False)
    return _paragraphs(_Renderer(stream, non_prose).top(), tally)


class _Renderer:
    """Renders mwparserfromhell's token stream (the documented, balanced intermediate form
    its tree builder consumes) straight to text: the same parse at a fraction of the cost of
    building the node tree, which dominates `mwparserfromhell.parse`."""

    def __init__(self, stream: list, non_prose: frozenset[str]):
        self.t, self.i, self.n, self.non_prose = stream, 0, len(stream), non_prose

    def top(self) -> str:
        """The article, line by line: lists, headings, raw tables and preformatted lines out."""
        out: list[str] = []
        state = _Lines()
        while self.i < self.n:
            tok = self.t[self.i]
            kind = type(tok)
            if kind is tokens.Text:
                self.i += 1
                state.text(tok["text"], out)
            elif state.skip or state.table:
                self.skip()
            elif kind is tokens.HeadingStart or (
                kind is tokens.TagOpenOpen and tok.get("wiki_markup") in LIST_MARKUP
            ):
                state.skip = True  # the rest of the line is the heading or the list item
                self.skip()
            else:
                out.append(self.node())
                state.line_start = False
        return "".join(out)

    def seq(self, stops: tuple) -> str:
        """Render until a token of a `stops` type (left unconsumed) or the end."""
        out = []
        while self.i < self.n and not isinstance(self.t[self.i], stops):
            out.append(self.node())
        return "".join(out)

    def node(self) -> str:
        tok = self.t[self.i]
        self.i += 1
        kind = type(tok)
        if kind is tokens.Text:
            return tok["text"]
        handler = _HANDLERS.get(kind)
        if handler is None:
            return ""  # a stray separator or close: nothing to show
        return handler(self, tok)

    def take(self, kind: type) -> bool:
        if self.i < self.n and isinstance(self.t[self.i], kind):
            self.i += 1
            return True
        return False

    def skip(self, depth: int = 0, opener: type | None = None) -> None:
        """Consume one whole construct (depth 0), or the rest of the one `opener` began."""
        if opener is None:
            opener = type(self.t[self.i])
            if opener not in CLOSERS:
                self.i += 1
                return
        open_kind, closers = CLOSERS[opener]
        while self.i < self.n:
            tok = self.t[self.i]
            self.i += 1
            if isinstance(tok, open_kind):
                depth += 1
            elif isinstance(tok, closers):
                depth -= 1
                if depth <= 0:
                    return

    def template(self, tok) -> str:
        name = self.seq((tokens.TemplateParamSeparator, tokens.TemplateClose))
        name = name.strip().lower().replace("_", " ")
        if name not in KEEP_TEMPLATES and name not in CONVERT_TEMPLATES:
            self.skip(1, tokens.TemplateOpen)
            return ""
        positional = []
        stops = (tokens.TemplateParamSeparator, tokens.TemplateParamEquals, tokens.TemplateClose)
        while self.take(tokens.TemplateParamSeparator):
            value = self.seq(stops)
            if self.take(tokens.TemplateParamEquals):  # a named parameter: not shown
                self.seq(stops[::2])
            else:
                positional.append(value.strip())
        self.take(tokens.TemplateClose)
        return _template_text(name, positional)

    def wikilink(self, tok) -> str:
        title = self.seq((tokens.WikilinkSeparator, tokens.WikilinkClose)).strip()
        if _link_dropped(title, self.non_prose, self.i < self.n and self._is_sep()):
            self.skip(1, tokens.WikilinkOpen)
            return ""
        text = self.seq((tokens.WikilinkClose,)) if self.take(tokens.WikilinkSeparator) else None
        self.take(tokens.WikilinkClose)
        return _link_text(title, text)

    def _is_sep(self) -> bool:
        return isinstance(self.t[self.i], tokens.WikilinkSeparator)

    def external_link(self, tok) -> str:
        self.seq((tokens.ExternalLinkSeparator, tokens.ExternalLinkClose))  # the URL: not prose
        has_title = self.take(tokens.ExternalLinkSeparator)
        title = self.seq((tokens.ExternalLinkClose,)) if has_title else ""
        self.take(tokens.ExternalLinkClose)
        return title

    def entity(self, tok) -> str:
        parts = ["&"]
        while self.i < self.n and not isinstance(self.t[self.i], tokens.HTMLEntityEnd):
            part = self.t[self.i]
            self.i += 1
            if isinstance(part, tokens.Text):
                parts.append(part["text"])
            else:
                parts.append("x" if isinstance(part, tokens.HTMLEntityHex) else "#")
        self.i += 1
        return html.unescape("".join(parts) + ";")

    def tag(self, tok) -> str:
        markup = tok.get("wiki_markup")
        name = self.seq((tokens.TagAttrStart, tokens.TagCloseOpen, tokens.TagCloseSelfclose))
        name = name.strip().lower()
        self.seq((tokens.TagCloseOpen, tokens.TagCloseSelfclose))  # attributes: not prose
        if self.take(tokens.TagCloseSelfclose) or self.i >= self.n:
            return " " if name == "br" else ""
        self.i += 1  # TagCloseOpen
        if name in DROP_TAGS or markup == "{|":
            self.skip(1, tokens.TagOpenOpen)
            return ""
        contents = self.seq((tokens.TagOpenClose,))
        self._close_tag()
        return contents

    def _close_tag(self) -> None:
        while self.i < self.n and not isinstance(self.t[self.i], tokens.TagCloseClose):
            self.i += 1
        self.i += 1

    def skipped(self, tok) -> str:
        self.skip(1, type(tok))
        return ""


_HANDLERS = {
    tokens.TemplateOpen: _Renderer.template,
    tokens.WikilinkOpen: _Renderer.wikilink,
    tokens.ExternalLinkOpen: _Renderer.external_link,
    tokens.HTMLEntityStart: _Renderer.entity,
    tokens.TagOpenOpen: _Renderer.tag,
    tokens.ArgumentOpen: _Renderer.skipped,
    tokens.HeadingStart: _Renderer.skipped,
    tokens.CommentStart: _Renderer.skipped,
}


@dataclass
class _Lines:
    """Where the top level stands in the source's lines."""

    line_start: bool = True
    skip: bool = False  # the rest of this line is dropped (list item, heading, code)
    table: int = 0  # depth of `{|` tables the tokenizer left as plain text

    def text(self, value: str, out: list[str]) -> None:
        for k, part in enumerate(value.split("\n")):
            if k:
                out.append("\n")
                self.line_start, self.skip = True, False
            if self.line_start:
                head = part.lstrip()
                if head.startswith("{|"):
                    self.table += 1
                elif self.table and head.startswith("|}"):
                    self.table -= 1
                    self.skip = True
                elif part[:1] == " " and head:
                    self.skip = True  # a line opened by a space is preformatted text
            if not self.skip and not self.table:
                out.append(part)
            if part:
                self.line_start = False


def _link_dropped(title: str, non_prose: frozenset[str], has_text: bool) -> bool:
    """Files, images, categories and interlanguage links are not part of the text."""
    if title.startswith(":"):
        return False  # [[:Category:X]] is a link shown in the text
    prefix, colon, _ = title.partition(":")
    if not colon:
        return False
    prefix = prefix.strip().lower()
    return prefix in non_prose or (not has_text and bool(LANGUAGE_PREFIX.fullmatch(prefix)))


def _link_text(title: str, text: str | None) -> str:
    if text is not None and text.strip():
        return text
    title = title.lstrip(":").strip().replace("_", " ")
    if text is not None:  # the pipe trick: [[Paris (France)|]] shows "Paris"
        title = re.sub(r"\s*\(.*\)$", "", title.partition(":")[2] or title)
    return title.split("#", 1)[0] or title.lstrip("#")


def _template_text(name: str, positional: list[str]) -> str:
    if name in CONVERT_TEMPLATES:
        n = 4 if len(positional) >= 4 and positional[1] in RANGE_WORDS else 2
        return " ".join(positional[:n]) if len(positional) >= 2 else ""
    keep = KEEP_TEMPLATES[name]
    if len(positional) < max(keep):
        return ""
    return " ".join(positional[i - 1] for i in keep)


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
        if line and (line.startswith(("|", "!")) or any(token in line for token in RESIDUE)):
            tally.inc("wiki_lines_dropped.markup_residue")
            line = ""
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    kept = [p for p in paragraphs if _is_prose(p)]
    tally.inc("wiki_paragraphs_dropped.fragment", len(paragraphs) - len(kept))
    return kept


def _is_prose(paragraph: str) -> bool:
    """Not a caption, label or leftover: a few words, or a sentence's end."""
    if not any(c.isalpha() for c in paragraph):
        return False
    return paragraph.count(" ") >= MIN_WORDS - 1 or paragraph.endswith(SENTENCE_ENDS)


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
