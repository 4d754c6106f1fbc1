"""The word cache gives exactly the BERT tokenizer's ids, on text built to trip it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.core.tokenize import bert_tokenizer, encode_documents, sentence_pieces
from pipeline.core.word_cache import WordCache, by_cache
from schemas.vocab import SPECIAL_TOKENS, Vocab

WORDS = ["the", "The", "THE", "kernel", "Kernel's", "x86_64", "3.14", "don't", "co-op", "a" * 120]
ODD = [" ", "\t", "\n", "\r", "\x00", "\x01", "\x0b", "\x0c", "\x1c", "\x1f", "\x7f", "[", "]"]
ODD += list("!\"#$%&'()*+,-./:;<=>?@\\^_`{|}~") + ["[SEP]", "[sep]", "[MASK]", "[UNK]", "[CLS]"]
ODD += ["[PAD]", "[SE\x01P]", "é", "Ünïcode", "中文", "\u2014", "\u00a0", "\u2028", "\ufffd"]
# what the cache takes beyond ASCII, and its neighbours that it does not
ODD += ["\u00c0", "\u00ff", "\u00d7", "\u00f7", "\u00df", "\u00c6", "\u2013", "\u2018", "\u2019"]
ODD += ["\u201c", "\u201d", "na\u00efve", "\u00bf", "\u00b5", "\u2012", "\u2015", "\u201e"]
ODD += ["e\u0301"]


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    letters = [chr(c) for c in range(33, 127)]
    words = ["the", "kernel", "don", "co", "op", "x86", "64", "3", "14", "sep", "mask"]
    pieces = list(SPECIAL_TOKENS) + letters + ["##" + c for c in letters] + words + ["##s", "##el"]
    return Vocab(tuple(dict.fromkeys(pieces)))


def hostile(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        parts = [rng.choice(WORDS if rng.random() < 0.6 else ODD) for _ in range(rng.randint(0, 9))]
        out.append("".join(p + rng.choice(["", " ", "  "]) for p in parts))
    return out


def tokenizer_ids(sentences, vocab, lowercase) -> list[list[int]]:
    tok = bert_tokenizer(vocab, lowercase)
    return [e.ids for e in tok.encode_batch_fast(sentences, add_special_tokens=False)]


@pytest.mark.parametrize("lowercase", [True, False])
def test_sentence_pieces_equal_the_tokenizer_on_hostile_text(vocab, lowercase):
    sentences = hostile(random.Random(7), 3000)
    assert 0 < sum(map(by_cache, sentences)) < len(sentences)  # both routes are taken
    flat, lengths = sentence_pieces(sentences, vocab, lowercase)
    expected = tokenizer_ids(sentences, vocab, lowercase)
    assert lengths.tolist() == [len(x) for x in expected]
    assert flat.tolist() == [i for ids in expected for i in ids]


def test_special_token_text_and_other_non_ascii_go_to_the_tokenizer():
    assert by_cache("plain text, with [brackets].")
    assert not by_cache("before [SEP] after")
    assert by_cache("caf\u00e9 \u00c9cole \u201cna\u00efve\u201d \u2014 2\u00d73")
    for other in ("\u4e2d\u6587", "a\u00a0b", "\u0101", "\u03b1", "\u2212", "caf\u00e9 [SEP]"):
        assert not by_cache(other), other


def test_the_cache_starts_over_past_its_limit_with_the_same_ids(vocab):
    cache = WordCache(bert_tokenizer(vocab, True), True, limit=5)
    sentences = [s for s in hostile(random.Random(3), 400) if by_cache(s)]
    expected = tokenizer_ids(sentences, vocab, True)
    for k in range(0, len(sentences), 50):  # many calls, each past the limit
        flat, lengths = cache.encode(sentences[k : k + 50])
        want = expected[k : k + 50]
        assert lengths.tolist() == [len(x) for x in want]
        assert flat.tolist() == [i for ids in want for i in ids]
    assert len(cache.rows) < 5 + 200  # started over rather than growing


def test_documents_keep_their_sentences_and_drop_empty_ones(vocab):
    docs = [("a", "s", ["the kernel", "\x00", "café"]), ("b", "s", ["\x01"]), ("c", "t", ["[SEP]"])]
    out = encode_documents(docs, vocab, True)
    assert [d.id for d in out] == ["a", "c"]
    a = out[0]
    assert a.offsets.tolist() == [0, 2, 2 + len(tokenizer_ids(["café"], vocab, True)[0])]
    assert a.ids.dtype == np.uint16
    assert out[1].ids.tolist() == [vocab.special_ids.unk]  # the control id, made [UNK]
