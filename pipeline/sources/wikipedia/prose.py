"""Rendered article text -> paragraphs of prose: markup leftovers cleaned, residue dropped.

The renderer (`pipeline.sources.wikipedia.render`) keeps the text of the constructs it
understands; what it leaves is cleaned here line by line. A line that still holds markup is
dropped and counted (`wiki_lines_dropped.markup_residue`), as is a paragraph that is a caption
or label rather than prose (`wiki_paragraphs_dropped.fragment`).
"""

from __future__ import annotations

import re

from pipeline.sources.documents import Tally, one_space

MIN_WORDS = 4  # shorter paragraphs are kept only when they end like a sentence
# (and Chinese and Japanese ones, whose paragraphs have no spaces to count words by)
SENTENCE_ENDS = tuple(".!?\"'”’…)。！？｡」』）")
RESIDUE = ("[[", "]]", "{{", "}}", "{|", "|}", "|-", "<ref", "thumb|", "&amp;", "&lt;", "&gt;")
RESIDUE += ("colspan=", "rowspan=", "bgcolor=", 'style="', "class=")

_MAGIC_WORD = re.compile(r"__[A-Z]{3,}__")
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_APOSTROPHES = re.compile(r"'{2,}")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_OPEN_PAREN_PUNCT = re.compile(r"\(\s*(?:[,;:]\s*)+")
_PUNCT_CLOSE_PAREN = re.compile(r"(?:\s*[,;:])+\s*\)")
SPACED_PUNCT = tuple(" " + mark for mark in ".,;:!?)")


def clean_line(line: str) -> str:
    """Rendered text of one line -> prose: leftover tags, quote marks, empty brackets, spaces.
    Each pattern runs only on a line holding the character it needs (most lines hold few)."""
    if not line or line.isspace():
        return ""
    if "__" in line:
        line = _MAGIC_WORD.sub("", line)
    if "<" in line:
        line = _HTML_TAG.sub("", line)
    if "''" in line:
        line = _APOSTROPHES.sub("", line)
    if "(" in line:
        line = _EMPTY_PARENS.sub("", line)
        line = _OPEN_PAREN_PUNCT.sub("(", line)
    if ")" in line:
        line = _PUNCT_CLOSE_PAREN.sub(")", line)
    line = one_space(line)  # the same whitespace as the pattern's \s, collapsed
    for mark in SPACED_PUNCT:  # what is left of the spaces before a mark goes
        if mark in line:
            line = line.replace(mark, mark[1])
    return line


def prose_paragraphs(text: str, tally: Tally) -> list[str]:
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
