"""The masking rule (schemas.masking): golden cases on an 11-piece vocab, invariants, 80/10/10."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.config import ShardConfig
from schemas.masking import (
    MaskingRule,
    TokenSpec,
    candidates,
    mask_flat,
    mask_padded,
    num_to_predict,
)
from schemas.synthetic import SyntheticConfig
from schemas.vocab import Vocab

# [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 want=5 ##want=6 ##ed=7 un=8 runn=9 ##ing=10
VOCAB = Vocab(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "want", "##want", "##ed", "un", "runn", "##ing")
)
CLS, SEP, MASK = 2, 3, 4
WANT, WANT_C, ED, UN, RUNN, ING = 5, 6, 7, 8, 9, 10
# [CLS] un want ##ed [SEP] runn ##ing [SEP]: words {1}, {2, 3}, {5, 6}; B starts at 5
ROW = np.array([CLS, UN, WANT, ED, SEP, RUNN, ING, SEP], np.uint16)
ROW_B = 5


def rule(whole_word: bool = False, prob: float = 0.15, max_predictions: int = 20) -> MaskingRule:
    return MaskingRule(max_predictions, prob, whole_word, TokenSpec.from_vocab(VOCAB))


def flat_rows(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.concatenate(rows).astype(np.uint16)
    return ids, np.r_[0, np.cumsum([len(r) for r in rows])].astype(np.int64)


def mask_one(tokens, b_start: int, r: MaskingRule, seed: int):
    """(masked ids, positions, labels) of one row through `mask_flat`."""
    ids, offsets = flat_rows([tokens])
    m = mask_flat(ids, offsets, np.array([b_start]), r, np.random.default_rng(seed))
    return m.ids, m.positions, m.labels


def words_of(tokens: np.ndarray, b_start: int) -> list[list[int]]:
    """Each word's positions: a candidate piece and the `##` candidates right after it."""
    words: list[list[int]] = []
    for p in range(1, len(tokens) - 1):
        if p == b_start - 1:
            continue
        if VOCAB.pieces[tokens[p]].startswith("##") and words and words[-1][-1] == p - 1:
            words[-1].append(p)
        else:
            words.append([p])
    return words


def test_rule_from_vocab_and_config():
    r = rule(whole_word=True)
    assert (r.tokens.cls, r.tokens.sep, r.tokens.mask) == (CLS, SEP, MASK)
    assert r.tokens.replacements.tolist() == [WANT, WANT_C, ED, UN, RUNN, ING]
    assert np.flatnonzero(r.tokens.continuation).tolist() == [WANT_C, ED, ING]
    assert (r.max_predictions, r.masked_lm_prob, r.whole_word) == (20, 0.15, True)
    config = ShardConfig.parse(SyntheticConfig(whole_word_mask=True).build_config())
    from_config = MaskingRule.from_vocab(VOCAB, config)
    assert (from_config.max_predictions, from_config.masked_lm_prob) == (20, 0.15)
    assert from_config.whole_word


def test_rule_refuses_bad_values():
    with pytest.raises(ValueError, match="masked_lm_prob must be in"):
        rule(prob=1.5)
    with pytest.raises(ValueError, match="max_predictions must be >= 1"):
        rule(max_predictions=0)


def test_num_to_predict_golden():
    lengths = np.array([2, 3, 4, 5, 8, 10, 30, 128, 512])
    # round(1.5) = 2 and round(4.5) = 4: half to even, as the reference's int(round(x));
    # never more than the candidates (length - 3)
    assert num_to_predict(lengths, 0.15, 20).tolist() == [0, 0, 1, 1, 1, 2, 4, 19, 20]
    assert num_to_predict(lengths, 0.15, 80).tolist()[-2:] == [19, 77]


@given(st.integers(4, 1024), st.floats(0.01, 1.0), st.integers(1, 200))
def test_num_to_predict_is_the_reference_formula(length, prob, cap):
    reference = min(cap, max(1, int(round(length * prob))))  # create_pretraining_data.py
    assert num_to_predict(np.array([length]), prob, cap)[0] == min(reference, length - 3)


def test_candidates_are_positions_not_ids():
    got = candidates(np.array([8, 6]), np.array([5, 3]), 8)
    assert got.astype(int).tolist() == [
        [0, 1, 1, 1, 0, 1, 1, 0],  # [CLS] at 0, [SEP] at 4 and 7
        [0, 1, 0, 1, 1, 0, 0, 0],  # [SEP] at 2 and 5, padding after 6
    ]
    # A [SEP] id inside A is text to the rule (the pipeline writes such ids as [UNK]); the
    # frame positions are what is excluded, whatever ids they hold.
    tokens = np.array([CLS, UN, SEP, WANT, SEP, RUNN, SEP], np.uint16)
    _, positions, labels = mask_one(tokens, 5, rule(prob=1.0), seed=0)
    assert positions.tolist() == [1, 2, 3, 5] and labels.tolist() == [UN, SEP, WANT, RUNN]


