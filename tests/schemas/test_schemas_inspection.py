"""Decoding with masks shown, padding figures and histograms."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from schemas.inspection import (
    decode_example,
    dynamic_padding_waste,
    examples,
    format_example,
    histogram,
    summarize,
    text_histogram,
)
from schemas.reader import ShardSet
from tests.schemas.helpers import VOCAB, make_columns, sound_rows


def test_decode_marks_masked_pieces_and_joins_wordpieces():
    rows = sound_rows()
    rows[0]["pos"], rows[0]["lab"] = [2, 4, 7], [6, 8, 5]  # "##s" kept as it was
    e = decode_example(VOCAB, make_columns(rows), 0, shard=3, path="shards/x.arrow", first_row=40)
    assert e.text_a == "the [MASK→fox] jump[=##s]"
    assert e.text_b == "over [dog→the] dog"
    assert (e.shard, e.row, e.length, e.len_a, e.len_b, e.masked) == (3, 40, 10, 4, 3, 3)
    text = format_example(e)
    assert text.startswith("shard 3 row 40  (shards/x.arrow)\n")
    assert "length 10 = A 4 + B 3 + 3 specials; 3 masked; is_random_next=0 (B follows A)" in text


def test_an_example_is_four_lines_whatever_its_path_and_pieces_hold():
    e = decode_example(VOCAB, make_columns(sound_rows()), 0, path="out\n/shards/x.arrow")
    # a terminal escape, a line separator: pieces a vocab.txt line may hold
    e = dataclasses.replace(e, text_a="fox\x1b[2Jjumps", text_b="over\u2028dog")
    text = format_example(e)
    assert text.count("\n") == 4 and text.startswith("shard 0 row 0  (out\\n/shards/x.arrow)\n")
    assert "  A: fox\\x1b[2Jjumps\n" in text and "  B: over\\u2028dog\n" in text


def test_unmasked_wordpieces_join_without_marks():
    e = decode_example(VOCAB, make_columns(sound_rows()), 1)
    assert (e.text_a, e.text_b) == ("[=dog]", "over")


def test_padding_waste():
    lengths = np.array([128, 64])
    assert dynamic_padding_waste(lengths, 2, np.random.default_rng(0)) == pytest.approx(0.25)
    assert dynamic_padding_waste(lengths, 1, np.random.default_rng(0)) == 0.0
    # Padded to a multiple of 8: two rows of 5 take 2 x 8 slots.
    assert dynamic_padding_waste(np.array([5, 5]), 2, np.random.default_rng(0)) == 0.375


def test_histogram_bins_end_at_the_top():
    counts, edges = histogram(np.array([1, 8, 9, 128, 128]), 1, 128, 16)
    assert edges[0] == 1 and edges[-1] == 129 and len(counts) == 16
    assert counts[0] == 2 and counts[1] == 1 and counts[-1] == 2
    lines = text_histogram(np.array([1, 8, 9, 128, 128]), 1, 128, 16).splitlines()
    assert len(lines) == 16
    assert lines[-1].split("|")[0].strip() == "121-128"
    assert lines[-1].rstrip().endswith("2  40.0%")


def test_summary_matches_the_manifest(synthetic_shards):
    ss = ShardSet.open(synthetic_shards)
    s = summarize(ss)
    assert s.rows == ss.manifest.rows
    assert s.tokens == sum(e.tokens for e in ss.manifest.shards)
    assert s.masked == sum(e.masked_tokens for e in ss.manifest.shards)
    assert s.random_next == sum(e.random_next for e in ss.manifest.shards)
    assert s.fixed_waste == pytest.approx(1 - s.tokens / (s.rows * 128))
    assert 0 <= s.dynamic_waste <= s.fixed_waste


def test_examples_pick_rows_of_a_shard(synthetic_shards):
    ss = ShardSet.open(synthetic_shards)
    shown = examples(ss, shard=1, row=4, n=2)
    assert [(e.shard, e.row) for e in shown] == [(1, 4), (1, 5)]
    assert all(e.length == e.len_a + e.len_b + 3 for e in shown)
    with pytest.raises(IndexError, match="--shard 9: the set has shards 0..3"):
        examples(ss, shard=9)
