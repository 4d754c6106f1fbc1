"""WordPiece: training a vocab with HF `tokenizers`, and encoding documents in batches.

Encoding gives exactly the ids of `tokenizers.BertWordPieceTokenizer` built from the same
`vocab.txt` (any BERT tokenizer loaded from that file): ASCII sentences through a word cache
(`pipeline.core.word_cache`), the rest through the tokenizer's batch call.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from itertools import chain, compress

import numpy as np
from tokenizers import BertWordPieceTokenizer, Tokenizer

from pipeline.core.config import VocabConfig
from pipeline.core.instances import TokenizedDoc
from pipeline.core.word_cache import WordCache, by_cache
from schemas.masking import TokenSpec
from schemas.shard import segment_gather
from schemas.vocab import SPECIAL_TOKENS, Vocab, bert_normalizer

# Blocks of scripts other than Latin and Greek (where BERT's uncased models mean to strip
# accents) with letters that lowercasing changes beyond their case: BERT's uncased normalization
# decomposes each character and drops every nonspacing mark, which in these scripts are no
# accents but parts of letters: Cyrillic й and ё, Hebrew and Arabic points, the vowel signs and
# viramas of the Indic scripts, Thai, Lao, Tibetan, Myanmar and Khmer vowels and tones, and
# Japanese kana's voicing (が becomes か).
STRIPPED_BLOCKS = ((0x0400, 0x052F), (0x0590, 0x08FF), (0x0900, 0x109F), (0x1780, 0x17FF))
STRIPPED_BLOCKS += ((0x3040, 0x30FF),)


@functools.lru_cache(maxsize=1)
def stripped_chars() -> str:
    """The characters of `STRIPPED_BLOCKS` that hold a nonspacing mark once decomposed."""
    return "".join(
        chr(c)
        for lo, hi in STRIPPED_BLOCKS
        for c in range(lo, hi + 1)
        if any(unicodedata.category(d) == "Mn" for d in unicodedata.normalize("NFD", chr(c)))
    )


@functools.lru_cache(maxsize=1)
def _stripped() -> re.Pattern:
    return re.compile(f"[{re.escape(stripped_chars())}]")


def loses_marks_lowercased(sentence: str) -> bool:
    """Whether lowercasing (`--lowercase`, BERT's uncased normalization) would strip a mark
    that is part of a letter of `sentence` (`STRIPPED_BLOCKS`), not an accent."""
    return not sentence.isascii() and _stripped().search(sentence) is not None


def train_vocab(sentences: Sequence[str], cfg: VocabConfig) -> tuple[Vocab, str]:
    """Train an uncased (or cased) WordPiece vocab; returns it and its `tokenizer.json`
    (`train_vocab_cut`, without the alphabet's cut)."""
    return train_vocab_cut(sentences, cfg)[:2]


def train_vocab_cut(sentences: Sequence[str], cfg: VocabConfig) -> tuple[Vocab, str, tuple]:
    """`train_vocab`'s vocab and `tokenizer.json`, and what its alphabet left out of the sample
    (`alphabet_cut`).

    The five specials come first: [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0..4.
    HF's trainer numbers `##c` continuation pieces in hash-map order, and those numbers break
    ties between merges of equal count, so two runs can differ (huggingface/tokenizers#1794).
    Fixing the alphabet and registering every `##c` up front, in sorted order, makes the
    result a pure function of the sample.
    """
    tok = BertWordPieceTokenizer(**bert_normalizer(cfg.lowercase))
    counts = character_counts(sentences, tok)
    alphabet = corpus_alphabet(counts, cfg.limit_alphabet)
    tok.train_from_iterator(
        sentences,
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        limit_alphabet=len(alphabet),
        initial_alphabet=alphabet,
        special_tokens=list(SPECIAL_TOKENS) + ["##" + c for c in alphabet],
        wordpieces_prefix="##",
        show_progress=False,
    )
    pieces = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    vocab = Vocab(tuple(p for p, _ in pieces))
    return vocab, tokenizer_json(vocab, cfg.lowercase), alphabet_cut(counts, alphabet)


def character_counts(sentences: Sequence[str], tok: BertWordPieceTokenizer) -> Counter:
    """Each character of the sentences after normalisation, counted; white space left out."""
    counts: Counter = Counter()
    normalize = tok.normalizer.normalize_str
    for i in range(0, len(sentences), 10_000):  # one call per many sentences
        counts.update(normalize("\n".join(sentences[i : i + 10_000])))
    for space in [c for c in counts if c.isspace()]:
        del counts[space]
    return counts


def corpus_alphabet(counts: Counter, limit: int) -> list[str]:
    """The `limit` most frequent characters (`character_counts`); ties broken by code point."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return sorted(c for c, _ in ranked[:limit])


def alphabet_cut(counts: Counter, alphabet: list[str]) -> tuple[int, int, int]:
    """(characters of the sample outside the alphabet, all its characters, distinct ones
    outside): a word holding one is `[UNK]`."""
    kept = set(alphabet)
    outside = {c: n for c, n in counts.items() if c not in kept}
    return sum(outside.values()), sum(counts.values()), len(outside)


@functools.lru_cache(maxsize=2)
def wordpiece_tokenizer(vocab: Vocab, lowercase: bool) -> BertWordPieceTokenizer:
    return BertWordPieceTokenizer(vocab.index, **bert_normalizer(lowercase))


def tokenizer_json(vocab: Vocab, lowercase: bool) -> str:
    return wordpiece_tokenizer(vocab, lowercase).to_str()


def encode_documents(
    docs: Sequence[tuple[str, str, Sequence[str]]],
    vocab: Vocab,
    lowercase: bool,
    counts: Counter | None = None,
) -> list[TokenizedDoc]:
    """Encode many (id, source, sentences) documents at once; sentences with no pieces are
    removed, documents left with no sentences are omitted (the caller counts them).

    A BERT tokenizer maps the literal text "[SEP]" (also [CLS], [MASK], [PAD]) to the control id,
    which would break the instance layout; such pieces become [UNK], counted per source in
    `counts` as `control_tokens_in_text`. The pieces the tokenizer itself made [UNK] (words
    holding a character the vocab lacks) are counted as `unk_pieces`.
    """
    flat, lengths = sentence_pieces([s for _, _, ss in docs for s in ss], vocab, lowercase)
    sp = vocab.special_ids
    controls = np.array([sp.pad, sp.cls, sp.sep, sp.mask])
    flat = flat.astype(np.uint16 if vocab.id_type == "uint16" else np.uint32, copy=False)
    is_control = np.isin(flat, controls)  # for all documents at once: most have none
    unknown = np.flatnonzero(flat == sp.unk) if counts is not None else ()  # mostly none
    ends = np.cumsum(lengths)
    out: list[TokenizedDoc] = []
    first = 0
    for doc_id, source, sentences in docs:
        stop = first + len(sentences)
        kept = lengths[first:stop]
        kept = kept[kept > 0]
        if len(kept):
            lo = int(ends[first] - lengths[first])
            offsets = np.zeros(len(kept) + 1, dtype=np.int64)
            np.cumsum(kept, out=offsets[1:])
            ids = flat[lo : lo + int(offsets[-1])]
            control = is_control[lo : lo + int(offsets[-1])]
            if len(unknown):
                n = np.searchsorted(unknown, [lo, lo + int(offsets[-1])])
                counts[(source, "unk_pieces")] += int(n[1] - n[0])
            if control.any():
                ids = ids.copy()
                ids[control] = sp.unk
                if counts is not None:
                    counts[(source, "control_tokens_in_text")] += int(control.sum())
            out.append(TokenizedDoc(doc_id, ids, offsets, source))
        first = stop
    return out


def sentence_pieces(
    sentences: Sequence[str], vocab: Vocab, lowercase: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Every sentence's pieces, flat (uint32), and each sentence's piece count.

    Sentences the word cache takes (`pipeline.core.word_cache.by_cache`) go through it, the rest
    through the tokenizer; the two are laid back in sentence order.
    """
    cached = np.fromiter(map(by_cache, sentences), dtype=bool, count=len(sentences))
    lengths = np.zeros(len(sentences), dtype=np.int64)
    parts = []
    if cached.any():
        pieces, n = word_cache(vocab, lowercase).encode(list(compress(sentences, cached)))
        lengths[cached] = n
        parts.append((cached, pieces, n))
    if not cached.all():
        rest = list(compress(sentences, ~cached))
        encodings = bert_tokenizer(vocab, lowercase).encode_batch_fast(
            rest, add_special_tokens=False
        )
        ids = [e.ids for e in encodings]
        n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        lengths[~cached] = n
        pieces = np.fromiter(chain.from_iterable(ids), dtype=np.uint32, count=int(n.sum()))
        parts.append((~cached, pieces, n))
    if len(parts) == 1:
        return parts[0][1], lengths
    flat = np.empty(int(lengths.sum()), dtype=np.uint32)
    starts = np.cumsum(lengths) - lengths
    for which, pieces, n in parts:
        flat[segment_gather(starts[which], n)] = pieces
    return flat, lengths


@functools.lru_cache(maxsize=2)
def vocab_of(text: str) -> Vocab:
    """The vocab from the text a build's side input carries. Beam weighs each side input it
    caches by walking its objects (a `Vocab` and its index are 60,000 of them, walked once per
    bundle); a text is one object."""
    return Vocab.from_text(text)


@functools.lru_cache(maxsize=2)
def bert_tokenizer(vocab: Vocab, lowercase: bool) -> Tokenizer:
    """The BERT tokenizer of `vocab` as a plain `tokenizers.Tokenizer` (its batch API)."""
    return Tokenizer.from_str(tokenizer_json(vocab, lowercase))


@functools.lru_cache(maxsize=2)
def word_cache(vocab: Vocab, lowercase: bool) -> WordCache:
    return WordCache(bert_tokenizer(vocab, lowercase), lowercase)


@functools.lru_cache(maxsize=2)
def token_spec(vocab: Vocab) -> TokenSpec:
    """The vocab's ids that building rows and masking them need (`schemas.masking`), made once
    per vocab and process (every bucket asks), its arrays read-only since they are shared."""
    spec = TokenSpec.from_vocab(vocab)
    spec.replacements.setflags(write=False)
    spec.continuation.setflags(write=False)
    return spec
