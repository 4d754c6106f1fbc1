"""Lowercasing strips marks that are parts of letters outside Latin and Greek (BERT's uncased
normalization takes every nonspacing mark for an accent): a lowercased build of such text says
so and names `--cased`; a cased one, and accents in Latin and Greek, say nothing."""

from __future__ import annotations

import json

import pytest
from tokenizers.normalizers import BertNormalizer

from pipeline.core.tokenize import loses_marks_lowercased
from pipeline.shell.cli import main
from schemas.notes import marks_note
from schemas.vocab import bert_normalizer

LOWERCASE = BertNormalizer(**bert_normalizer(True))


@pytest.mark.parametrize(
    "text, loses",
    [
        ("ひらがなだけ", True),  # が, だ
        ("かきくけこ", False),
        ("Мой край", True),  # й
        ("Привет мир", False),
        ("नमस्ते", True),
        ("สวัสดี", True),
        ("שָׁלוֹם", True),
        ("Café déjà vu, Ελληνικά", False),  # accents BERT's uncased models mean to strip
        ("한국어 中文。", False),
    ],
)
def test_the_letters_whose_marks_lowercasing_strips(text, loses):
    assert loses_marks_lowercased(text) is loses
    if loses:  # what BERT's uncased normalization does to them
        assert LOWERCASE.normalize_str(text) != text.lower()


def test_a_lowercased_build_says_so_and_a_cased_one_does_not(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("Мой край родной.\nОн говорит по-русски.\n\n" * 30)
    said = {}
    for case in ("--lowercase", "--cased"):
        out = str(tmp_path / case)
        argv = ["build", "--input", f"text:{tmp_path / 'in'}", "--out", out, "--workers", "1"]
        assert main([*argv, "--vocab-size", "100", case]) == 0
        said[case] = capsys.readouterr().out
        with open(f"{out}/manifest.json") as f:
            total = json.load(f)["counts"]["total"]
        assert total["sentences_losing_marks_if_lowercased"] == 30 < total["sentences"] == 60
    assert (
        "--cased keeps them" in said["--lowercase"] and "30 of 60 sentences" in said["--lowercase"]
    )
    assert "--cased keeps them" not in said["--cased"]
    assert marks_note({"sentences": 1000, "sentences_losing_marks_if_lowercased": 49}, True) is None


def test_a_real_bulgarian_article_is_noted():
    """Bulgarian Wikipedia (gensim's export): a third of its sentences hold `й`, which BERT's
    uncased normalization makes `и`, so `който` (who, one) reads as `които` (who, several)."""
    import io

    from pipeline.core.sentences import split_paragraphs
    from pipeline.sources.documents import Tally
    from pipeline.sources.wikipedia.reader import read_wikipedia
    from tests.pipeline.wikidata import BULGARIAN, gensim_xml

    [doc] = read_wikipedia(io.BytesIO(gensim_xml(BULGARIAN)), BULGARIAN, Tally())
    sentences = split_paragraphs(doc.paragraphs)
    marked = sum(map(loses_marks_lowercased, sentences))
    assert marked > len(sentences) / 4
    total = {"sentences": len(sentences), "sentences_losing_marks_if_lowercased": marked}
    assert marks_note(total, True) and marks_note(total, False) is None
    assert "който" in " ".join(sentences) and LOWERCASE.normalize_str("който") == "които"
