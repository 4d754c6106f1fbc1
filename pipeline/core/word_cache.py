"""WordPiece for ASCII and Latin-1 text through a word cache: the BERT tokenizer's ids, faster.

BERT's tokenizer cleans and lowercases the text, splits it into words at whitespace and
punctuation, then runs WordPiece on each word. Prose repeats its words (a few MB of text hold
many times more words than kinds of word: docs/benchmarks.md, "The measurements behind 'How it
is fast'"), so WordPiece on each distinct word once and a table lookup for every other
occurrence does most of the work in a few numpy calls.

The split is written here for ASCII, Latin-1's letters and six wide punctuation marks (dashes and
curly quotes), where it is short and exact: control characters other than tab, newline and
carriage return are dropped, ASCII letters are lowercased (uncased vocabs), and a word is a run
of letters and digits or a single punctuation mark. The pieces of each distinct word still come
from the tokenizer itself (`learn`), so its normalisation (accents stripped, lowercasing) is its
own, word by word: for these characters it depends on no neighbour. Everything else goes to the
tokenizer whole: sentences with any other non-ASCII character (Unicode normalisation beyond
Latin-1, Chinese characters, other Unicode punctuation and spaces), and sentences holding a
special token's text such as "[SEP]", which the tokenizer matches before it cleans the text.
`tests/pipeline/test_word_cache.py` compares both routes on hostile text.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from schemas.shard import segment_gather
from schemas.vocab import SPECIAL_TOKENS

# The non-ASCII characters the split below knows: U+00C0-U+00FF (Latin-1's letters, and its
# multiplication and division signs, which BERT keeps inside words as it does every symbol
# outside ASCII), and the dashes and curly quotes, punctuation to BERT, each a word alone.
# Their normalisation (accents stripped, lowercased) is the tokenizer's, per word, and depends
# on no neighbour.
LATIN_LETTERS = "".join(map(chr, range(0xC0, 0x100)))
WIDE_MARKS = "\u2013\u2014\u2018\u2019\u201c\u201d"
_OTHER_CHARACTER = re.compile(f"[^\x00-\x7f{LATIN_LETTERS}{WIDE_MARKS}]")


def by_cache(sentence: str) -> bool:
    """Whether the word cache gives this sentence the tokenizer's ids (else the tokenizer does)."""
    if not sentence.isascii() and _OTHER_CHARACTER.search(sentence):
        return False
    return "[" not in sentence or not any(t in sentence for t in SPECIAL_TOKENS)


# What BERT's split makes of each byte of such text: whitespace ends a word, a letter or digit
# joins the letters and digits next to it (the two bytes of a Latin-1 letter are letter bytes),
# a punctuation mark is a word alone (the three bytes of a wide mark: its first, then two
# continuing it), and the cleaning drops the other control characters (so the letters on
# either side of one join).
_SPACE, _ALNUM, _MARK, _DROPPED, _MARK_CONT = 0, 1, 2, 3, 4
_CLASS = np.full(256, _DROPPED, np.uint8)
_CLASS[[ord(c) for c in " \t\n\r"]] = _SPACE
_CLASS[[ord(c) for c in string.ascii_letters + string.digits]] = _ALNUM
_CLASS[[ord(c) for c in string.punctuation]] = _MARK
_CLASS[0xC3] = _ALNUM  # the first byte of U+00C0-U+00FF
_CLASS[0xE2] = _MARK  # the first byte of the wide marks
_CLASS[0x80:0xC0] = _MARK_CONT  # a continuation byte: a letter's after 0xC3, else a mark's
_CLASS_ARROW = pa.array(_CLASS)


def split_words(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Sentences that `by_cache` takes (a large_string array) split into BERT's words, as one
    array of words, and each sentence's first word (sentences + 1 offsets into it): the bytes
    are classed (`_CLASS`) and cut where a word starts, with no pass of Python or regular
    expression over the text."""
    offsets = np.frombuffer(text.buffers()[1], np.int64)[text.offset : text.offset + len(text) + 1]
    data = text.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    data, offsets = data[offsets[0] : offsets[-1]], offsets - offsets[0]
    # Arrow's take for the classes, and the kept bytes by their indices: numpy's indexing by
    # bytes or by a mask is several times slower on text (docs/benchmarks.md, "2026-12-05,
    # twelfth session: the books format's per-byte costs")
    kind = pc.take(_CLASS_ARROW, pa.array(data)).to_numpy()
    if len(data) and data.max() >= 0x80:
        kind = kind.copy()  # Arrow's own memory, read-only
        kind[1:][(kind[1:] == _MARK_CONT) & (data[:-1] == 0xC3)] = _ALNUM
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
    word_bytes = pa.py_buffer(data[np.flatnonzero(in_word)])
    words = pa.LargeStringArray.from_buffers(len(first), pa.py_buffer(word_offsets), word_bytes)
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
