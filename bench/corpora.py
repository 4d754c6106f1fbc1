"""Real English corpora for the benchmarks: reStructuredText documentation reduced to prose, and
Wikipedia prose.

`bench/fetch_corpora.sh` unpacks Debian's `linux-doc-6.1` (the kernel documentation, about 3,000
`.rst.gz` files). This module reduces each file to paragraphs of running prose, one document per
`.rst` file, and writes them in the two layouts the pipeline reads (`bench/corpus_layouts.py`):

- `books`: one `.txt` per `.rst` file (relative path kept), paragraphs separated by blank lines;
- `text`: the reference input format, one sentence per line (NLTK Punkt, English parameters, the
  pipeline's own splitter) and a blank line between documents, in files of about `--part-mb` MB.

Markup is reduced the way the BERT paper treated Wikipedia ("text passages only"): directives
(admonitions such as `.. note::` keep their prose, everything else is dropped with its body),
literal blocks after `::`, tables, section titles and their adornments, bullet and enumerated list
items, field lists, comments, targets and substitution definitions are dropped; inline markup is
reduced to its text. A paragraph is kept only if it reads as prose (`is_prose`).

`--repeat-to-mb N` writes whole copies (`copy-000/`, `copy-001/`, ...) until each layout holds at
least N MB (10^6 bytes); copies are hard links where the filesystem allows. The documents of
different copies have different paths, hence different document ids.

    python -m bench.corpora [--input DIR] [--out data/corpora/kernel-docs] [--repeat-to-mb 200]

Wikipedia (`wiki_corpus`, for the side-by-side bench, made on first use): the articles of the
English Wikipedia export that gensim 4.4.0 ships (also fetched by `bench/fetch_corpora.sh`),
read and rendered to prose by the pipeline's own Wikipedia reader, then written in the `text`
layout like the kernel docs. The reference script reads this text as it is; our build reads it
with `--format text`.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.corpus_layouts import (
    KERNEL_DOCS,
    CorpusConfig,
    Document,
    build,
    describe,
    record,
    up_to_date,
    write_layout,
)

# Directives whose body is prose (re-read as reStructuredText); all others are dropped whole.
PROSE_DIRECTIVES = frozenset(
    "note warning attention caution danger error hint important tip seealso only container "
    "admonition sidebar topic versionadded versionchanged deprecated".split()
)
# Object descriptions (`.. c:function:: int f(void)`, `.. method:: name(args)`): body is prose.
DESCRIPTION_DIRECTIVE = re.compile(
    r"(?:(?:c|cpp|py|js|rst):)?(?:function|method|classmethod|staticmethod|class|attribute|data|"
    r"exception|decorator|macro|type|member|var|struct|union|enum|enumerator|describe|object|"
    r"opcode|envvar|option|cmdoption|directive|role)$"
)
# For these the directive argument is a title, a version, an expression or a signature.
ARGUMENT_NOT_TEXT = frozenset(
    "admonition sidebar topic only container versionadded versionchanged deprecated".split()
)

EXPLICIT = re.compile(r"\.\.(?:\s|$)")
DIRECTIVE = re.compile(r"\.\.\s+([\w:.+-]+)::(?:\s+(.*))?$")
ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1{2,}\s*$")
SIMPLE_TABLE_BORDER = re.compile(r"=+(?: +=+)+\s*$")
GRID_TABLE = re.compile(r"[+|]")
BULLET = re.compile(r"[-*+\u2022](?:\s|$)")
ENUMERATED = re.compile(r"(?:\(?(?:\d+|[a-zA-Z]|#|[ivxlcdm]+|[IVXLCDM]+)[.)])(?:\s|$)")
FIELD = re.compile(r":[^:`\s][^:`]*:(?:\s|$)")
OPTION = re.compile(r":[\w-]+:")

LITERAL = re.compile(r"``(.+?)``")
ROLE = re.compile(r"(?::[\w.+-]+(?::[\w.+-]+)?:)?`([^`]+)`(?::[\w.+-]+:)?(?:__?)?")
TITLED = re.compile(r"^(.*?)\s*<[^<>]*>$", re.DOTALL)
STRONG = re.compile(r"(?<![\w*\\])\*\*(?=\S)(.+?)(?<=\S)\*\*(?![\w*])")
EMPHASIS = re.compile(r"(?<![\w*\\])\*(?=[^\s*])(.+?)(?<=[^\s*\\])\*(?![\w*])")
FOOTNOTE_REF = re.compile(r"\s*\[(?:#[\w-]*|\*|\d+)\]_")
LINK_SUFFIX = re.compile(r"(?<=\w)__?(?=[\s.,;:!?)]|$)")
SUBSTITUTION = re.compile(r"(?<![\w|])\|(\w[\w .-]*)\|(?:__?)?(?![\w|])")
ESCAPE = re.compile(r"\\(.)")
PLACEHOLDER = re.compile("\x00(\\d+)\x00")
SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


@dataclass(frozen=True)
class ProseRules:
    min_chars: int = 40  # shorter paragraphs are headings, captions or debris
    min_words: int = 6
    min_letter_share: float = 0.75  # letters among non-space characters; code falls below


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: Sequence[str], start: int, indent: int) -> int:
    """Index after the block from `start` whose lines are blank or indented more than `indent`."""
    i = start
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        i += 1
    return i


def _dedent(lines: Sequence[str]) -> list[str]:
    margin = min((_indent(line) for line in lines if line.strip()), default=0)
    return [line[margin:] for line in lines]


def _directive_body(lines: Sequence[str], name: str, argument: str) -> list[str]:
    """A prose directive's content: its argument (unless a title), then its body without options."""
    body = list(_dedent(lines))
    while body and OPTION.match(body[0].strip()):
        body.pop(0)
    if argument and name not in ARGUMENT_NOT_TEXT and not DESCRIPTION_DIRECTIVE.match(name):
        body.insert(0, argument)
    return body


