"""WikiExtractor's output: Wikipedia already turned into text by `wikiextractor` (the route
BERT's own README gives for Wikipedia), its files (`text/AA/wiki_00`, ..., `.bz2` with its
`--compress`) read as they are.

Each article is a block:

    <doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Anarchism">
    Anarchism

    Anarchism is a political philosophy and movement ...
    Etymology, terminology, and definition.
    The etymological origin of anarchism ...
    </doc>

One block is one document, with id `wikiextractor:<wiki>:<id>` (`wikiextractor:
en.wikipedia.org:12`: the host of its `url` and the page id, which is numbered per wiki, so the
output for several languages can be built together; `wikiextractor:<id>` for a block without a
url of that form), its paragraphs the block's lines: the first line is dropped when it is the
title, blank lines separate nothing (WikiExtractor writes a paragraph per line), and the text
is read back from the HTML escaping WikiExtractor applies inside blocks (`&lt;`, `&amp;`, ...).
Section headings, which WikiExtractor keeps as lines of their own ("Etymology, terminology, and
definition."), stay: nothing marks them apart from a short paragraph. WikiExtractor leaves the
conversion markup of the wikis with script variants (`-{zh-hans:计算机;zh-hant:電腦}-`) in its
text: a block whose `url` names such a wiki (`https://zh.wikipedia.org/...`) has it rendered as
the `wikipedia` format renders it (`pipeline.sources.wikipedia.variants`).

A block without a `</doc>` (a file cut short), a block without an `id`, and text outside any
block (not WikiExtractor's output) are bad records: the run stops naming the file and line, or
with `--skip-bad-input` they are skipped and counted (`documents_dropped.wikiextractor_bad_record`).
An article with no text but its title (redirects and stubs are written so) is dropped and counted
(`documents_dropped.wikiextractor_no_text`), and so is one of more than 32 Mi characters, never
held whole (`.wikiextractor_too_long`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import MAX_DOCUMENT_CHARS, Document, Tally, one_space
from pipeline.sources.jsonl import MAX_RECORD_BYTES, numbered_lines
from pipeline.sources.streams import (
    DEFAULT_MAX_LINE_BYTES,
    SNIFF_BYTES,
    PrefixedReader,
    text_stream,
)
from pipeline.sources.wikipedia.variants import converted, variant_language

DOC_OPEN = re.compile(r"\s*<doc[\s>]")
DOC_CLOSE = "</doc>"
_ID = re.compile(r'\sid="([^"]*)"')
# WikiExtractor writes the title last and unescaped: it may hold quotes but never `>` (MediaWiki
# titles cannot), so it runs to the first `">` (a fork writes the title line there too)
_TITLE = re.compile(r'\stitle="(.*?)">(.*)$')
_URL_HOST = re.compile(r'\surl="[a-z]+://([A-Za-z0-9.-]+)[/?]')  # the wiki: `en.wikipedia.org`
BAD = "wikiextractor_bad_record"
# its --json output: a record per line, the fields of a block's tag and the text
JSON_FIELDS = ("id", "url", "title", "text")


class _Block:
    """An open `<doc>` block: where it began, its id and title, its lines so far."""

    def __init__(self, line: str, number: int):
        self.number = number
        titled = _TITLE.search(line)
        if titled:
            head, self.title, rest = line[: titled.start()], titled.group(1), titled.group(2)
        else:
            (head, _, rest), self.title = line.partition(">"), None
        ident = _ID.search(head)
        self.id = ident.group(1) if ident else ""
        host = _URL_HOST.search(head)
        self.wiki = host.group(1).lower() if host else ""
        self.variants = variant_language(self.wiki.partition(".")[0]) if self.wiki else False
        self.lines: list[str] = [rest] if rest.strip() else []
        self.size = len(rest)

    @classmethod
    def of_record(cls, record: dict, number: int) -> _Block:
        """A record of the --json output as the block it would have been: the text's lines."""
        url = html.escape(str(record.get("url") or ""))
        tag = f'<doc id="{html.escape(str(record["id"]))}" url="{url}" title="{record["title"]}">'
        block = cls(tag, number)
        for line in record["text"].split("\n"):
            block.add(line)
        return block

    def add(self, line: str) -> None:
        """A line of the block; past `MAX_DOCUMENT_CHARS` none is kept (the block is dropped)."""
        self.size += len(line)
        if self.size <= MAX_DOCUMENT_CHARS:
            self.lines.append(line)
        elif self.lines:
            self.lines = []