def test_positions_come_from_candidates_whatever_the_row():
    """Rows too short for a frame, padding, and B starts outside the row or at its edges:
    without whole words each row takes exactly its budget, every position a candidate."""
    rng = np.random.default_rng(7)
    for _ in range(100):
        b, t = int(rng.integers(1, 20)), int(rng.integers(0, 40))
        ids = rng.integers(0, len(VOCAB), (b, t)).astype(np.uint16)
        lengths, b_start = rng.integers(0, t + 1, b), rng.integers(-1, t + 3, b)
        _, labels = mask_padded(ids, lengths, b_start, rule(prob=0.3), rng)
        chosen = labels >= 0
        assert not (chosen & ~candidates(lengths, b_start, t)).any()
        assert chosen.sum(axis=1).tolist() == num_to_predict(lengths, 0.3, 20).tolist()


def test_golden_budget_of_one_word():
    # 8 pieces x 0.15 = 1.2 -> one position; with whole words only `un` (one piece) fits
    for seed in range(20):
        out, positions, labels = mask_one(ROW, ROW_B, rule(whole_word=True), seed)
        assert positions.tolist() == [1] and labels.tolist() == [UN]
        assert out[1] in (MASK, UN, *rule().tokens.replacements)
        assert np.array_equal(np.delete(out, 1), np.delete(ROW, 1))
        _, positions, _ = mask_one(ROW, ROW_B, rule(), seed)
        assert len(positions) == 1 and positions[0] in (1, 2, 3, 5, 6)


def test_golden_every_candidate():
    # 8 x 1.0 = 8, capped at the 5 candidates: every position but the frame, in both modes
    for whole_word in (False, True):
        out, positions, labels = mask_one(ROW, ROW_B, rule(whole_word, prob=1.0), seed=3)
        assert positions.tolist() == [1, 2, 3, 5, 6]
        assert labels.tolist() == [UN, WANT, ED, RUNN, ING]
        assert out[[0, 4, 7]].tolist() == [CLS, SEP, SEP]


def test_golden_greedy_outcomes_and_their_odds():
    # budget round(8 x 0.5) = 4 over words of 1, 2, 2 pieces, visited in random order:
    # a 2-piece word then the other (probability 1/3) fills 4; otherwise `un` + one 2-piece word
    n = 6000
    ids = np.tile(ROW.astype(np.int64), (n, 1))
    lengths, b_start = np.full(n, len(ROW)), np.full(n, ROW_B)
    _, labels = mask_padded(ids, lengths, b_start, rule(True, prob=0.5), np.random.default_rng(0))
    outcomes = {tuple(np.flatnonzero(row >= 0)) for row in labels}
    assert outcomes == {(1, 2, 3), (1, 5, 6), (2, 3, 5, 6)}
    both = np.mean((labels >= 0).sum(axis=1) == 4)
    assert abs(both - 1 / 3) < 5 * np.sqrt(1 / 3 * 2 / 3 / n)


def test_golden_a_word_never_spans_the_first_sep():
    # [CLS] want [SEP] ##ing ##ed [SEP]: `##ing` after [SEP] starts a word; budget 2 takes
    # {1} or {3, 4}, never a piece of each
    tokens = np.array([CLS, WANT, SEP, ING, ED, SEP], np.uint16)
    seen = set()
    for seed in range(40):
        _, positions, _ = mask_one(tokens, 3, rule(True, prob=0.34), seed)
        seen.add(tuple(positions.tolist()))
    assert seen == {(1,), (3, 4)}


def test_padded_and_flat_layouts_agree():
    rng = np.random.default_rng(4)
    rows = [random_row(rng, 40) for _ in range(50)]
    ids, offsets = flat_rows([t for t, _ in rows])
    b_start = np.array([b for _, b in rows])
    lengths = np.diff(offsets)
    grid = np.zeros((len(rows), int(lengths.max())), np.uint16)
    valid = np.arange(grid.shape[1]) < lengths[:, None]
    grid[valid] = ids
    for whole_word in (False, True):
        r = rule(whole_word)
        flat = mask_flat(ids, offsets, b_start, r, np.random.default_rng(9))
        out, labels = mask_padded(grid, lengths, b_start, r, np.random.default_rng(9))
        assert np.array_equal(flat.ids, out[valid])
        assert np.array_equal(flat.labels, labels[labels >= 0])
        assert np.array_equal(np.diff(flat.offsets), (labels >= 0).sum(axis=1))


def test_same_generator_state_same_masks():
    ids, offsets = flat_rows([ROW, ROW, ROW])
    b_start = np.full(3, ROW_B)
    x = mask_flat(ids, offsets, b_start, rule(True, 0.5), np.random.default_rng(5))
    y = mask_flat(ids, offsets, b_start, rule(True, 0.5), np.random.default_rng(5))
    assert all(np.array_equal(a, b) for a, b in zip(x, y, strict=True))


def test_flat_refuses_rows_that_do_not_match():
    ids, offsets = flat_rows([ROW, ROW])
    with pytest.raises(ValueError, match="2 rows by their offsets .* 1 B starts"):
        mask_flat(ids, offsets, np.array([ROW_B]), rule(), np.random.default_rng(0))


