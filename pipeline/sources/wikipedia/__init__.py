"""MediaWiki XML exports, read into one `Document` per article.

- `reader`: `read_wikipedia`, `page_document` and `rendered` (the format's entry points).
- `split`: the XML byte stream cut into `<page>` chunks; `pages`: chunks parsed into articles.
- `render`: one article's wikitext -> running text; `prose`: that text -> prose paragraphs.
- `spans`: a large dump (`-multistream` with its index, or a big `.xml`) cut into spans that
  workers read in parallel.
"""
