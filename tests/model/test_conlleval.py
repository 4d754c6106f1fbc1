"""The NER entity scorer agrees exactly with the official `conlleval` script's rules,
reimplemented here from its Perl (`endOfChunk`, `startOfChunk` and the counting loop), on
randomised tag sequences: IOB1 and IOB2 as they are, ill-formed ones included ("O I-X",
"B-X I-Y"), and IOBES read as IOB2 (S- as B-, E- as I-), as taggers trained on IOBES convert
before running conlleval, which has no S- tags."""

from __future__ import annotations

import numpy as np
import pytest

from model.finetune.metrics import entity_f1, entity_spans


def split(tag: str) -> tuple[str, str]:
    # conlleval: if ($guessed =~ /^([^-]*)-(.*)$/) { $guessed = $1; $guessedType = $2; }
    if "-" in tag:
        prefix, kind = tag.split("-", 1)
        return prefix, kind
    return tag, ""


def end_of_chunk(prev_tag, tag, prev_type, kind):
    end = False
    for a, b in [("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I")]:
        if prev_tag == a and tag == b:
            end = True
    if (prev_tag, tag) in (("E", "O"), ("I", "O")):
        end = True
    if prev_tag != "O" and prev_tag != "." and prev_type != kind:
        end = True
    if prev_tag in ("]", "["):
        end = True
    return end


def start_of_chunk(prev_tag, tag, prev_type, kind):
    start = False
    for a, b in [("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I")]:
        if prev_tag == a and tag == b:
            start = True
    if (prev_tag, tag) in (("O", "E"), ("O", "I")):
        start = True
    if tag != "O" and tag != "." and prev_type != kind:
        start = True
    if tag in ("[", "]"):
        start = True
    return start


def conlleval(sentences: list[tuple[list[str], list[str]]]) -> dict[str, float]:
    """conlleval's counting loop over `word gold guess` lines, a blank line between sentences
    (read as "O O", which ends every open chunk); precision, recall and F1 as fractions."""
    lines = []
    for gold, guess in sentences:
        lines += list(zip(gold, guess, strict=True)) + [("O", "O")]
    correct_chunk = found_correct = found_guessed = 0
    in_correct = False
    last_correct, last_guessed = "O", "O"
    last_correct_type, last_guessed_type = "", ""
    for gold, guess in lines:
        correct, correct_type = split(gold)
        guessed, guessed_type = split(guess)
        end_correct = end_of_chunk(last_correct, correct, last_correct_type, correct_type)
        end_guessed = end_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        start_correct = start_of_chunk(last_correct, correct, last_correct_type, correct_type)
        start_guessed = start_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        if in_correct:
            if end_correct and end_guessed and last_guessed_type == last_correct_type:
                in_correct = False
                correct_chunk += 1
            elif end_correct != end_guessed or guessed_type != correct_type:
                in_correct = False
        if start_correct and start_guessed and guessed_type == correct_type:
            in_correct = True
        if start_correct:
            found_correct += 1
        if start_guessed:
            found_guessed += 1
        last_correct, last_guessed = correct, guessed
        last_correct_type, last_guessed_type = correct_type, guessed_type
    if in_correct:
        correct_chunk += 1
    precision = correct_chunk / found_guessed if found_guessed else 0.0
    recall = correct_chunk / found_correct if found_correct else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def as_iob2(tags: list[str]) -> list[str]:
    return [{"S": "B", "E": "I"}.get(t[0], t[0]) + t[1:] if t != "O" else t for t in tags]


def random_sentences(rng: np.random.Generator, prefixes: str) -> list[tuple[list, list]]:
    """Arbitrary tag sequences (well-formed or not) over two entity types, the guess a noisy
    copy of the gold so that many entities match."""
    tags = ["O"] + [f"{p}-{t}" for p in prefixes for t in ("PER", "LOC")]
    sentences = []
    for _ in range(int(rng.integers(1, 8))):
        n = int(rng.integers(0, 12))
        gold = [str(rng.choice(tags)) for _ in range(n)]
        guess = [g if rng.random() < 0.7 else str(rng.choice(tags)) for g in gold]
        sentences.append((gold, guess))
    return sentences


def ours(sentences: list[tuple[list, list]]) -> dict[str, float]:
    return entity_f1([p for _, p in sentences], [g for g, _ in sentences])


@pytest.mark.parametrize("seed", range(60))
def test_iob_scores_equal_conlleval_on_random_sequences(seed):
    sentences = random_sentences(np.random.default_rng(seed), "BI")
    assert ours(sentences) == pytest.approx(conlleval(sentences), abs=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_iobes_scores_equal_conlleval_on_the_iob2_reading(seed):
    sentences = random_sentences(np.random.default_rng(1000 + seed), "BIES")
    iob2 = [(as_iob2(g), as_iob2(p)) for g, p in sentences]
    assert ours(sentences) == pytest.approx(conlleval(iob2), abs=1e-12)


def encode(spans: list[tuple[str, int, int]], n: int, scheme: str) -> list[str]:
    """Tags for non-overlapping spans in IOB1 (I- unless a span follows one of its type),
    IOB2 or IOBES."""
    tags = ["O"] * n
    for i, (kind, start, end) in enumerate(spans):
        for j in range(start, end):
            tags[j] = f"I-{kind}"
        if scheme == "iob2":
            tags[start] = f"B-{kind}"
        elif scheme == "iob1":
            touching = i and spans[i - 1][2] == start and spans[i - 1][0] == kind
            tags[start] = f"B-{kind}" if touching else f"I-{kind}"
        else:
            tags[end - 1] = f"E-{kind}"
            tags[start] = f"S-{kind}" if end - start == 1 else f"B-{kind}"
    return tags


@pytest.mark.parametrize("seed", range(30))
def test_well_formed_sequences_read_the_same_in_every_scheme(seed):
    rng = np.random.default_rng(2000 + seed)
    n, spans, i = int(rng.integers(1, 20)), [], 0
    while i < n:
        if rng.random() < 0.5:
            end = min(n, i + int(rng.integers(1, 4)))
            spans.append((str(rng.choice(["PER", "LOC"])), i, end))
            i = end
        else:
            i += 1
    for scheme in ("iob1", "iob2", "iobes"):
        tags = encode(spans, n, scheme)
        assert entity_spans(tags) == set(spans), (scheme, tags)
        assert ours([(tags, tags)]) == pytest.approx(conlleval([(tags, tags)]))


def test_conlleval_and_the_scorer_on_hand_checked_cases():
    # "I-LOC I-LOC" is one chunk (IOB1), "I-LOC B-LOC" two: 1 of 3 guessed right, 1 of 2 found
    gold = [["B-PER", "I-PER", "O", "I-LOC", "I-LOC"]]
    guess = [["B-PER", "I-PER", "O", "I-LOC", "B-LOC"]]
    sentences = list(zip(gold, guess, strict=True))
    want = {"precision": 1 / 3, "recall": 1 / 2, "f1": 0.4}
    assert conlleval(sentences) == pytest.approx(want)
    assert ours(sentences) == pytest.approx(want)
    # IOBES: "S-PER S-PER" is two people and "B-PER E-PER" one. conlleval alone, which has no
    # S- tags, would join the first into one chunk and call the guess right.
    sentences = [(["S-PER", "S-PER"], ["B-PER", "E-PER"])]
    assert entity_spans(["S-PER", "S-PER"]) == {("PER", 0, 1), ("PER", 1, 2)}
    assert conlleval(sentences)["f1"] == 1.0
    assert ours(sentences)["f1"] == 0.0
