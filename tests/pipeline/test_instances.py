"""The reference algorithm's pure functions: golden cases and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import InstanceConfig, default_max_predictions
from pipeline.core.instances import (
    Rows,
    TokenizedDoc,
    TokenSpec,
    document_rows,
    mask_rows,
    num_to_predict,
    segment_gather,
    truncate_pair,
    truncation_plan,
)

CLS, SEP, MASK = 2, 3, 4
VOCAB = 100
SPECIAL = np.zeros(VOCAB, dtype=bool)
SPECIAL[:5] = True
SPECIAL[50:55] = True  # "[unusedN]"-like rows inside the vocab
CONT = np.zeros(VOCAB, dtype=bool)
CONT[80:] = True  # "##" pieces
SPEC = TokenSpec(CLS, SEP, MASK, np.flatnonzero(~SPECIAL), CONT)


def doc(doc_id: str, lengths: list[int], base: int = 5) -> TokenizedDoc:
    ids = (np.arange(sum(lengths)) % 40 + base).astype(np.uint16)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return TokenizedDoc(doc_id, ids, offsets)


class Inst:
    """One row of `Rows`, for readable assertions."""

    def __init__(self, rows: Rows, r: int, is_random_next: bool = False):
        lo, hi = rows.offsets[r], rows.offsets[r + 1]
        m = slice(rows.masked_offsets[r], rows.masked_offsets[r + 1])
        self.tokens = rows.ids[lo:hi]
        self.segment_b_start = int(rows.segment_b_start[r])
        self.masked_positions = rows.masked_positions[m]
        self.masked_labels = rows.masked_labels[m]
        self.is_random_next = is_random_next


def mask_tokens(tokens, b_start, cfg, spec, rng):
    """Mask one row through the bucket-wide `mask_rows`."""
    rows = Rows(tokens, np.array([0, len(tokens)]), np.array([b_start], dtype=np.uint16))
    inst = Inst(mask_rows(rows, cfg, spec, rng), 0)
    return inst.tokens, inst.masked_positions, inst.masked_labels


class FixedCoins:
    """A stand-in generator whose random() returns given values (for golden truncation cases)."""

    def __init__(self, values):
        self.values = iter(float(v) for v in values)

    def random(self):
        return next(self.values)

    def getrandbits(self, n):
        """n coins as bits: bit k set when coin k is below 0.5 (drop k from the front)."""
        return sum(1 << k for k in range(n) if next(self.values) < 0.5)


def test_max_predictions_defaults_follow_the_reference_advice():
    assert default_max_predictions(128, 0.15) == 20
    assert default_max_predictions(512, 0.15) == 80


@pytest.mark.parametrize(
    "length, expected", [(128, 19), (5, 1), (4, 1), (100, 15), (10, 2), (30, 4), (300, 20)]
)
def test_num_to_predict_formula(length, expected):
    # min(20, max(1, round(len * 0.15))): round(19.2)=19, round(0.75)=1, round(1.5)=2, round(4.5)=4
    assert num_to_predict(length, InstanceConfig()) == expected


def test_truncation_golden_longer_side_first_then_alternating():
    # A=6, B=3, max 5: drops 4: A (6>3), A (5>3), A (4>3), then tie -> B.
    # Coins < 0.5 mean "front": A gets front, back, front; B gets back.
    plan = truncation_plan(6, 3, 5, FixedCoins([0.1, 0.9, 0.2, 0.7]))
    assert plan == (2, 1, 0, 1)
    a, b = truncate_pair(np.arange(6), np.arange(10, 13), 5, FixedCoins([0.1, 0.9, 0.2, 0.7]))
    assert a.tolist() == [2, 3, 4] and b.tolist() == [10, 11]


def test_truncation_golden_tie_drops_from_b():
    # Equal lengths 4/4, max 5: B, A, B.
    assert truncation_plan(4, 4, 5, FixedCoins([0.9, 0.9, 0.1])) == (0, 1, 1, 1)


def reference_truncate(a, b, max_tokens, coins):
    """The reference's loop, verbatim in spirit, over the same coins."""
    a, b, k = list(a), list(b), 0
    while len(a) + len(b) > max_tokens:
        trunc = a if len(a) > len(b) else b
        if coins[k] < 0.5:
            del trunc[0]
        else:
            trunc.pop()
        k += 1
    return a, b


@given(st.integers(1, 60), st.integers(1, 60), st.integers(2, 70), st.integers(0, 2**31))
def test_truncation_matches_the_reference_loop(la, lb, max_tokens, seed):
    coins = np.random.default_rng(seed).random(la + lb)
    a, b = truncate_pair(np.arange(la), np.arange(100, 100 + lb), max_tokens, FixedCoins(coins))
    ra, rb = reference_truncate(range(la), range(100, 100 + lb), max_tokens, coins)
    assert a.tolist() == ra and b.tolist() == rb