def read_wikiextractor(
    f: BinaryIO, rel: str, tally: Tally, source: str = "wikiextractor"
) -> Iterator[Document]:
    """Documents of one WikiExtractor file (see the module docstring)."""
    f = text_stream(f, rel, tally)
    if f is None:
        return
    head = f.read(SNIFF_BYTES)
    f = PrefixedReader(head, f)
    if head.lstrip()[:1] == b"{":  # its --json output
        yield from _records(f, rel, tally, source)
        return
    block: _Block | None = None
    seen_any = outside = False  # outside: in a run of lines outside any block (one bad record)
    for number, line in numbered_lines(f, tally, DEFAULT_MAX_LINE_BYTES):
        if line is None:
            tally.inc("lines_dropped.too_long")
            continue
        if block is None:
            if DOC_OPEN.match(line):
                block, seen_any, outside = _Block(line, number), True, False
            elif line.strip() and not outside:
                seen_any = outside = True
                tally.bad(BAD, f"{rel}:{number}", _OUTSIDE)
            continue
        if line.strip() == DOC_CLOSE:
            yield from _document(block, rel, tally, source)
            block = None
        elif DOC_OPEN.match(line):
            _unclosed(block, rel, tally, f"line {number} opens another")
            block = _Block(line, number)
        else:
            block.add(line)
    if block is not None:
        _unclosed(block, rel, tally, "the file ends first (cut short?)")
    elif not seen_any:
        tally.drop("empty_file")


_OUTSIDE = "text outside any <doc ...> block: not WikiExtractor's output"


def _records(f: BinaryIO, rel: str, tally: Tally, source: str) -> Iterator[Document]:
    """Documents of a file of its --json output: each record read as the block it stands for
    (its text's lines the block's, escaped as they are); a line that is no such record is a
    bad record."""
    seen_any = False
    for number, line in numbered_lines(f, tally, MAX_RECORD_BYTES):
        if line is None:
            seen_any = True
            tally.drop("wikiextractor_too_long")
            continue
        if not line.strip():
            continue
        seen_any = True
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not all(
            isinstance(record.get(k), str) for k in JSON_FIELDS
        ):
            what = ", ".join(JSON_FIELDS)
            tally.bad(BAD, f"{rel}:{number}", f"not a record of its --json output (strings {what})")
            continue
        yield from _document(_Block.of_record(record, number), rel, tally, source)
    if not seen_any:
        tally.drop("empty_file")


def _unclosed(block: _Block, rel: str, tally: Tally, why: str) -> None:
    tally.bad(BAD, f"{rel}:{block.number}", f"a <doc> block without its </doc>: {why}")


def _document(block: _Block, rel: str, tally: Tally, source: str) -> Iterator[Document]:
    ident = block.id
    if not ident:
        tally.bad(BAD, f"{rel}:{block.number}", 'a <doc> block without an id="..."')
        return
    if block.size > MAX_DOCUMENT_CHARS:
        tally.drop("wikiextractor_too_long")
        return
    texts = (html.unescape(line) for line in block.lines)
    if block.variants:
        texts = (converted(text) for text in texts)
    paragraphs = [p for p in map(one_space, texts) if p]
    title = block.title
    if paragraphs and title is not None and paragraphs[0] == one_space(html.unescape(title)):
        del paragraphs[0]
    if not paragraphs:
        tally.drop("wikiextractor_no_text")
        return
    wiki = f"{block.wiki}:" if block.wiki else ""
    yield Document(f"{source}:{wiki}{ident}", source, tuple(paragraphs))