def _skip_table(lines: Sequence[str], start: int) -> int:
    """Index after a simple table: its closing border is the one followed by a blank line."""
    i = start + 1
    while i < len(lines):
        if SIMPLE_TABLE_BORDER.match(lines[i].strip()) and (
            i + 1 == len(lines) or not lines[i + 1].strip()
        ):
            return i + 1
        i += 1
    return i


def _skip_nonblank(lines: Sequence[str], start: int) -> int:
    i = start
    while i < len(lines) and lines[i].strip():
        i += 1
    return i


def _collect_paragraph(lines: Sequence[str], start: int) -> tuple[list[str], int]:
    """Consecutive non-blank lines at the first line's indent; a titled section drops its title."""
    indent, i, para = _indent(lines[start]), start, []
    while i < len(lines) and lines[i].strip() and _indent(lines[i]) == indent:
        stripped = lines[i].strip()
        if ADORNMENT.match(stripped):
            para = []  # an underline: what came before was a section title
        else:
            para.append(stripped)
        i += 1
    return para, i


def _paragraph_end(lines: Sequence[str], start: int, para: list[str], indent: int) -> int:
    """Where reading resumes after a paragraph: past the literal block that `::` announces."""
    if not para[-1].endswith("::"):
        return start
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and _indent(lines[i]) > indent:
        return _block_end(lines, i, indent)
    return _skip_nonblank(lines, i)  # a quoted literal block at the same indent


def _literal_intro(text: str) -> str:
    """The paragraph that introduces a literal block, as Sphinx renders it ('::' -> ':')."""
    if text == "::":
        return ""
    if text.endswith(" ::"):
        return text[:-3].rstrip()
    return text[:-1]


def _explicit_markup(lines: Sequence[str], i: int) -> tuple[list[str], int]:
    """(prose lines inside, index after) for a directive, comment, target or substitution."""
    stripped = lines[i].strip()
    end = _block_end(lines, i + 1, _indent(lines[i]))
    match = DIRECTIVE.match(stripped)
    if match and (
        match.group(1) in PROSE_DIRECTIVES or DESCRIPTION_DIRECTIVE.match(match.group(1))
    ):
        name, argument = match.group(1), (match.group(2) or "").strip()
        return _directive_body(lines[i + 1 : end], name, argument), end
    return [], end


