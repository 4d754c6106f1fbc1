"""One article's wikitext -> running text, by walking mwparserfromhell's token stream.

`mwparserfromhell` is a maintained, tested wikitext parser with a C tokenizer, used by
Wikimedia bots; regex cleaners such as WikiExtractor's leave residue on nested templates and
tables. The renderer walks the parser's token stream rather than its node tree: the same parse,
without the tree building that dominates `mwparserfromhell.parse` (faster: docs/benchmarks.md,
Wikipedia reader). Templates, infoboxes, tables, references, files and images, categories,
interlanguage links, comments, headings, lists and preformatted text are dropped; link text
and a few inline templates are kept; entities are decoded. `pipeline.sources.wikipedia.prose`
then cuts the text into paragraphs of prose. On a wiki with script variants, the conversion
markup `-{ }-` is rendered first (`pipeline.sources.wikipedia.variants`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from mwparserfromhell.parser import CTokenizer, tokens
from mwparserfromhell.parser.tokenizer import Tokenizer

from pipeline.sources.documents import Tally
from pipeline.sources.wikipedia.pages import NON_PROSE_PREFIXES
from pipeline.sources.wikipedia.prose import prose_paragraphs
from pipeline.sources.wikipedia.variants import converted

DROP_TAGS = frozenset(
    "ref references table gallery math chem ce pre nowiki code source syntaxhighlight timeline "
    "imagemap score graph hiero inputbox templatedata categorytree mapframe maplink "
    "noinclude includeonly onlyinclude section".split()
)
LIST_MARKUP = frozenset("*#;:")
LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(-[a-z0-9]{1,8})*|simple")

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


# A reference with its text on one line, `<ref ...>text</ref>`, no tag inside, followed by the end
# of a word (a space, punctuation that ends a sentence or a clause, a quote, the next tag) or of
# the text.
_REFERENCE = re.compile(
    r"<ref(?:[^\S\n][^<>\n]*)?(?<!/)>([^<>\n]*)</ref[^\S\n]*>(?=[\s.,:!?)\"<]|\Z)", re.I
)
_PAIRS = (("{{", "}}"), ("[[", "]]"), ("{", "}"), ("[", "]"))
_QUOTES = re.compile("''+")  # a run of quotes: italic, bold or both
_LINE_MARKUP = " \t*#:;=-"  # what begins a list, an indented line, a heading or a rule
_UPPER_REF = re.compile(r"</?(?!ref)(?i:ref)")  # a reference's tag not in lower case
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_BRACKETS = ("[", "]")
_BRACES = ("{", "}")


# The last place on the line of each mark, by the name `_LinePrefix` keeps it under.
_LAST_SEEN = (
    ("lt", "<"),
    ("gt", ">"),
    ("ref_open", "<ref"),
    ("ref_close", "</ref"),
    ("self_close", "/>"),
    ("url", "://"),
    ("space", " "),
)


class _LinePrefix:
    """What the text before each reference holds on its line, brought up to date from one
    reference to the next (`advance`), so that the text is read once however many references
    a line holds."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0
        # where the marks are sought: tags' names in any case, as the tokenizer reads them
        # (ASCII letters only, so that every place stays where it is)
        self.marks = text.translate(_ASCII_LOWER) if _UPPER_REF.search(text) else text
        self._new_line()

    def _new_line(self) -> None:
        self.words = False  # anything besides a list's, a heading's or a rule's markup
        # opened and not closed since the line began; -1 once one closed what the line did not
        # open, which an earlier line did: the rest of the line may be inside it
        self.brackets = self.braces = 0
        self.quotes = 0  # runs of "''" (a run of three counts one, of five two)
        self.lt = self.gt = self.ref_open = self.ref_close = self.self_close = -1
        self.url = self.space = -1

    def advance(self, end: int) -> None:
        """Take in the text from where the last call stopped to `end` (the next reference)."""
        s, start = self.text, self.pos
        newline = s.rfind("\n", start, end)
        if newline >= 0:
            self._new_line()
            start = newline + 1
        if not self.words and s[start:end].strip(_LINE_MARKUP):
            self.words = True
        if self.brackets >= 0:
            self.brackets = _open_after(self.brackets, s, start, end, _BRACKETS)
        if self.braces >= 0:
            self.braces = _open_after(self.braces, s, start, end, _BRACES)
        self.quotes += s.count("''", start, end)
        for name, mark in _LAST_SEEN:
            found = self.marks.rfind(mark, start, end)
            if found >= 0:
                setattr(self, name, found)
        self.pos = end

    def cut(self, m: re.Match) -> str:
        """Nothing where the reference `m` renders to nothing wherever it stands, else `m`."""
        text = m.group(1)
        if not _paired(text):
            return m.group(0)  # its brackets or braces may close something outside it
        if "''" in text:
            runs = _QUOTES.findall(text)
            if len(runs) % 2 or runs[::2] != runs[1::2]:
                return m.group(0)  # its italic or bold may run on past it
        self.advance(m.start())
        if not self.words:
            return m.group(0)  # the line's markup (a list, a heading, a leading space) changes
        if self.url > self.space:
            return m.group(0)  # it ends a bare URL, which would run on into what follows
        if self.brackets or self.braces:
            return m.group(0)  # inside a link, a template or an external link begun on its line
        if self.lt > self.gt:
            return m.group(0)  # inside a tag's attributes
        if self.ref_open > max(self.ref_close, self.self_close):
            return m.group(0)  # after a reference left open, which its `</ref>` may be closing
        if self.quotes % 2:
            return m.group(0)  # inside italic or bold
        return ""


