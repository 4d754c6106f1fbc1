"""Sentence-pair instances and masking: the reference algorithm as plain functions over numpy.

This follows `create_pretraining_data.py` of google-research/bert (see DESIGN section 5) with
four documented differences: random-next documents come from the same bucket; the random-next
document is never the current one; random replacement pieces are never special pieces; with
whole-word masking the 80/10/10 choice is made per word.

Every function that draws takes its `numpy.random.Generator`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.config import InstanceConfig


@dataclass(frozen=True)
class TokenizedDoc:
    """A document's sentences as WordPiece ids: sentence k is ids[offsets[k]:offsets[k+1]]."""

    id: str
    ids: np.ndarray
    offsets: np.ndarray  # int64, length = number of sentences + 1
    source: str = ""

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1


@dataclass(frozen=True)
class TokenSpec:
    """What masking needs from the vocab; ids are looked up, never assumed."""

    cls: int
    sep: int
    mask: int
    replacements: np.ndarray  # ids a random replacement may take (non-special pieces)
    continuation: np.ndarray  # bool per id: a "##" piece (for whole-word masking)


@dataclass(frozen=True)
class Instance:
    tokens: np.ndarray  # [CLS] A [SEP] B [SEP], after masking
    segment_b_start: int
    masked_positions: np.ndarray
    masked_labels: np.ndarray
    is_random_next: bool
    short: bool  # built with a target length drawn short (short_seq_prob)


def num_to_predict(length: int, cfg: InstanceConfig) -> int:
    # Python's round(), as the reference's int(round(...)).
    return min(cfg.max_predictions_per_seq, max(1, int(round(length * cfg.masked_lm_prob))))


def truncation_plan(len_a: int, len_b: int, max_tokens: int, rng: np.random.Generator):
    """Pieces to drop as (a_front, a_back, b_front, b_back).

    Same outcome as the reference's loop, which drops one piece at a time from the longer
    side (B on a tie), from the front or the back with probability 0.5 each: one coin per drop.
    """
    n = len_a + len_b - max_tokens
    if n <= 0:
        return 0, 0, 0, 0
    front = rng.random(n) < 0.5
    first = min(n, abs(len_a - len_b))
    from_a = np.empty(n, dtype=bool)
    from_a[:first] = len_a > len_b
    from_a[first:] = np.arange(n - first) % 2 == 1  # equal lengths: B, then A, then B ...
    a_front = int(np.count_nonzero(front & from_a))
    b_front = int(np.count_nonzero(front & ~from_a))
    n_a = int(np.count_nonzero(from_a))
    return a_front, n_a - a_front, b_front, (n - n_a) - b_front


def truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int, rng: np.random.Generator):
    af, ab, bf, bb = truncation_plan(len(a), len(b), max_tokens, rng)
    return a[af : len(a) - ab], b[bf : len(b) - bb]


def choose_positions(
    tokens: np.ndarray,
    candidates: np.ndarray,
    n: int,
    spec: TokenSpec,
    whole_word: bool,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions to predict (ascending) and, per position, the index of its word's 80/10/10 draw."""
    if not whole_word:
        chosen = np.sort(rng.choice(candidates, size=min(n, len(candidates)), replace=False))
        return chosen, np.arange(len(chosen))
    starts = ~spec.continuation[tokens[candidates]]
    starts[0] = True
    starts[1:] |= np.diff(candidates) != 1  # a word never crosses [SEP]
    words = np.split(candidates, np.flatnonzero(starts)[1:])
    picked: list[np.ndarray] = []
    count = 0
    for w in rng.permutation(len(words)):
        if count >= n:
            break
        if count + len(words[w]) > n:
            continue
        picked.append(words[w])
        count += len(words[w])
    if not picked:
        return np.zeros(0, dtype=candidates.dtype), np.zeros(0, dtype=np.int64)
    word_of = np.concatenate([np.full(len(p), k) for k, p in enumerate(picked)])
    positions = np.concatenate(picked)
    order = np.argsort(positions, kind="stable")
    return positions[order], word_of[order]


def mask_tokens(
    tokens: np.ndarray, b_start: int, cfg: InstanceConfig, spec: TokenSpec, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masked copy of `tokens`, ascending masked positions and their original ids.

    Of the chosen positions (or words), 80% become [MASK], 10% a random non-special piece,
    10% stay as they are.
    """
    end = len(tokens) - 1
    candidates = np.concatenate([np.arange(1, b_start - 1), np.arange(b_start, end)])
    n = num_to_predict(len(tokens), cfg)
    positions, group = choose_positions(tokens, candidates, n, spec, cfg.whole_word_mask, rng)
    u = rng.random(int(group.max()) + 1 if len(group) else 0)[group]
    out = tokens.copy()
    out[positions[u < 0.8]] = spec.mask
    rand = positions[u >= 0.9]
    out[rand] = spec.replacements[rng.integers(len(spec.replacements), size=len(rand))]
    return out, positions, tokens[positions]


def document_instances(
    units: Sequence[TokenizedDoc],
    index: int,
    cfg: InstanceConfig,
    spec: TokenSpec,
    rng: np.random.Generator,
    can_pick_other: bool,
) -> Iterator[Instance]:
    """All instances of one document pass; B may come from another unit of the same bucket."""
    doc = units[index]
    lengths = np.diff(doc.offsets)
    target = cfg.max_num_tokens
    short = bool(rng.random() < cfg.short_seq_prob)
    if short:
        target = int(rng.integers(2, cfg.max_num_tokens + 1))
    start, length, i = 0, 0, 0
    while i < len(lengths):
        length += int(lengths[i])
        if i == len(lengths) - 1 or length >= target:
            made, unused = chunk_instance(
                units, index, start, i + 1, target, cfg, spec, rng, can_pick_other, short
            )
            if made is not None:
                yield made
            i -= unused
            start, length = i + 1, 0
        i += 1


def chunk_instance(units, index, start, stop, target, cfg, spec, rng, can_pick_other, short):
    """One instance from sentences [start, stop) of the document; returns (instance, unused)."""
    doc = units[index]
    k = stop - start
    a_end = 1 if k < 2 else int(rng.integers(1, k))
    a = doc.ids[doc.offsets[start] : doc.offsets[start + a_end]]
    random_next = k == 1 or rng.random() < cfg.random_next_prob
    unused = 0
    if random_next and not can_pick_other:
        if k == 1:
            return None, 0  # a lone sentence needs another document for B
        random_next = False
    if random_next:
        b = random_b(units, index, target - len(a), rng)
        unused = k - a_end
    else:
        b = doc.ids[doc.offsets[start + a_end] : doc.offsets[stop]]
    a, b = truncate_pair(a, b, cfg.max_num_tokens, rng)
    tokens = np.concatenate([[spec.cls], a, [spec.sep], b, [spec.sep]]).astype(doc.ids.dtype)
    b_start = len(a) + 2
    masked, positions, labels = mask_tokens(tokens, b_start, cfg, spec, rng)
    return Instance(masked, b_start, positions, labels, bool(random_next), short), unused


def random_b(units, index, target_b: int, rng: np.random.Generator) -> np.ndarray:
    """Sentences of another document, from a random one on, until `target_b` pieces."""
    own = units[index].id
    while True:  # the caller guarantees another document exists
        other = units[int(rng.integers(len(units)))]
        if other.id != own:
            break
    first = int(rng.integers(other.num_sentences))
    cum = other.offsets[first + 1 :] - other.offsets[first]
    last = min(int(np.searchsorted(cum, target_b)), len(cum) - 1)
    return other.ids[other.offsets[first] : other.offsets[first] + cum[last]]