def random_row(rng: np.random.Generator, max_len: int) -> tuple[np.ndarray, int]:
    """[CLS] A [SEP] B [SEP] of ordinary pieces, about a third of them `##` pieces."""
    n = int(rng.integers(5, max_len + 1))
    b_start = int(rng.integers(3, n - 1))
    tokens = rng.choice([WANT, UN, RUNN, WANT_C, ED, ING], size=n).astype(np.uint16)
    tokens[[0, b_start - 1, n - 1]] = [CLS, SEP, SEP]
    return tokens, b_start


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 12),
    max_len=st.integers(5, 90),
    whole_word=st.booleans(),
    prob=st.sampled_from([0.15, 0.3, 0.6]),
    max_predictions=st.integers(1, 25),
    block_rows=st.sampled_from([1, 3, 1024]),
)
def test_mask_invariants(seed, rows, max_len, whole_word, prob, max_predictions, block_rows):
    rng = np.random.default_rng(seed)
    made = [random_row(rng, max_len) for _ in range(rows)]
    ids, offsets = flat_rows([t for t, _ in made])
    r = rule(whole_word, prob, max_predictions)
    m = mask_flat(ids, offsets, np.array([b for _, b in made]), r, rng, block_rows)
    budget = num_to_predict(np.diff(offsets), prob, max_predictions)
    for i, (tokens, b_start) in enumerate(made):
        out = m.ids[offsets[i] : offsets[i + 1]]
        pos = m.positions[m.offsets[i] : m.offsets[i + 1]]
        lab = m.labels[m.offsets[i] : m.offsets[i + 1]]
        assert np.all(np.diff(pos) > 0), "ascending, each once"
        assert not {0, b_start - 1, len(tokens) - 1} & set(pos.tolist()), "never the frame"
        assert np.array_equal(lab, tokens[pos]), "labels are the original ids"
        assert set(np.flatnonzero(out != tokens).tolist()) <= set(pos.tolist())
        got = out[pos]
        assert not VOCAB.special_mask()[got[got != MASK]].any(), "replacements never special"
        if not whole_word:
            assert len(pos) == budget[i]
            continue
        assert len(pos) <= budget[i]
        taken = set(pos.tolist())
        for word in words_of(tokens, b_start):
            inside = [p in taken for p in word]
            assert all(inside) or not any(inside), "a word is taken whole or not at all"
            if not any(inside):
                assert len(word) > budget[i] - len(pos), "skipped only when it did not fit"
            elif any(out[word] == MASK):
                assert all(out[word] == MASK), "one 80/10/10 choice per word"


def assert_split(kinds: np.ndarray, p_same: np.ndarray) -> None:
    """kinds: how many units became [MASK], stayed, took random pieces; p_same: per unit, the
    chance that random pieces all equal the originals (the unit then looks kept)."""
    kept, rand = 0.1 + 0.1 * p_same, 0.1 * (1 - p_same)
    expected = np.array([0.8 * len(p_same), kept.sum(), rand.sum()])
    var = [0.8 * 0.2 * len(p_same), (kept * (1 - kept)).sum(), (rand * (1 - rand)).sum()]
    assert np.all(np.abs(kinds - expected) < 5 * np.sqrt(var)), (kinds, expected)


def test_80_10_10_within_binomial_tolerance():
    rng = np.random.default_rng(7)
    made = [random_row(rng, 64) for _ in range(3000)]
    ids, offsets = flat_rows([t for t, _ in made])
    m = mask_flat(ids, offsets, np.array([b for _, b in made]), rule(), rng)
    got = m.ids[np.repeat(offsets[:-1], np.diff(m.offsets)) + m.positions]
    kinds = [
        np.sum(got == MASK),
        np.sum(got == m.labels),
        np.sum((got != MASK) & (got != m.labels)),
    ]
    # a random piece equals the label 1 time in 6 (six ordinary pieces)
    assert_split(np.array(kinds), np.full(len(got), 1 / 6))


def test_whole_word_80_10_10_is_per_word():
    rng = np.random.default_rng(8)
    made = [random_row(rng, 64) for _ in range(3000)]
    ids, offsets = flat_rows([t for t, _ in made])
    m = mask_flat(ids, offsets, np.array([b for _, b in made]), rule(True), rng)
    where = np.repeat(offsets[:-1], np.diff(m.offsets)) + m.positions
    # a taken word starts at every taken piece but a `##` right after a taken piece
    follows = np.r_[False, np.diff(where) == 1]
    word = np.cumsum(~(follows & VOCAB.continuation_mask()[m.labels])) - 1
    out = m.ids[where]
    size = np.bincount(word)
    masks = np.bincount(word, out == MASK)
    changed = np.bincount(word, (out != MASK) & (out != m.labels)) > 0
    assert np.all((masks == 0) | (masks == size)), "a word's pieces are all [MASK] or none"
    kinds = [(masks > 0).sum(), ((masks == 0) & ~changed).sum(), changed.sum()]
    assert_split(np.array(kinds), (1 / 6) ** size)