def test_truncation_of_very_long_pairs_matches_the_reference_loop():
    rng = np.random.default_rng(0)
    for la, lb in [(9000, 10), (5000, 4990), (20, 7000)]:
        coins = rng.random(la + lb)
        a, b = truncate_pair(np.arange(la), np.arange(la, la + lb), 125, FixedCoins(coins))
        ra, rb = reference_truncate(range(la), range(la, la + lb), 125, coins)
        assert a.tolist() == ra and b.tolist() == rb


def pair(la: int, lb: int, rng) -> tuple[np.ndarray, int]:
    body = rng.choice(SPEC.replacements, size=la + lb)
    tokens = np.concatenate([[CLS], body[:la], [SEP], body[la:], [SEP]]).astype(np.uint16)
    return tokens, la + 2


@settings(max_examples=200)
@given(st.integers(1, 80), st.integers(1, 80), st.booleans(), st.integers(0, 2**31))
def test_mask_invariants(la, lb, whole_word, seed):
    cfg = InstanceConfig(whole_word_mask=whole_word)
    rng = np.random.default_rng(seed)
    tokens, b_start = pair(la, lb, rng)
    out, positions, labels = mask_tokens(tokens, b_start, cfg, SPEC, rng)
    n = num_to_predict(len(tokens), cfg)
    assert np.all(np.diff(positions) > 0), "ascending and unique"
    specials = {0, b_start - 1, len(tokens) - 1}
    assert not specials & set(positions.tolist()), "never on [CLS]/[SEP]"
    assert out[0] == CLS and out[b_start - 1] == SEP and out[-1] == SEP
    assert labels.tolist() == tokens[positions].tolist()
    if whole_word:
        assert 0 <= len(positions) <= n
    else:
        assert len(positions) == n
    changed = np.flatnonzero(out != tokens)
    assert set(changed.tolist()) <= set(positions.tolist()), "only selected positions change"
    assert not SPECIAL[out[positions][out[positions] != MASK]].any(), "no special replacement"


def test_80_10_10_within_binomial_tolerance():
    cfg = InstanceConfig()
    rng = np.random.default_rng(7)
    kinds = np.zeros(3, dtype=np.int64)  # mask, kept, random
    for _ in range(3000):
        tokens, b_start = pair(60, 60, rng)
        out, positions, labels = mask_tokens(tokens, b_start, cfg, SPEC, rng)
        got = out[positions]
        kinds += [
            np.sum(got == MASK),
            np.sum(got == labels),
            np.sum((got != MASK) & (got != labels)),
        ]
    n = kinds.sum()
    # A random replacement equals the label by chance 1/len(replacements) of the time.
    p_same = 1 / len(SPEC.replacements)
    expected = np.array([0.8, 0.1 + 0.1 * p_same, 0.1 * (1 - p_same)])
    sd = np.sqrt(n * expected * (1 - expected))
    assert np.all(np.abs(kinds - n * expected) < 5 * sd), (kinds / n, expected)


def test_whole_word_masking_takes_every_piece_of_a_word():
    cfg = InstanceConfig(whole_word_mask=True, max_predictions_per_seq=20)
    rng = np.random.default_rng(3)
    for _ in range(200):
        # words of 1-3 pieces: a start piece (<80) then "##" pieces (>=80)
        pieces = []
        for _ in range(30):
            pieces.append(int(rng.integers(5, 50)))
            pieces.extend(int(x) for x in rng.integers(80, 100, size=rng.integers(0, 3)))
        la = len(pieces) // 2
        tokens = np.array([CLS, *pieces[:la], SEP, *pieces[la:], SEP], dtype=np.uint16)
        _, positions, _ = mask_tokens(tokens, la + 2, cfg, SPEC, rng)
        chosen = set(positions.tolist())
        for p in chosen:
            if CONT[tokens[p]] and p - 1 not in (0, la + 1):
                assert p - 1 in chosen, "a continuation piece is masked with its word"
            if p + 1 < len(tokens) and CONT[tokens[p + 1]] and p + 1 != la + 2:
                assert p + 1 in chosen


def instances_of(docs, index, cfg, seed=0, can_pick_other=True):
    rows, pairs = document_rows(docs, index, cfg, SPEC, seed, can_pick_other)
    return [Inst(rows, r, p.is_random_next) for r, p in enumerate(pairs)]


def unmask(inst) -> np.ndarray:
    t = inst.tokens.copy()
    t[inst.masked_positions] = inst.masked_labels
    return t


