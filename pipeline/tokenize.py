"""WordPiece: training a vocab with HF `tokenizers`, and encoding documents in batches.

Encoding goes through `tokenizers.BertWordPieceTokenizer` built from the same `vocab.txt`,
so the ids are exactly those any BERT tokenizer loaded from that file gives.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from itertools import chain

import numpy as np
from tokenizers import BertWordPieceTokenizer

from pipeline.config import VocabConfig
from pipeline.instances import TokenizedDoc
from schemas.masking import TokenSpec
from schemas.vocab import SPECIAL_TOKENS, Vocab, bert_normalizer


def train_vocab(sentences: Sequence[str], cfg: VocabConfig) -> tuple[Vocab, str]:
    """Train an uncased (or cased) WordPiece vocab; returns it and its `tokenizer.json`.

    The five specials come first: [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0..4.
    HF's trainer numbers `##c` continuation pieces in hash-map order, and those numbers break
    ties between merges of equal count, so two runs can differ (huggingface/tokenizers#1794).
    Fixing the alphabet and registering every `##c` up front, in sorted order, makes the
    result a pure function of the sample.
    """
    tok = BertWordPieceTokenizer(**bert_normalizer(cfg.lowercase))
    alphabet = corpus_alphabet(sentences, tok, cfg.limit_alphabet)
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
    return vocab, tokenizer_json(vocab, cfg.lowercase)


def corpus_alphabet(sentences: Sequence[str], tok: BertWordPieceTokenizer, limit: int) -> list[str]:
    """The `limit` most frequent characters after normalisation; ties broken by code point."""
    counts: Counter = Counter()
    normalize = tok.normalizer.normalize_str
    for i in range(0, len(sentences), 10_000):  # one call per many sentences
        counts.update(normalize("\n".join(sentences[i : i + 10_000])))
    for space in [c for c in counts if c.isspace()]:
        del counts[space]
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return sorted(c for c, _ in ranked[:limit])


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
    """Encode many (id, source, sentences) documents in one batch call; sentences with no pieces
    are removed, documents left with no sentences are omitted (the caller counts them).

    A BERT tokenizer maps the literal text "[SEP]" (also [CLS], [MASK], [PAD]) to the control id,
    which would break the instance layout; such pieces become [UNK], counted per source in
    `counts` as `control_tokens_in_text`.
    """
    tok = wordpiece_tokenizer(vocab, lowercase)
    sp = vocab.special_ids
    controls = np.array([sp.pad, sp.cls, sp.sep, sp.mask])
    flat = [s for _, _, sentences in docs for s in sentences]
    # encode_batch_fast skips character offsets, which are not needed here.
    encodings = tok._tokenizer.encode_batch_fast(flat, add_special_tokens=False)
    dtype = np.uint16 if vocab.id_type == "uint16" else np.uint32
    out: list[TokenizedDoc] = []
    pos = 0
    for doc_id, source, sentences in docs:
        ids = [e.ids for e in encodings[pos : pos + len(sentences)] if e.ids]
        pos += len(sentences)
        if not ids:
            continue
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat_ids = np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(offsets[-1]))
        control = np.isin(flat_ids, controls)
        if control.any():
            flat_ids[control] = sp.unk
            if counts is not None:
                counts[(source, "control_tokens_in_text")] += int(control.sum())
        out.append(TokenizedDoc(doc_id, flat_ids, offsets, source))
    return out


def token_spec(vocab: Vocab) -> TokenSpec:
    """The vocab's ids that building rows and masking them need (`schemas.masking`)."""
    return TokenSpec.from_vocab(vocab)
