"""MediaWiki XML exports -> one `Document` per article, in bounded memory.

Reading is split in two so that the costly half can run anywhere:
- `iter_pages` (`pipeline.sources.wikipedia.pages`, over `.split`) scans the (decompressed)
  XML byte stream for `<page>...</page>` chunks, never holding more than one page, parses each
  chunk on its own (a malformed page is one bad record, not the end of the file) and keeps
  articles only: namespace 0, not redirects. It works on a whole export and on any run of
  whole pages, such as the bz2 streams of a `-multistream` dump (`.spans`).
- `render_wikitext` (`pipeline.sources.wikipedia.render`, then `.prose`) turns one article's
  wikitext into paragraphs of running prose with `mwparserfromhell`'s token stream.

This module joins the two (`read_wikipedia`, `page_document`, and `rendered` for the pages of
a chunk read earlier); each name is imported from the module that defines it. Ids are
`wikipedia:<wiki>:<page id>` (`wikipedia:enwiki:12`: page ids are numbered per wiki, so the
dumps of several languages can be built together), `wikipedia:<page id>` for an export that
does not name its wiki (`<dbname>`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from pipeline.sources.documents import Document, Tally
from pipeline.sources.wikipedia.pages import WikiPage, iter_pages
from pipeline.sources.wikipedia.render import render_wikitext


def page_document(page: WikiPage, tally: Tally, source: str = "wikipedia") -> Document | None:
    """Render one article; None (counted) when no prose is left or the renderer fails."""
    try:
        paragraphs = render_wikitext(page.wikitext, tally, page.non_prose_prefixes, page.variants)
    except (RecursionError, ValueError, TypeError):  # the parser's own limits, never seen so far
        tally.drop("wiki_render_error")
        return None
    if not paragraphs:
        tally.drop("wiki_no_prose")
        return None
    return Document(page.document_id(source), source, tuple(paragraphs), False, page.input_index)


def read_wikipedia(
    f: BinaryIO, rel: str, tally: Tally, source: str = "wikipedia"
) -> Iterator[Document]:
    """A whole MediaWiki XML export (`.xml`, or `.xml.bz2` decompressed by the caller)."""
    for page in iter_pages(f, rel, tally):
        doc = page_document(page, tally, source)
        if doc is not None:
            yield doc


def rendered(items, tally: Tally):
    """Documents of a chunk, Wikipedia pages rendered here (the costly part of reading them,
    so it runs where the chunks are spread over workers); `tally` counts the rendering."""
    for item in items:
        if not isinstance(item, WikiPage):
            yield item
            continue
        doc = page_document(item, tally, "wikipedia")
        if doc is not None:
            tally.inc("documents_read")
            yield doc