def test_actual_next_pairs_are_consecutive_sentences():
    cfg = InstanceConfig(max_seq_length=40, short_seq_prob=0, random_next_prob=0)
    d = doc("a", [10, 10, 17, 12, 25, 30, 7])  # chunks reach the target 37 exactly: no truncation
    made = instances_of([d], 0, cfg, can_pick_other=False)
    stream = d.ids.tolist()
    assert len(made) == 3
    for inst in made:
        t = unmask(inst).tolist()
        a, b = t[1 : inst.segment_b_start - 1], t[inst.segment_b_start : -1]
        # A ends and B begins on a sentence boundary of the document (no truncation here)
        joined = a + b
        bounds = d.offsets.tolist()
        assert any(
            stream[s : s + len(joined)] == joined
            and s + len(a) in bounds
            and s + len(joined) in bounds
            for s in bounds
        )
        assert not inst.is_random_next


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=12), min_size=1, max_size=5),
    st.integers(0, 2**31),
    st.sampled_from([16, 32, 64, 128]),
)
def test_instance_invariants(doc_lengths, seed, seq_len):
    cfg = InstanceConfig(
        max_seq_length=seq_len, max_predictions_per_seq=default_max_predictions(seq_len, 0.15)
    )
    docs = [doc(f"d{i}", lengths, base=100 * (i + 1)) for i, lengths in enumerate(doc_lengths)]
    for i in range(len(docs)):
        for inst in instances_of(docs, i, cfg, seed, can_pick_other=len(docs) > 1):
            t = inst.tokens
            assert len(t) <= seq_len
            assert t[0] == CLS and t[inst.segment_b_start - 1] == SEP and t[-1] == SEP
            assert np.count_nonzero(unmask(inst) == SEP) == 2, "exactly two [SEP]"
            assert inst.segment_b_start >= 3 and inst.segment_b_start <= len(t) - 2
            assert len(inst.masked_positions) == num_to_predict(len(t), cfg)
            if inst.is_random_next:
                b = unmask(inst)[inst.segment_b_start : -1]
                own = set(docs[i].ids.tolist())
                assert not set(b.tolist()) <= own or len(docs) == 1


def test_random_next_b_never_comes_from_the_same_document():
    cfg = InstanceConfig(max_seq_length=64, random_next_prob=1.0)
    # Same document twice (two dupe passes) plus one other: B must always be the other.
    a, other = doc("a", [5] * 20, base=5), doc("b", [5] * 20, base=60)
    units = [a, a, other]
    for seed in range(50):
        for inst in instances_of(units, 0, cfg, seed):
            b = unmask(inst)[inst.segment_b_start : -1]
            assert inst.is_random_next and b.min() >= 60


def test_single_document_bucket_yields_only_actual_next():
    cfg = InstanceConfig(max_seq_length=64, random_next_prob=1.0)
    made = instances_of([doc("a", [7] * 30)], 0, cfg, can_pick_other=False)
    assert made and not any(i.is_random_next for i in made)


def test_lone_sentence_without_another_document_is_skipped():
    cfg = InstanceConfig(max_seq_length=64)
    assert instances_of([doc("a", [9])], 0, cfg, can_pick_other=False) == []


def test_segment_gather():
    got = segment_gather(np.array([5, 0, 9]), np.array([2, 0, 3]))
    assert got.tolist() == [5, 6, 9, 10, 11]


def test_rows_of_several_lengths_mask_independently():
    rng = np.random.default_rng(5)
    parts = [pair(la, lb, rng) for la, lb in [(1, 1), (30, 60), (3, 2), (61, 62)]]
    ids = np.concatenate([t for t, _ in parts])
    offsets = np.concatenate([[0], np.cumsum([len(t) for t, _ in parts])])
    rows = Rows(ids, offsets, np.array([b for _, b in parts], dtype=np.uint16))
    cfg = InstanceConfig()
    masked = mask_rows(rows, cfg, SPEC, rng)
    for r, (tokens, _) in enumerate(parts):
        inst = Inst(masked, r)
        assert len(inst.masked_positions) == num_to_predict(len(tokens), cfg)
        assert inst.masked_labels.tolist() == tokens[inst.masked_positions].tolist()


def test_same_seed_same_instances():
    cfg = InstanceConfig(max_seq_length=64)
    docs = [doc("a", [7, 9, 12, 4, 30, 8]), doc("b", [5, 6, 7, 8])]
    x = instances_of(docs, 0, cfg, seed=11)
    y = instances_of(docs, 0, cfg, seed=11)
    assert [i.tokens.tolist() for i in x] == [i.tokens.tolist() for i in y]
