"""vocab.txt as editors save it: a byte-order mark first and CRLF line ends are read past."""

from __future__ import annotations

import codecs

from schemas.vocab import Vocab

PIECES = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\n"


def test_a_byte_order_mark_and_crlf_line_ends_give_the_same_vocab(tmp_path):
    plain, saved = tmp_path / "plain.txt", tmp_path / "saved.txt"
    plain.write_bytes(PIECES.encode())
    saved.write_bytes(codecs.BOM_UTF8 + PIECES.replace("\n", "\r\n").encode())
    vocab = Vocab.load(str(saved))
    assert vocab == Vocab.load(str(plain))
    assert vocab.special_ids.pad == 0 and vocab.sha256 == Vocab.load(str(plain)).sha256