def rst_blocks(lines: Sequence[str]) -> Iterator[str]:
    """Text paragraphs of a reStructuredText document, markup structure removed, inline kept."""
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        indent = _indent(lines[i])
        if not stripped:
            i += 1
        elif EXPLICIT.match(stripped):
            inner, i = _explicit_markup(lines, i)
            yield from rst_blocks(inner)
        elif SIMPLE_TABLE_BORDER.match(stripped):
            i = _skip_table(lines, i)
        elif GRID_TABLE.match(stripped) or stripped.startswith(">>>"):
            i = _skip_nonblank(lines, i)
        elif BULLET.match(stripped) or ENUMERATED.match(stripped) or FIELD.match(stripped):
            i = _block_end(lines, i + 1, indent)
        elif ADORNMENT.match(stripped):
            i += 1
        else:
            i = yield from _paragraph(lines, i, indent)


def _paragraph(lines: Sequence[str], i: int, indent: int) -> Iterator[str]:
    """Yields one paragraph (or the prose under a definition-list term); returns where to resume."""
    para, j = _collect_paragraph(lines, i)
    if j < len(lines) and lines[j].strip() and _indent(lines[j]) > indent:
        # A term with its definition (the term is dropped), or text then an indented block.
        end = _block_end(lines, j, indent)
        if len(para) > 1:
            yield " ".join(para)
        yield from rst_blocks(_dedent(lines[j:end]))
        return end
    if not para:
        return j
    text = " ".join(para)
    if text.endswith("::"):
        text = _literal_intro(text)
    if text:
        yield text
    return _paragraph_end(lines, j, para, indent)


def _role_text(match: re.Match[str]) -> str:
    content = match.group(1)
    titled = TITLED.match(content)
    if titled and titled.group(1):
        content = titled.group(1)
    return content.lstrip("~!")


def strip_inline(text: str) -> str:
    """Inline markup reduced to its text.

    ``code`` -> code, :role:`text <target>` -> text, `link <url>`_ -> link, *em*, **strong**.
    """
    literals: list[str] = []

    def protect(match: re.Match[str]) -> str:
        literals.append(match.group(1))
        return f"\x00{len(literals) - 1}\x00"

    text = LITERAL.sub(protect, text)
    text = ROLE.sub(_role_text, text)
    text = STRONG.sub(r"\1", text)
    text = EMPHASIS.sub(r"\1", text)
    text = FOOTNOTE_REF.sub("", text)
    text = SUBSTITUTION.sub(r"\1", text)
    text = LINK_SUFFIX.sub("", text)
    text = ESCAPE.sub(r"\1", text)
    text = PLACEHOLDER.sub(lambda m: literals[int(m.group(1))], text)
    return " ".join(text.split())


def is_prose(paragraph: str, rules: ProseRules = ProseRules()) -> bool:
    """Running prose: long enough, several words, ends like a sentence, mostly letters."""
    if len(paragraph) < rules.min_chars or not SENTENCE_END.search(paragraph):
        return False
    if len(paragraph.split()) < rules.min_words:
        return False
    if not (paragraph[0].isalnum() or paragraph[0] in "\"'(“‘"):
        return False
    nonspace = len(paragraph) - paragraph.count(" ")
    letters = sum(ch.isalpha() for ch in paragraph)
    return letters >= rules.min_letter_share * nonspace


def rst_to_prose(source: str, rules: ProseRules = ProseRules()) -> list[str]:
    """The prose paragraphs of one reStructuredText document, in reading order."""
    lines = source.expandtabs(8).splitlines()
    paragraphs = (strip_inline(block) for block in rst_blocks(lines))
    return [p for p in paragraphs if is_prose(p, rules)]


