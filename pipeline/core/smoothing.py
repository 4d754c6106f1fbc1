"""Exponentially smoothed weighting of a build's inputs, as multilingual BERT weighted its
languages: each group's share of the text `p` is raised to an exponent `S` and normalised again,
`q = p**S / sum(p**S)`, so that small groups are passed over more often and large ones less
(`S = 1`: every group as it is; multilingual BERT took 0.7, XLM-R 0.3).

A group is one input of the command (one `--input` item) or, for Wikipedia dumps and
WikiExtractor's output, one wiki of it: a glob over many languages' dumps is one group per
language. Its share is of the characters of its sentences. A document of a group with rate
`r = q / p` gets `dupe_factor * r` passes on average: the whole part always, one more with the
chance of the fraction, drawn by a stable hash of the seed and its id; so the corpus keeps its
size in expectation, and the passes are a pure function of the input, the config and the seed.
The vocab's sample is drawn at each document's rate too (as multilingual BERT drew its
vocab's).
"""

from __future__ import annotations

from pipeline.core.keys import stable_hash

WIKI_SOURCES = ("wikipedia", "wikiextractor")  # their ids name their wiki: `wikipedia:enwiki:12`


def group_of(input_index: int, doc_id: str, source: str) -> str:
    """A document's group: its input's index, and the wiki its id names (`3:dewiki`)."""
    if source in WIKI_SOURCES:
        rest = doc_id.split(":", 1)[1]
        if ":" in rest:
            return f"{input_index}:{rest.rsplit(':', 1)[0]}"
    return str(input_index)


def sampling_rates(sizes: dict[str, int], exponent: float) -> dict[str, float]:
    """Each group's rate `q / p` from its characters (`sizes`); groups of none are left out.
    The sums run in the groups' order, so the rates are the same bits wherever they are made."""
    total = sum(sizes.values())
    shares = {g: sizes[g] / total for g in sorted(sizes) if sizes[g]}
    norm = sum(p**exponent for p in shares.values())
    return {g: p**exponent / norm / p for g, p in shares.items()}


def smoothed_passes(doc_id: str, rate: float, dupe_factor: int, seed: int) -> int:
    """A document's passes at its group's `rate`: `dupe_factor * rate` on average."""
    expected = dupe_factor * rate
    whole = int(expected)
    if stable_hash(seed, "passes", doc_id) < (expected - whole) * 2.0**64:
        whole += 1
    return whole


def described(
    sizes: dict[str, int], rates: dict[str, float], labels: list[str], dupe_factor: int = 0
) -> dict:
    """The manifest's record of the weighting: per group (named by its input as given, and its
    wiki), its characters, its share of them and its share after smoothing; with the build's
    `dupe_factor`, the passes its documents get on average."""
    total = sum(sizes.values()) or 1
    out = {}
    for group, rate in rates.items():
        index, _, wiki = group.partition(":")
        name = labels[int(index)] + (f" ({wiki})" if wiki else "")
        share = sizes[group] / total
        out[name] = {
            "characters": sizes[group],
            "share": round(share, 6),
            "smoothed_share": round(share * rate, 6),
            **({"passes_per_document": round(dupe_factor * rate, 2)} if dupe_factor else {}),
        }
    return out
