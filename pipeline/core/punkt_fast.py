"""NLTK Punkt's sentences, faster: the same spans as `PunktSentenceTokenizer.tokenize`.

Punkt (NLTK 3.10, `nltk/tokenize/punkt.py`) splits a text in three steps:

1. `_match_potential_end_contexts`: every `.`, `?` or `!` followed by other punctuation or by
   whitespace and a token is a candidate. Its context is the text from just after the last ASCII
   whitespace before it (within the stretch since the previous candidate; failing that, the
   previous candidate's own start) through the punctuation or next token after it. A candidate
   whose context would overlap the next one's is dropped.
2. `_slices_from_text`: a candidate breaks the text when `text_contains_sentbreak(context)`:
   Punkt's word tokenizer splits the context into tokens, the first pass marks each token (a
   sentence-end mark; an ellipsis; a word ending in a period, an abbreviation or a break), the
   second pass revises each token from the next one (collocations, the orthographic heuristic,
   frequent sentence starters, initials and numbers), and the context breaks when any token but
   the last is marked a break.
3. `_realign_boundaries`: closing quotes and brackets after a break move to the sentence before.

Step 2 is where Punkt spends its time (token objects, generators, a regular expression per token
property), and its answer is a pure function of the context's text and the parameters. Here it
is written once more as plain functions over token strings, and remembered. Most contexts are a
plain word with its mark, whitespace and a plain token: the word alone decides unless it is an
abbreviation, an initial, a number or a collocation's first word (`lead`, remembered per word),
and only then the pair does (remembered per pair); any other context is decided whole
(`breaks`, remembered per context). Prose repeats its words, so most candidates cost one
dictionary look-up.
Steps 1 and 3 are the same arithmetic on positions, with Punkt's own compiled patterns (NLTK
compiles them with the `regex` engine, whose Unicode classes differ from `re`'s), so the spans are
Punkt's by construction. `tests/pipeline/test_punkt_fast.py` compares both on hostile text and,
when `make corpora` has fetched them, on every paragraph of the real corpora.

Only Punkt's own language variables and token class are reproduced: a tokenizer built with
others is used as it is (`splitter` returns its `tokenize`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

_WHITESPACE = " \t\n\r\x0b\x0c"  # string.whitespace: what Punkt looks back for
_OTHER_WHITESPACE = _WHITESPACE[1:]
_SENT_END = (".", "?", "!")  # PunktLanguageVars.sent_end_chars
_PUNCTUATION = (";", ":", ",", ".", "!", "?")  # PunktSentenceTokenizer.PUNCTUATION
_REALIGN_FIRST = frozenset("\"')]}\u2018\u2019\u201c\u201d\xab\xbb")  # what a realignment opens
NUMBER = "##number##"
# A plain token: ASCII letters and digits, single inner periods or hyphens ("e.g", "3.14",
# "well-known"). Punkt's word tokenizer keeps it whole, with a final period if it has one; with a
# final "?" or "!" it is the word and the mark. Both patterns use ASCII classes only, so either
# regular-expression engine reads them alike.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9]+(?:[.\-][A-Za-z0-9]+)*\.?")
_PLAIN_WORD_MARK = re.compile(r"(?:[A-Za-z0-9]+(?:[.\-][A-Za-z0-9]+)*)?[.?!]")
DEPENDS = "depends"
PLAIN_NO = "not plain"


def _next_start(m) -> tuple[int, int]:
    """A break at candidate `m`: the sentence ends after the mark, the next starts at the next
    token, or right after the mark when punctuation follows it."""
    next_start = m.start(2)
    return m.end(), next_start if next_start >= 0 else m.end()


class FastPunkt:
    """One tokenizer's parameters and patterns, and the decisions made so far.

    The decision caches start over when they hold more than `limit` entries, so memory stays
    bounded; the sentences never depend on what they hold.
    """

    def __init__(self, tokenizer: PunktSentenceTokenizer, limit: int = 100_000):
        from nltk.tokenize import punkt

        params = tokenizer._params
        lang = tokenizer._lang_vars
        self.abbrev_types = frozenset(params.abbrev_types)
        self.collocations = frozenset(params.collocations)
        self.sent_starters = frozenset(params.sent_starters)
        self.ortho_context = params.ortho_context
        self.period_context = lang.period_context_re()._rx
        self.word_findall = lang._word_tokenizer_re()._rx.findall
        self.realignment = lang.re_boundary_realignment._rx
        self.ellipsis = punkt.PunktToken._RE_ELLIPSIS._rx.match
        self.numeric_sub = punkt.PunktToken._RE_NUMERIC._rx.sub
        self.initial = punkt.PunktToken._RE_INITIAL._rx.match
        self.ortho_lc = punkt._ORTHO_LC
        self.ortho_uc = punkt._ORTHO_UC
        self.ortho_mid_uc = punkt._ORTHO_MID_UC
        self.ortho_beg_lc = punkt._ORTHO_BEG_LC
        self.limit = limit
        self.collocation_firsts = frozenset(first for first, _ in self.collocations)
        self.contexts: dict[str, bool] = {}
        self.leads: dict[str, object] = {}
        self.pairs: dict[tuple[str, str], bool] = {}

    # -- step 2: the decision, a pure function of the context's text --------------------------

    def breaks(self, context: str) -> bool:
        """`PunktSentenceTokenizer.text_contains_sentbreak(context)`, remembered."""
        found = self.contexts.get(context)
        if found is None:
            if len(self.contexts) >= self.limit:
                self.contexts.clear()
                self.pairs.clear()
            found = self.contexts[context] = self._breaks(context)
        return found

    def _breaks(self, context: str) -> bool:
        tokens: list[str] = []
        for line in context.split("\n"):
            if line.strip():
                tokens.extend(self.word_findall(line))
        pairs = self.pairs
        for i in range(len(tokens) - 1):
            pair = (tokens[i], tokens[i + 1])
            found = pairs.get(pair)
            if found is None:
                found = pairs[pair] = self.token_breaks(*pair)
            if found:
                return True
        return False

    def first_pass(self, tok: str) -> tuple[bool, bool, bool]:
        """(sentence break, abbreviation, ellipsis) from the token alone (Punkt's first pass)."""
        if tok in _SENT_END:
            return True, False, False
        if self.ellipsis(tok):
            return False, False, True
        if tok.endswith(".") and not tok.endswith(".."):
            stem = tok[:-1].lower()
            if stem in self.abbrev_types or stem.split("-")[-1] in self.abbrev_types:
                return False, True, False
            return True, False, False
        return False, False, False

    def word_type(self, tok: str) -> str:
        return self.numeric_sub(NUMBER, tok.lower())

    def token_breaks(self, tok: str, next_tok: str) -> bool:
        """Whether `tok`, followed by `next_tok`, ends a sentence (both of Punkt's passes)."""
        sentbreak, abbr, ellipsis = self.first_pass(tok)
        if not tok.endswith("."):  # the second pass revises period-final tokens only
            return sentbreak
        typ = self.word_type(tok)
        if len(typ) > 1 and typ[-1] == ".":
            typ = typ[:-1]
        next_typ = self.word_type(next_tok)
        if self.first_pass(next_tok)[0] and len(next_typ) > 1 and next_typ[-1] == ".":
            next_typ = next_typ[:-1]
        initial = self.initial(tok) is not None

        if (typ, next_typ) in self.collocations:
            return False
        if (abbr or ellipsis) and not initial:
            starter = self.ortho_heuristic(next_tok, next_typ)
            if starter is True:
                return True
            if next_tok[0].isupper() and next_typ in self.sent_starters:
                return True
        if initial or typ == NUMBER:
            starter = self.ortho_heuristic(next_tok, next_typ)
            if starter is False:
                return False
            if (
                starter == "unknown"
                and initial
                and next_tok[0].isupper()
                and not (self.ortho_context.get(next_typ, 0) & self.ortho_lc)
            ):
                return False
        return sentbreak

    def ortho_heuristic(self, tok: str, typ: str) -> bool | str:
        """Punkt's orthographic evidence that `tok` starts a sentence: True, False or 'unknown'."""
        if tok in _PUNCTUATION:
            return False
        context = self.ortho_context.get(typ, 0)
        if tok[0].isupper() and (context & self.ortho_lc) and not (context & self.ortho_mid_uc):
            return True
        if tok[0].islower() and ((context & self.ortho_uc) or not (context & self.ortho_beg_lc)):
            return False
        return "unknown"

    # -- the common context: a plain word and its mark, whitespace, a plain word -------------

    def lead(self, word: str):
        """What a context beginning with `word` (text up to and including its end mark) decides
        by `word` alone: True or False when the word's own decision ignores the next token,
        DEPENDS when it needs it, PLAIN_NO when `word` is not one plain token (the context then
        goes through `breaks`)."""
        found = self.leads.get(word)
        if found is None:
            found = self.leads[word] = self._lead(word)
        return found

    def _lead(self, word: str):
        if not _PLAIN_WORD_MARK.fullmatch(word):
            return PLAIN_NO
        if word[-1] != ".":  # "word?": tokens "word", "?"; "?" breaks before any next token
            return True
        sentbreak, abbr, ellipsis = self.first_pass(word)
        typ = self.word_type(word)
        if len(typ) > 1 and typ[-1] == ".":
            typ = typ[:-1]
        initial = self.initial(word) is not None
        if abbr or ellipsis or initial or typ == NUMBER or typ in self.collocation_firsts:
            return DEPENDS
        return sentbreak

    def decide(self, text: str, m, start: int) -> bool:
        """Whether the candidate `m`, whose context starts at `start`, breaks the text."""
        next_tok = m.group(2)
        # A next token of only U+001C-U+001F is a token to the `regex` engine but whitespace to
        # `str.strip`: on a line of its own, Punkt's word tokenizer drops it, the mark is then the
        # context's last token and cannot break. Such a context is decided whole.
        if next_tok is not None and not next_tok.isspace():
            word = text[start : m.end()]
            lead = self.leads.get(word)  # `lead` without its call, for the words seen before
            if lead is None:
                lead = self.lead(word)
            if lead is True:  # a break before the next token, whatever it is
                return True
            if lead is not PLAIN_NO and _PLAIN_WORD.fullmatch(next_tok):
                if lead is False:  # two tokens, neither breaks
                    return False
                pair = (word, next_tok)
                found = self.pairs.get(pair)
                if found is None:
                    found = self.pairs[pair] = self.token_breaks(*pair)
                return found
        return self.breaks(text[start : m.end(1)])

    # -- steps 1 and 3: candidates, slices and realignment ------------------------------------

    def breaks_at(self, text: str) -> list[tuple[int, int]]:
        """The (end of a sentence, start of the next) of every break Punkt makes, before
        realignment: `_match_potential_end_contexts` and `_slices_from_text`."""
        if len(self.leads) > self.limit or len(self.pairs) > self.limit:
            self.leads.clear()
            self.pairs.clear()
        out: list[tuple[int, int]] = []
        # five scans for one character each: several times cheaper than one for a class of them
        other_space = (
            "\n" in text or "\t" in text or "\r" in text or "\x0b" in text or "\x0c" in text
        )
        rfind = text.rfind
        decide = self.decide
        prev_match = None
        prev_start = prev_stop = 0  # the previous candidate's word: text[prev_start:prev_stop]
        for m in self.period_context.finditer(text):
            at = m.start()
            space = rfind(" ", prev_stop, at)
            if other_space:
                for c in _OTHER_WHITESPACE:
                    space = max(space, rfind(c, prev_stop, at))
            # Punkt's look-back returns 0 both for "none" and for the stretch's first character
            start = space + 1 if space > prev_stop else prev_start
            if prev_match is not None and prev_stop <= start:
                if decide(text, prev_match, prev_start):
                    out.append(_next_start(prev_match))
            prev_match, prev_start, prev_stop = m, start, at
        if prev_match is not None and decide(text, prev_match, prev_start):
            out.append(_next_start(prev_match))
        return out

    def spans(self, text: str) -> list[tuple[int, int]]:
        """`PunktSentenceTokenizer.span_tokenize(text)`, as a list."""
        if "." not in text and "?" not in text and "!" not in text:
            end = len(text.rstrip())
            return [(0, end)] if end > 0 else []
        slices: list[tuple[int, int]] = []
        last = 0
        for end, next_start in self.breaks_at(text):
            slices.append((last, end))
            last = next_start
        slices.append((last, len(text.rstrip())))
        # _realign_boundaries
        out: list[tuple[int, int]] = []
        realign = 0
        n = len(text)
        match = self.realignment.match
        for i, (start, stop) in enumerate(slices):
            start += realign
            if i + 1 == len(slices):
                if start < min(stop, n):
                    out.append((start, stop))
                continue
            start2, stop2 = slices[i + 1]
            m = None
            if start2 < stop2 and start2 < n and text[start2] in _REALIGN_FIRST:
                m = match(text[start2:stop2])
            if m:
                out.append((start, start2 + len(m.group(0).rstrip())))
                realign = m.end()
            else:
                realign = 0
                if start < min(stop, n):
                    out.append((start, stop))
        return out

    def tokenize(self, text: str) -> list[str]:
        """`PunktSentenceTokenizer.tokenize(text)`: the same sentences."""
        return [text[s:e] for s, e in self.spans(text)]


def splitter(tokenizer: PunktSentenceTokenizer) -> Callable[[str], list[str]]:
    """The fast route for a tokenizer with Punkt's own language variables and token class,
    else the tokenizer's own `tokenize`."""
    from nltk.tokenize import punkt

    own_vars = type(tokenizer._lang_vars) is punkt.PunktLanguageVars
    if own_vars and tokenizer._Token is punkt.PunktToken:
        return FastPunkt(tokenizer).tokenize
    return tokenizer.tokenize
