"""The fast route gives exactly NLTK Punkt's sentences, on text built to trip it and on the real
corpora when `make corpora` has fetched them."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.core.punkt_fast import FastPunkt, splitter
from pipeline.core.sentences import english_tokenizer, split_paragraphs, train_parameters
from pipeline.sources.books import read_book
from pipeline.sources.documents import Tally
from tests.pipeline.wikidata import ARTICLES, TABLE_MARKUP, gensim_xml

ROOT = Path(__file__).resolve().parents[2]
KERNEL_BOOKS = ROOT / "data" / "corpora" / "kernel-docs" / "books"

# Pieces that reach every branch of Punkt's two passes with the English parameters: known
# abbreviations (bare, hyphenated, upper case), initials, ordinals and numbers, ellipses, words
# whose orthographic context says "starts a sentence" or not, frequent sentence starters, the
# collocations' words, quotes and brackets that realignment moves, Unicode letters, digits and
# spaces that the two regular-expression engines class differently.
# fmt: off
WORDS = [
    "the", "The", "THE", "and", "However", "however", "But", "but", "It", "it", "a", "A", "I",
    "i", "Smith", "smith", "kernel", "Kernel", "word", "in", "In", "He", "he", "They", "they",
    "Bach", "ch", "J", "S", "b", "o", "U", "Chapter", "aes", "Business", "cbot", "1", "12", "3rd",
]
MARKED = [
    "Mr.", "mr.", "Dr.", "e.g.", "E.g.", "i.e.", "etc.", "vs.", "Inc.", "Corp.", "Jan.", "U.S.",
    "u.s.", "non-Mr.", "St.", "Gen.", "Sept.", "No.", "J.", "S.", "b.", "o.", "é.", "Ö.", "A.",
    "1.", "12.", "3.5.", "1,000.", "-2.", ".5.", "IV.", "ch.", "word.", "Word.", "end.", "x.y.",
    "...", "..", ". . .", "....", "a..", "?", "!", "!!", "?!", ".", "word?", "word!", "?.", ".?",
]
MARKS = ['"', "'", "(", ")", "[", "]", "{", "}", "\u201c", "\u201d", "\u2018", "\u2019", "\xab",
         "\xbb", "--", "-", ",", ";", ":", "`", "&", "#", "*", "@", "%"]
UNICODE = ["Ünïcode", "ünïcode", "İstanbul", "straße", "中文", "Ελλάδα", "ελλάδα", "٣.", "١٢",
           "\u00e9t\u00e9", "Ǆ", "ǅ", "ǆ", "\ufffd", "x\u0301", "ﬁ"]
SPACES = [" ", " ", " ", "", "", "  ", "\n", "\n\n", "\t", "\r", "\x0b", "\x0c", "\u00a0",
          "\u2009", "\u2028", "\x85", "\x1c", "\x1f", " \n ", "\u3000"]
# fmt: on
PIECES = WORDS + MARKED + MARKS + UNICODE


@pytest.fixture(scope="module")
def punkt():
    tok = english_tokenizer()
    return tok, FastPunkt(tok)


def text_of(parts: list[tuple[str, str]]) -> str:
    return "".join(piece + space for piece, space in parts)


hostile = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(SPACES)), max_size=40)
alphabet = st.sampled_from(list(". .?!\"')(]}[{\u201d\u2019\xbb-,;:aAbZ1é ٣\n\t\u00a0\x85\x1c"))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
@pytest.mark.slow
def test_same_sentences_as_punkt_on_hostile_text(punkt, parts) -> None:
    tok, fast = punkt
    text = text_of(parts)
    assert fast.tokenize(text) == tok.tokenize(text)


@settings(max_examples=800, deadline=None)
@given(st.lists(alphabet, max_size=60).map("".join))
@example(".\n\x1c .")  # found by this test: see the separator test below
def test_same_sentences_as_punkt_on_punctuation_soup(punkt, text) -> None:
    tok, fast = punkt
    assert fast.tokenize(text) == tok.tokenize(text)


@settings(max_examples=600, deadline=None)
@given(hostile)
def test_each_decision_is_punkts(punkt, parts) -> None:
    """The context decision alone, on arbitrary text (not only the contexts Punkt would cut)."""
    tok, fast = punkt
    text = text_of(parts)
    assert fast._breaks(text) == tok.text_contains_sentbreak(text)


# Punkt's own examples and the corners of its look-back: a candidate whose context would overlap
# the next one's is dropped, and a whitespace at the text's very first character counts as none.
# fmt: off
CASES = [
    "Punkt knows that the periods in Mr. Smith and Johann S. Bach\ndo not mark sentence "
    "boundaries.  And sometimes sentences\ncan start with non-capitalized words.  i is a good "
    "variable\nname.",
    '(How does it deal with this parenthesis?)  "It should be part of the\nprevious sentence." '
    "\"(And the same with this one.)\" ('And this one!')\n\"('(And (this)) '?)\" [(and this. )]",
    "Very bad acting!!! I promise.", " !! x", " a!! b. C", "\n!? x", "!! x", " . . . Then", "a.. B",
    "End.\u201d Next one.", "He said \u00abno.\u00bb Then left.", "1. The list. 2. Items.",
    "e.g. The thing. I.e. the end.", "U.S. Army. St. Paul.", "x.\u00a0Y. z", "Done.--Next",
    ".\n.\n. dots", "word.)) (Next", "", "   ", ".", "?!", "no marks at all  ",
]
# fmt: on


@pytest.mark.parametrize("text", CASES)
def test_punkts_examples_and_corners(punkt, text) -> None:
    tok, fast = punkt
    assert fast.tokenize(text) == tok.tokenize(text)
    assert fast.spans(text) == list(tok.span_tokenize(text))


SEPARATORS = ["\x1c", "\x1d", "\x1e", "\x1f", "\x1c\x1f"]


@pytest.mark.parametrize("word", [".", "word.", "Word?", "end!", "Mr.", "J.", "12.", "e.g.", "..."])
@pytest.mark.parametrize("gap", ["\n", " \n", "\n ", "\n\n", "\t\n\t", " "])
def test_a_next_token_of_separator_characters_alone(punkt, word, gap) -> None:
    """U+001C-U+001F are a token to Punkt's `regex` patterns but whitespace to `str.strip`: after
    a line break, such a token is dropped from the context, so the mark before it is the
    context's last token and does not break; on the mark's own line it is kept and does."""
    tok, fast = punkt
    for sep in SEPARATORS:
        for tail in ["", " x", " The", "\nThe end.", " ."]:
            text = f"A {word}{gap}{sep}{tail}"
            assert fast.tokenize(text) == tok.tokenize(text), text


def test_many_seeded_texts(punkt) -> None:
    """A fixed, larger draw than the property tests make on each run."""
    tok, fast = punkt
    rng = random.Random(20261201)
    for _ in range(4_000):
        n = rng.randint(1, 25)
        text = text_of([(rng.choice(PIECES), rng.choice(SPACES)) for _ in range(n)])
        assert fast.tokenize(text) == tok.tokenize(text), text


@pytest.mark.parametrize("seed", range(3))
def test_ten_thousand_character_lines(punkt, seed) -> None:
    tok, fast = punkt
    rng = random.Random(seed)
    line = ""
    while len(line) < 10_000:
        line += rng.choice(PIECES) + rng.choice([" ", " ", " ", "", "\u00a0"])
    glued = "".join(rng.choice(MARKED + WORDS) for _ in range(2_000))  # no space at all
    for text in (line, glued, line.replace(" ", "\n"), "a." * 5_000, "! " * 5_000):
        assert fast.tokenize(text) == tok.tokenize(text)


def test_decisions_do_not_depend_on_what_the_caches_hold(punkt) -> None:
    tok, _ = punkt
    rng = random.Random(7)
    parts = [[(rng.choice(PIECES), rng.choice(SPACES)) for _ in range(30)] for _ in range(300)]
    texts = [text_of(p) for p in parts]
    tiny = FastPunkt(tok, limit=3)  # starts over all the time
    assert [tiny.tokenize(t) for t in texts] == [tok.tokenize(t) for t in texts]


def test_trained_parameters_give_punkts_sentences_too() -> None:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    rng = random.Random(3)
    words = ["Zq.", "zq.", "Yv.", "The", "the", "xw", "Xw", "end."]
    corpus = [" ".join(rng.choice(words) for _ in range(9)) for _ in range(200)]
    tok = PunktSentenceTokenizer(train_parameters(corpus))
    fast = FastPunkt(tok)
    for text in corpus[:50] + [text_of([(rng.choice(PIECES), " ") for _ in range(40)])]:
        assert fast.tokenize(text) == tok.tokenize(text)


HAND_MADE = ["word.", "Word.", "thing", "Thing", "end.", "End.", "the", "The", "Zq.", "zq."]
HAND_MADE += ["Smith", "smith", "nope.", "It", "it", "S.", "Mr.", "J.", "1.", "...", '"', ")", "?"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(HAND_MADE), st.sampled_from(SPACES)), max_size=30))
def test_hand_made_parameters(parts) -> None:
    """Collocations whose first word is a plain word, an abbreviation that is no initial, a
    starter that the orthography cannot settle: what the English parameters never hold."""
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    params = PunktParameters()
    params.abbrev_types = {"zq", "mr", "s"}
    params.collocations = {("word", "thing"), ("end", "the"), ("zq", "smith"), ("nope", "it")}
    params.sent_starters = {"thing", "the", "however"}
    for typ, flags in {"thing": 0b100110, "the": 0b110010, "smith": 0b0010, "it": 0b1110}.items():
        params.ortho_context[typ] = flags
    tok = PunktSentenceTokenizer(params)
    text = text_of(parts)
    assert FastPunkt(tok).tokenize(text) == tok.tokenize(text)


def test_other_language_variables_keep_nltks_own_route() -> None:
    from nltk.tokenize.punkt import PunktLanguageVars, PunktSentenceTokenizer

    class Semicolons(PunktLanguageVars):
        sent_end_chars = (".", ";")

    tok = PunktSentenceTokenizer(lang_vars=Semicolons())
    assert splitter(tok) == tok.tokenize
    assert split_paragraphs(["One; two. Three"], tok) == tok.tokenize("One; two. Three")


def same_as_punkt(paragraphs: list[str]) -> None:
    tok = english_tokenizer()
    fast = FastPunkt(tok)
    for paragraph in paragraphs:
        assert fast.tokenize(paragraph) == tok.tokenize(paragraph), paragraph


@pytest.mark.slow
def test_every_paragraph_of_the_kernel_docs_as_books() -> None:
    files = sorted(KERNEL_BOOKS.rglob("*.txt"))
    if not files:
        pytest.skip(f"no books in {KERNEL_BOOKS}: run `make corpora` first")
    paragraphs = []
    for path in files:
        with open(path, "rb") as f:
            for doc in read_book(f, str(path), Tally()):
                paragraphs.extend(doc.paragraphs)
    assert len(paragraphs) > 30_000
    same_as_punkt(paragraphs)


@pytest.mark.parametrize("name", [ARTICLES, TABLE_MARKUP])
@pytest.mark.slow
def test_every_paragraph_of_real_wikipedia(name) -> None:
    from pipeline.sources.wikipedia.reader import read_wikipedia

    docs = read_wikipedia(io.BytesIO(gensim_xml(name)), name, Tally())
    paragraphs = [p for doc in docs for p in doc.paragraphs]
    assert paragraphs
    same_as_punkt(paragraphs)