def _paired(text: str) -> bool:
    """Its brackets and braces pair up, in order, and its `{{`, `}}`, `[[` and `]]` too."""
    if "]" not in text and "}" not in text:
        return "[" not in text and "{" not in text
    if any(text.count(a) != text.count(b) for a, b in _PAIRS):
        return False
    return not (
        _open_after(0, text, 0, len(text), _BRACKETS) or _open_after(0, text, 0, len(text), _BRACES)
    )


def _open_after(depth: int, text: str, start: int, end: int, kind: tuple) -> int:
    """How many of `kind`'s openers (`[` or `{`) are open after `text[start:end]`, read from
    `depth` open, in order (`}}{{` leaves two open, where counting would say none); -1 as soon
    as a closer comes with none open."""
    opener, closer = kind
    at = text.find(closer, start, end)
    while at >= 0:  # each run of closers, after the openers before it
        depth += text.count(opener, start, at)
        start = at + 1
        while start < end and text[start] == closer:
            start += 1
        depth -= start - at
        if depth < 0:
            return -1
        at = text.find(closer, start, end)
    return depth + text.count(opener, start, end)


def without_plain_references(wikitext: str) -> str:
    """`wikitext` less the references that render to nothing wherever they stand.

    References are about a quarter of an article's wikitext, and the tokenizer spends more than
    that share of its time on them (citation templates with many parameters): docs/benchmarks.md,
    raw formats. Cut before it sees them, they leave the same paragraphs. A reference is cut only
    where nothing around it can read it as part of something else (`_LinePrefix.cut`): not
    inside a link's title, a template's name or a tag's attributes, not splitting an entity or a
    comment's marker, not where the line's markup begins, not ending a bare URL, not after a
    closer of something an earlier line opened, and with its own brackets and braces paired in
    order and its quote markup in pairs; tags' names in any case. The text is read once, however
    many references a line holds. `tests/pipeline/test_wikipedia_references.py` renders real
    articles and random markup both ways.
    """
    if "<ref" not in wikitext:
        return wikitext
    return _REFERENCE.sub(_LinePrefix(wikitext).cut, wikitext)


def render_wikitext(
    wikitext: str, tally: Tally, non_prose=NON_PROSE_PREFIXES, variants: bool = False
) -> list[str]:
    """Paragraphs of running prose, in order (see the module docstring for what is dropped);
    `variants`: the wiki converts between script variants, and its `-{ }-` markup is rendered
    first (`pipeline.sources.wikipedia.variants`)."""
    if variants:
        wikitext = converted(wikitext)
    return render_uncut(without_plain_references(wikitext), tally, non_prose)


def render_uncut(wikitext: str, tally: Tally, non_prose=NON_PROSE_PREFIXES) -> list[str]:
    """`render_wikitext` with every reference left to the tokenizer."""
    stream = (CTokenizer or Tokenizer)().tokenize(wikitext, 0, False)
    return prose_paragraphs(_Renderer(stream, non_prose).top(), tally)


class _Renderer:
    """Renders mwparserfromhell's token stream (the documented, balanced intermediate form
    its tree builder consumes) straight to text: the same parse at a fraction of the cost of
    building the node tree, which dominates `mwparserfromhell.parse`. Token classes are distinct
    leaves of `tokens.Token`, so a token's kind is its type, compared by identity."""

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
        out, t, n = [], self.t, self.n
        while self.i < n:
            tok = t[self.i]
            kind = type(tok)
            if kind is tokens.Text:  # most tokens: no call
                self.i += 1
                out.append(tok["text"])
            elif kind in stops:
                break
            else:
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

    def at(self, kind: type) -> bool:
        return self.i < self.n and type(self.t[self.i]) is kind

    def take(self, kind: type) -> bool:
        if self.at(kind):
            self.i += 1
            return True
        return False

    def skip(self, depth: int = 0, opener: type | None = None) -> None:
        """Consume one whole construct (depth 0), or the rest of the one `opener` began."""
        t, i, n = self.t, self.i, self.n
        if opener is None:
            opener = type(t[i])
            if opener not in CLOSERS:
                self.i = i + 1
                return
        open_kind, closers = CLOSERS[opener]
        while i < n:
            kind = type(t[i])
            i += 1
            if kind is open_kind:
                depth += 1
            elif kind in closers:
                depth -= 1
                if depth <= 0:
                    break
        self.i = i

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
        if _link_dropped(title, self.non_prose, self.at(tokens.WikilinkSeparator)):
            self.skip(1, tokens.WikilinkOpen)
            return ""
        text = self.seq((tokens.WikilinkClose,)) if self.take(tokens.WikilinkSeparator) else None
        self.take(tokens.WikilinkClose)
        return _link_text(title, text)

    def external_link(self, tok) -> str:
        self.seq((tokens.ExternalLinkSeparator, tokens.ExternalLinkClose))  # the URL: not prose
        has_title = self.take(tokens.ExternalLinkSeparator)
        title = self.seq((tokens.ExternalLinkClose,)) if has_title else ""
        self.take(tokens.ExternalLinkClose)
        return title

    def entity(self, tok) -> str:
        parts = ["&"]
        while self.i < self.n and not self.at(tokens.HTMLEntityEnd):
            part = self.t[self.i]
            self.i += 1
            if type(part) is tokens.Text:
                parts.append(part["text"])
            else:
                parts.append("x" if type(part) is tokens.HTMLEntityHex else "#")
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
        while self.i < self.n and not self.at(tokens.TagCloseClose):
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
