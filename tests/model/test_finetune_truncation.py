"""Examples cut to fit are counted: a 100,000-character sentence is trained on as its first
--max-seq-length pieces, and the run says so in one line and in results.json."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer

from model.cli import main
from model.finetune.features import (
    sequence_features,
    span_features,
    token_features,
    truncation_report,
)
from model.finetune.readers import SquadExample
from tests.model.helpers import VOCAB, finetune_args, write_sst2


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> BertWordPieceTokenizer:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text(VOCAB.to_text())
    return BertWordPieceTokenizer(str(path), lowercase=True)


def test_cut_sentences_and_pairs_are_flagged(tok):
    texts = [("the movie was good",), ("the movie " * 40,), ("the plot", "a film " * 40)]
    features = sequence_features(tok, texts, [0, 1, 0], 16)
    cut = "--max-seq-length 16"
    assert [f["truncated"] for f in features] == [None, cut, cut]
    assert [len(f["ids"]) for f in features] == [6, 16, 16]
    report, note = truncation_report(features[:2], features[2:])
    assert report == {"train": 1, "dev": 1, "limit": "--max-seq-length 16"}
    assert note == (
        "1 of 2 training and 1 of 1 dev examples were cut to --max-seq-length 16: the model "
        "never sees the rest of them"
    )


def test_nothing_cut_says_nothing(tok):
    features = sequence_features(tok, [("the movie was good",)], [1], 16)
    assert truncation_report(features, features) == (None, None)


def test_cut_tagged_sentences_are_flagged(tok):
    words = [["john", "lives", "in", "paris"], ["mary", "jones", "visited"] * 10]
    features = token_features(tok, words, [[0] * 4, [0] * 30], 12)
    assert [bool(f["truncated"]) for f in features] == [False, True]


def test_a_long_question_is_one_cut_example_over_all_its_windows(tok):
    context = " ".join(["the river north of the city"] * 20)
    long_q = SquadExample("q1", "what " * 30 + "river ?", context, ("river",), 4)
    short_q = SquadExample("q2", "what river ?", context, ("river",), 4)
    features = span_features(tok, [long_q, short_q], 64, 16, 8)
    assert len({f["example"] for f in features}) == 2 and len(features) > 4
    assert {f["truncated"] for f in features if f["example"] == 0} == {"--max-query-length 8"}
    assert {f["truncated"] for f in features if f["example"] == 1} == {None}
    report, _ = truncation_report(features, features[:1])
    assert report == {"train": 1, "dev": 1, "limit": "--max-query-length 8"}


def test_a_100000_character_sentence_is_counted_in_the_run(pretrained_run, tmp_path, capsys):
    data = write_sst2(str(tmp_path / "SST-2"), np.random.default_rng(0))
    with open(os.path.join(data, "train.tsv"), "a") as f:
        f.write(("the movie was good " * 5264)[:100_000] + "\t1\n")
    run = str(tmp_path / "run")
    capsys.readouterr()
    assert main(finetune_args("sst2", data, pretrained_run, run, "--epochs", "1")) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "were cut" in line]
    assert notes == [
        "note: 1 of 49 training and 0 of 16 dev examples were cut to --max-seq-length 128: "
        "the model never sees the rest of them"
    ]
    with open(os.path.join(run, "results.json")) as f:
        results = json.load(f)
    assert results["truncated"] == {"train": 1, "dev": 0, "limit": "--max-seq-length 128"}
    assert 0 <= results["accuracy"] <= 1