def read_source(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def _relative_name(path: Path, root: Path) -> str:
    name = path.relative_to(root).as_posix()
    for suffix in (".gz", ".txt", ".rst"):
        name = name.removesuffix(suffix)
    return name


def read_documents(config: CorpusConfig) -> Iterator[Document]:
    """Every source file with at least one prose paragraph, in sorted path order."""
    root = Path(config.input)
    if not root.is_dir():
        raise SystemExit(
            f"corpora: input folder {root} not found; run bench/fetch_corpora.sh first "
            "(or pass --input)"
        )
    paths = sorted(p for p in root.glob(config.pattern) if p.is_file())
    paths = [p for p in paths if p.relative_to(root).parts[0] not in config.exclude]
    if not paths:
        raise SystemExit(f"corpora: no files match {config.pattern} under {root}")
    for path in paths:
        paragraphs = rst_to_prose(read_source(path))
        if paragraphs:
            yield Document(_relative_name(path, root), paragraphs)


# --- Wikipedia prose ------------------------------------------------------------------------------

WIKI_EXPORTS = ("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",)


def wiki_documents(gensim_dir: Path) -> list[Document]:
    """Every article with prose, in export order; paths are the pipeline's document ids."""
    from pipeline.sources.documents import Tally
    from pipeline.sources.wikipedia.reader import read_wikipedia

    docs = []
    for name in WIKI_EXPORTS:
        path = gensim_dir / name
        if not path.is_file():
            raise SystemExit(f"{path}: missing; fetch gensim's test data first: make corpora")
        xml = bz2.decompress(path.read_bytes())
        for doc in read_wikipedia(io.BytesIO(xml), name, Tally()):
            if doc.paragraphs:
                docs.append(Document(doc.id.replace("/", "_"), list(doc.paragraphs)))
    return docs


def wiki_corpus(data: str = "data", repeat_to_mb: float = 200.0) -> Path:
    """DATA/corpora/wiki-prose-<N>mb/text, unless already built from the same code and size:
    a sentence a line (Punkt), a blank line between articles, whole copies (`copy-000/`, ...)
    until it holds `repeat_to_mb` MB."""
    out = Path(data) / "corpora" / f"wiki-prose-{repeat_to_mb:g}mb"
    config = CorpusConfig(
        input=str(Path(data) / "gensim"),
        pattern="|".join(WIKI_EXPORTS),
        out=str(out),
        layouts=("text",),
        repeat_to_mb=repeat_to_mb,
    )
    if up_to_date(config, "text") is None:
        out.mkdir(parents=True, exist_ok=True)
        summary = write_layout("text", wiki_documents(Path(data) / "gensim"), config)
        record(config, "text", summary)
        print(describe(summary))
    return out / "text"


# --- the command ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[CorpusConfig, bool]:
    parser = argparse.ArgumentParser(
        prog="corpora",
        description="Reduce reStructuredText documentation (by default the Linux kernel's, "
        "fetched by bench/fetch_corpora.sh) to English prose corpora in the pipeline's books "
        "and text layouts.",
    )
    parser.add_argument("--input", default=KERNEL_DOCS, help=f"source root (default {KERNEL_DOCS})")
    parser.add_argument("--pattern", default="**/*.rst.gz", help="glob of source files under it")
    parser.add_argument(
        "--exclude", nargs="*", default=["translations"], help="top-level folders to leave out"
    )
    parser.add_argument("--out", default="data/corpora/kernel-docs", help="OUT/books, OUT/text")
    parser.add_argument(
        "--layout",
        nargs="+",
        choices=["books", "text"],
        default=["books", "text"],
        help="layouts to write (default both)",
    )
    parser.add_argument(
        "--repeat-to-mb",
        type=float,
        default=0.0,
        help="write whole copies (copy-000/ ...) until each layout holds at least this many MB",
    )
    parser.add_argument("--part-mb", type=float, default=4.0, help="size of a text-layout file")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    try:
        config = CorpusConfig(
            input=args.input,
            pattern=args.pattern,
            exclude=tuple(args.exclude),
            out=args.out,
            layouts=tuple(args.layout),
            repeat_to_mb=args.repeat_to_mb,
            part_mb=args.part_mb,
        )
    except ValueError as err:
        parser.error(str(err))
    return config, args.force


def main(argv: Sequence[str] | None = None) -> int:
    config, force = parse_args(argv)
    Path(config.out).mkdir(parents=True, exist_ok=True)
    build(config, read_documents, force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
