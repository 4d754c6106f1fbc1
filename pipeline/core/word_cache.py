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

from collections.abc import Sequence
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from schemas.shard import segment_gather
from schemas.vocab import SPECIAL_TOKENS

PUNCTUATION = r"([!-/:-@\[-`{-~])"  # the 32 ASCII punctuation marks: each one is a word
CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # dropped by the tokenizer's cleaning


def by_cache(sentence: str) -> bool:
    """Whether the word cache gives this sentence the tokenizer's ids (else the tokenizer does)."""
    if not sentence.isascii():
        return False
    return "[" not in sentence or not any(t in sentence for t in SPECIAL_TOKENS)


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

        Arrow's string kernels do the split: lowercase, drop controls, pad each punctuation mark
        with spaces, split at whitespace, then number the distinct words (dictionary encoding).
        """
        if len(self.rows) > self.limit:
            self.start_over()
        text = pa.array(sentences, pa.large_string())
        if self.lowercase:
            text = pc.ascii_lower(text)
        if pc.any(pc.match_substring_regex(text, CONTROL)).as_py():
            text = pc.replace_substring_regex(text, CONTROL, "")
        spaced = pc.replace_substring_regex(text, PUNCTUATION, r" \1 ")
        words = pc.ascii_split_whitespace(spaced)
        coded = pc.dictionary_encode(words.flatten())
        distinct = coded.dictionary.to_pylist()
        new = [w for w in distinct if w not in self.rows]
        if new:
            self.learn(new)
        row_of = np.fromiter(map(self.rows.__getitem__, distinct), np.int64, len(distinct))
        rows = row_of[coded.indices.to_numpy(zero_copy_only=False)]
        lengths = self.lengths[rows]
        flat = self.pieces[segment_gather(self.starts[rows], lengths)]
        before = np.concatenate(([0], np.cumsum(lengths)))[words.offsets.to_numpy()]
        return flat, np.diff(before)


def grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array`, or a copy at least twice as long when it is shorter than `size`."""
    if len(array) >= size:
        return array
    out = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    out[: len(array)] = array
    return out
