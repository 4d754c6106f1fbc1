"""Language conversion markup, `-{ }-`, of the wikis whose readers choose a script variant
(Chinese: simplified or traditional; Serbian: Cyrillic or Latin; Kazakh, Kurdish, ...).

MediaWiki parses it only on those wikis (elsewhere `-{` is text), and shows each reader one
variant; its dump holds the markup. `converted` gives the text a reader of the first variant
in `PREFERRED` sees (simplified Chinese, as most Chinese corpora are written), or the first
variant a rule names, before the renderer reads the article:
- `-{text}-` and `-{R|text}-`: the text, unconverted;
- `-{zh-hans:A;zh-hant:B;}-`, and with the `A` flag: the preferred variant's A;
- `-{H|...}-`, `-{T|...}-`, `-{-|...}-`, `-{D|...}-` (a hidden rule, the title's, a removal, a
  rule's description): nothing;
- `-{zh-hans;zh-hant|text}-` (shown to those variants): the text.
Markup inside markup is rendered from the inside out; `-{{` opens a template, not markup.
"""

from __future__ import annotations

import re

# languages whose wikis convert between script variants (MediaWiki's LanguageConverter), by the
# `xml:lang` of their dumps
VARIANT_LANGUAGES = frozenset("zh gan wuu sr sh kk ku tg uz crh iu shi tly ban zgh".split())
PREFERRED = ("zh-hans", "zh-cn", "zh", "zh-sg", "zh-my", "zh-hant", "zh-tw", "zh-hk", "zh-mo")
HIDDEN_FLAGS = frozenset("HT-D")  # flags whose markup shows nothing

_INNERMOST = re.compile(r"-\{(?!\{)((?:(?!-\{|\}-).)*)\}-", re.S)
_FLAGS = re.compile(r"[A-Za-z-]|[a-z]{2,3}(?:-[a-z0-9]{2,8})*")
_RULE = re.compile(r"\s*(?:[^;]*=>)?\s*([a-z]{2,3}(?:-[a-z0-9]{2,8})*)\s*:(.*)", re.S)
MAX_DEPTH = 8  # markup nested deeper than this is left as it is


def variant_language(lang: str) -> bool:
    """Whether a dump's `xml:lang` is that of a wiki with variants (`zh`, `zh-classical` not)."""
    return lang.strip().lower() in VARIANT_LANGUAGES


def converted(wikitext: str) -> str:
    """`wikitext` with each `-{ }-` replaced by what a reader of the preferred variant sees."""
    for _ in range(MAX_DEPTH):
        if "-{" not in wikitext:
            break
        done = _INNERMOST.sub(_shown, wikitext)
        if done == wikitext:
            break
        wikitext = done
    return wikitext


def _shown(match: re.Match) -> str:
    inner = match.group(1)
    head, bar, rest = inner.partition("|")
    flags = [f.strip() for f in head.split(";")] if bar else []
    if flags and all(_FLAGS.fullmatch(f) for f in flags if f):
        if HIDDEN_FLAGS.intersection(flags):
            return ""
        if "R" in flags or not {"A"}.issuperset(f for f in flags if f):
            return rest  # raw, or shown to the variants the flags name
        inner = rest
    return chosen(inner)


def chosen(text: str) -> str:
    """The preferred variant's text of `zh-hans:A;zh-hant:B` rules, else `text` itself."""
    rules = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        rule = _RULE.fullmatch(part)
        if rule is None:
            return text  # not rules: text shown as it is
        rules.setdefault(rule.group(1), rule.group(2).strip())
    if not rules:
        return text
    return next((rules[v] for v in PREFERRED if v in rules), next(iter(rules.values())))
