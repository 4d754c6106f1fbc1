"""`split_words` cuts ASCII sentences into BERT's words from byte classes alone; here it is
checked against the same split written as regular expressions over each sentence."""

from __future__ import annotations

import random
import re
import string

import pyarrow as pa
import pytest

from pipeline.core.word_cache import split_words

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # dropped by BERT's cleaning
# letters and digits (Latin-1's too), or one mark (the ASCII ones, dashes and curly quotes)
WORD = re.compile("[A-Za-z0-9\u00c0-\u00ff]+|[!-/:-@\\[-`{-~\u2013\u2014\u2018\u2019\u201c\u201d]")


def regex_words(sentence: str) -> list[str]:
    return WORD.findall(CONTROL.sub("", sentence))


def check(sentences: list[str], text: pa.Array | None = None) -> None:
    words, first = split_words(text if text is not None else pa.array(sentences, pa.large_string()))
    words = words.to_pylist()
    assert len(first) == len(sentences) + 1
    for k, sentence in enumerate(sentences):
        assert words[first[k] : first[k + 1]] == regex_words(sentence), repr(sentence)


def test_words_and_marks_and_what_the_cleaning_drops():
    check(["Hello, world!", "x86_64 don't", "a\x01b c\x7fd", "", "\x00\x01", "  \t\r\n", "[SEP]"])


def test_latin_letters_join_words_and_wide_marks_stand_alone():
    check(["Caf\u00e9 \u00c9cole\u2014na\u00efve", "\u201cQuoted\u201d \u2018x\u2019"])
    check(["2\u00d73\u00f7"])
    check(["\u00ff", "\u2013", "a\u2013\u00e9", "\u00e9\x01\u00e8", "\u00c0b\u2019s"])


def test_a_word_never_runs_on_into_the_next_sentence():
    check(["ab", "cd", "e", "", "f.", "g\x01", "\x01h", "i "])


def test_a_slice_of_an_array_is_split_as_its_own_sentences():
    sentences = ["skip me", "one two", "three, four", "five"]
    text = pa.array(sentences, pa.large_string())[1:]
    check(sentences[1:], text)


def test_no_sentences_and_only_empty_ones():
    check([])
    check(["", "", ""])


@pytest.mark.parametrize("seed", range(3))
def test_random_ascii_is_split_as_the_regular_expressions_split_it(seed):
    rng = random.Random(seed)
    alphabet = string.printable + "".join(map(chr, range(32))) + "\x7f"
    alphabet += "\u00c0\u00c9\u00df\u00e9\u00ff\u00d7\u2013\u2014\u2018\u2019\u201c\u201d"
    sentences = [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(2000)
    ]
    check(sentences)
