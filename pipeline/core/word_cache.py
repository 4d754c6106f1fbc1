"""WordPiece for ASCII text through a word cache: the ids HF's BERT tokenizer gives, faster.

BERT's tokenizer cleans and lowercases the text, splits it into words at whitespace and
punctuation, then runs WordPiece on each word. Prose repeats its words (4 MB of the kernel
documentation holds 856,000 words of only 16,600 kinds), so WordPiece on each distinct word once
and a table lookup for every other occurrence does most of the work in a few numpy calls.

The split is written here only for ASCII, where it is short and exact: control characters other
than tab, newline and carriage return are dropped, letters are lowercased (uncased vocabs), and a
word is a run of letters and digits or a single one of the 32 ASCII punctuation marks. The pieces
of each distinct word still come from the tokenizer itself (`learn`). Everything else goes to the
tokenizer whole: sentences with any non-ASCII character (Unicode normalisation, accents, Chinese
characters, Unicode punctuation), and sentences holding a special token's text such as "[SEP]",
which the tokenizer matches before it cleans the text. `tests/pipeline/test_word_cache.py`
compares both routes on hostile text.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from schemas.shard import segment_gather
from schemas.vocab import SPECIAL_TOKENS


def by_cache(sentence: str) -> bool:
    """Whether the word cache gives this sentence the tokenizer's ids (else the tokenizer does)."""
    if not sentence.isascii():
        return False
    return "[" not in sentence or not any(t in sentence for t in SPECIAL_TOKENS)


# What BERT's split makes of each ASCII byte: whitespace ends a word, a letter or digit joins
# the letters and digits next to it, a punctuation mark is a word alone, and the cleaning drops
# the other control characters (so the letters on either side of one join).
_SPACE, _ALNUM, _MARK, _DROPPED = 0, 1, 2, 3
_CLASS = np.full(256, _DROPPED, np.uint8)
_CLASS[[ord(c) for c in " \t\n\r"]] = _SPACE
_CLASS[[ord(c) for c in string.ascii_letters + string.digits]] = _ALNUM
_CLASS[[ord(c) for c in string.punctuation]] = _MARK


def split_words(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """ASCII sentences (a large_string array) split into BERT's words, as one array of words,
    and each sentence's first word (sentences + 1 offsets into it): the bytes are classed
    (`_CLASS`) and cut where a word starts, with no pass of Python or regular expression over
    the text."""
    offsets = np.frombuffer(text.buffers()[1], np.int64)[text.offset : text.offset + len(text) + 1]
    data = text.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    data, offsets = data[offsets[0] : offsets[-1]], offsets - offsets[0]
    kind = _CLASS[data]
    kept = kind != _DROPPED
    if not kept.all():
        data, kind = data[kept], kind[kept]
        offsets = np.concatenate(([0], np.cumsum(kept)))[offsets]
    alnum = kind == _ALNUM
    starts = kind == _MARK
    starts[1:] |= alnum[1:] & ~alnum[:-1]
    sentence_starts = offsets[:-1][offsets[:-1] < len(data)]
    starts[sentence_starts] = alnum[sentence_starts] | (kind[sentence_starts] == _MARK)
    in_word = kind != _SPACE
    last = in_word.copy()  # a word's last byte: the next one starts a word or is a space
    last[:-1] &= starts[1:] | ~in_word[1:]
    first = np.flatnonzero(starts)
    word_offsets = np.zeros(len(first) + 1, np.int64)
    np.cumsum(np.flatnonzero(last) + 1 - first, out=word_offsets[1:])
    words = pa.LargeStringArray.from_buffers(
        len(first), pa.py_buffer(word_offsets), pa.py_buffer(data[in_word])
    )
    return words, np.searchsorted(first, offsets)


class WordCache:
    """Distinct words -> their pieces, learnt from the tokenizer in batches.

    Row 0 is the empty word (the split leaves one where a sentence ends in a space). The cache
    starts over when it holds more than `limit` words, so its memory stays bounded (about 150
    bytes a word); the ids never depend on what it holds.
    """

    def __init__(self, tokenizer: Tokenizer, lowercase: bool, limit: int = 300_000):
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.limit = limit
        self.start_over()

    def start_over(self) -> None:
        self.rows: dict[str, int] = {"": 0}
        self.starts = np.zeros(1024, dtype=np.int64)
        self.lengths = np.zeros(1024, dtype=np.int64)
        self.pieces = np.zeros(4096, dtype=np.uint32)
        self.used = 0  # pieces held

    def learn(self, words: Sequence[str]) -> None:
        """Add words (not yet held) with their pieces from the tokenizer."""
        encodings = self.tokenizer.encode_batch_fast(list(words), add_special_tokens=False)
        ids = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        first = len(self.rows)
        need_rows, need_pieces = first + len(words), self.used + int(lengths.sum())
        self.starts = grown(self.starts, need_rows)
        self.lengths = grown(self.lengths, need_rows)
        self.pieces = grown(self.pieces, need_pieces)
        self.lengths[first:need_rows] = lengths
        self.starts[first:need_rows] = self.used + np.cumsum(lengths) - lengths
        self.pieces[self.used : need_pieces] = np.fromiter(
            chain.from_iterable(ids), dtype=np.uint32, count=need_pieces - self.used
        )
        self.used = need_pieces
        self.rows.update(zip(words, range(first, need_rows), strict=True))

    def encode(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Pieces of sentences that pass `by_cache`, flat, and each sentence's piece count.

        Arrow lowercases, `split_words` cuts the words, and Arrow numbers the distinct ones
        (dictionary encoding).
        """
        if len(self.rows) > self.limit:
            self.start_over()
        text = pa.array(sentences, pa.large_string())
        if self.lowercase:
            text = pc.ascii_lower(text)
        words, first_word = split_words(text)
        coded = pc.dictionary_encode(words)
        distinct = coded.dictionary.to_pylist()
        new = [w for w in distinct if w not in self.rows]
        if new:
            self.learn(new)
        row_of = np.fromiter(map(self.rows.__getitem__, distinct), np.int64, len(distinct))
        rows = row_of[coded.indices.to_numpy(zero_copy_only=False)]
        lengths = self.lengths[rows]
        flat = self.pieces[segment_gather(self.starts[rows], lengths)]
        before = np.concatenate(([0], np.cumsum(lengths)))[first_word]
        return flat, np.diff(before)


def grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array`, or a copy at least twice as long when it is shorter than `size`."""
    if len(array) >= size:
        return array
    out = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    out[: len(array)] = array
    return out
