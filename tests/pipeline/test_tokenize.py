"""Vocab training and tokenization parity with a standard BERT tokenizer."""

from __future__ import annotations

import glob
import os
from collections import Counter

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer

from pipeline.core.config import VocabConfig
from pipeline.core.sentences import split_paragraphs
from pipeline.core.tokenize import encode_documents, train_vocab
from schemas.vocab import SPECIAL_TOKENS
from tests.helpers import SAMPLE, google_layout


def sample_sentences() -> list[str]:
    out = []
    for path in sorted(glob.glob(f"{SAMPLE}/books/**/*.txt", recursive=True)):
        paragraphs = open(path, encoding="utf-8").read().split("\n\n")
        out.extend(split_paragraphs([" ".join(p.split()) for p in paragraphs if p.strip()]))
    for path in sorted(glob.glob(f"{SAMPLE}/text/*.txt")):
        out.extend(line.strip() for line in open(path, encoding="utf-8") if line.strip())
    return out


@pytest.fixture(scope="module")
def sentences():
    return sample_sentences()


@pytest.fixture(scope="module")
def trained(sentences):
    return train_vocab(sentences, VocabConfig(vocab_size=3000, min_frequency=1))[0]


def test_trained_vocab_has_specials_first_and_is_deterministic(sentences, trained):
    assert trained.pieces[:5] == SPECIAL_TOKENS
    again = train_vocab(sentences, VocabConfig(vocab_size=3000, min_frequency=1))[0]
    assert again == trained
    assert any(p.startswith("##") for p in trained.pieces)


def test_google_layout_special_ids_are_read_from_the_vocab(trained):
    sp = google_layout(trained).special_ids
    assert (sp.pad, sp.unk, sp.cls, sp.sep, sp.mask) == (0, 100, 101, 102, 103)
    assert google_layout(trained).special_mask()[1:100].all()


@pytest.mark.parametrize("layout", ["trained", "google"])
def test_ids_equal_bert_wordpiece_tokenizer(tmp_path, sentences, trained, layout):
    vocab = trained if layout == "trained" else google_layout(trained)
    path = tmp_path / "vocab.txt"
    path.write_text(vocab.to_text(), encoding="utf-8")
    reference = BertWordPieceTokenizer(str(path), lowercase=True)
    docs = [(f"d{i}", "test", sentences[i : i + 7]) for i in range(0, len(sentences), 7)]
    encoded = {d.id: d for d in encode_documents(docs, vocab, lowercase=True)}
    for doc_id, _, sents in docs:
        expected = [reference.encode(s, add_special_tokens=False).ids for s in sents]
        expected = [e for e in expected if e]
        got = encoded[doc_id]
        assert got.num_sentences == len(expected)
        assert got.ids.tolist() == [t for e in expected for t in e]
        assert np.diff(got.offsets).tolist() == [len(e) for e in expected]


def test_cased_vocab_keeps_case_and_accents(sentences):
    vocab = train_vocab(sentences, VocabConfig(vocab_size=3000, min_frequency=1, lowercase=False))[
        0
    ]
    assert any(p[:1].isupper() for p in vocab.pieces if not p.startswith("["))


def test_sentences_without_pieces_are_removed(trained):
    [doc] = encode_documents([("d", "t", ["hello world.", "\u200b", "again."])], trained, True)
    assert doc.num_sentences == 2
    assert encode_documents([("e", "t", ["\u200b"])], trained, True) == []


def test_sample_corpus_has_non_ascii_and_cjk():
    text = open(os.path.join(SAMPLE, "text", "wiki-style.txt"), encoding="utf-8").read()
    assert any("\u4e00" <= c <= "\u9fff" for c in text) and "é" in text


def test_control_tokens_written_in_text_become_unk(trained):
    counts: Counter = Counter()
    [doc] = encode_documents([("d", "t", ["before [SEP] after [MASK]."])], trained, True, counts)
    sp = trained.special_ids
    assert sp.sep not in doc.ids and sp.mask not in doc.ids
    assert int((doc.ids == sp.unk).sum()) >= 2
    assert counts[("t", "control_tokens_in_text")] == 2


def test_a_vocabs_token_spec_and_digest_are_made_once_and_stay_as_made():
    """Every bucket asks for the vocab's token ids and every shard records its digest: both
    are made once per vocab, the ids read-only since the buckets share them."""
    import hashlib

    from pipeline.core.tokenize import token_spec
    from schemas.masking import TokenSpec
    from schemas.vocab import Vocab

    vocab = Vocab((*SPECIAL_TOKENS, "the", "##s", "[unused0]"))
    spec = token_spec(vocab)
    assert token_spec(vocab) is spec
    fresh = TokenSpec.from_vocab(vocab)
    assert (spec.cls, spec.sep, spec.mask) == (fresh.cls, fresh.sep, fresh.mask)
    assert spec.replacements.tolist() == fresh.replacements.tolist() == [5, 6]
    assert spec.continuation.tolist() == fresh.continuation.tolist()
    with pytest.raises(ValueError, match="read-only"):
        spec.replacements[0] = 0
    with pytest.raises(ValueError, match="read-only"):
        spec.continuation[0] = True
    digest = hashlib.sha256(vocab.to_text().encode("utf-8")).hexdigest()
    assert vocab.sha256 == digest
    assert vocab.sha256 is vocab.sha256
