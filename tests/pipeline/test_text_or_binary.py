"""One rule for text and binary input, whatever the file's size (docs/bad-input.md).

Text with bytes that are not UTF-8 (Latin-1, cp1252) is read: each such byte becomes U+FFFD and
is counted as `undecodable_bytes_replaced`. Binary means a known magic number at the start,
more than 3 NUL bytes in the first 8 KiB, or mostly control characters; a short Latin-1 file
used to be refused as binary while a long one with the same bytes was read.
"""

from __future__ import annotations

import io

import pytest

from pipeline.sources.books import read_book
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.jsonl import read_jsonl
from pipeline.sources.streams import _COMPRESSED, _OTHER_BINARY, magic_kind
from pipeline.sources.text import read_text

# 86 bytes of Latin-1 prose, 7 of them not UTF-8 (é, è, ç, ï, û, à, è)
LATIN1 = (
    "Le caf\xe9 cr\xe8me est servi. Fran\xe7ois est na\xeff et s\xfbr de lui \xe0 Paris. "
    "Il fait tr\xe8s beau !\n"
).encode("latin-1")
ACCENTS = sum(b >= 0x80 for b in LATIN1)


def read(reader, data: bytes, skip: bool = False):
    tally = Tally(skip_bad_input=skip)
    return list(reader(io.BytesIO(data), "f.txt", tally)), tally.counts


def test_the_86_byte_latin1_file_is_text():
    assert (len(LATIN1), ACCENTS) == (86, 7)
    for reader in (read_text, read_book):
        docs, counts = read(reader, LATIN1)
        [doc] = docs
        text = " ".join(doc.paragraphs)
        assert text.startswith("Le caf\ufffd cr\ufffdme est servi.")
        assert text.count("\ufffd") == ACCENTS
        assert counts["undecodable_bytes_replaced"] == ACCENTS
        assert "documents_dropped.binary_file" not in counts


@pytest.mark.parametrize("copies", [1, 4, 95, 224, 2400])  # 86 B to 206 KB; 8 KiB is sniffed
def test_latin1_text_of_any_size_is_read_and_counted(copies):
    data = LATIN1 * copies
    docs, counts = read(read_text, data)
    assert sum(p.count("\ufffd") for d in docs for p in d.paragraphs) == ACCENTS * copies
    assert counts["undecodable_bytes_replaced"] == ACCENTS * copies


def test_mostly_undecodable_text_is_still_text():
    data = bytes(range(0x80, 0x100)) * 3 + b"\n"  # every byte above ASCII, no control byte
    docs, counts = read(read_book, data)
    assert counts["undecodable_bytes_replaced"] == 3 * 128
    assert "documents_dropped.binary_file" not in counts


def test_jsonl_with_latin1_text_is_read():
    data = b'{"id": "a", "text": "Caf\xe9 au lait. Cr\xe8me br\xfbl\xe9e."}\n'
    docs, counts = read(read_jsonl, data)
    assert docs[0].paragraphs == ("Caf\ufffd au lait. Cr\ufffdme br\ufffdl\ufffde.",)
    assert counts["undecodable_bytes_replaced"] == 4


@pytest.mark.parametrize("size", [8, 86, 19_000, 200_000])
@pytest.mark.parametrize(
    "head, said",
    [
        (b"\x1f\x8b\x08\x00", "a gzip file, not text"),
        (b"%PDF-1.7\n", r"a binary file \(a PDF\), not text"),
        (b"\x89PNG\r\n\x1a\n", r"a binary file \(a PNG image\), not text"),
        (b"\xff\xd8\xff\xe0", r"a binary file \(a JPEG image\), not text"),
        (b"ab\0c\0d\0e\0", r"a binary file \(NUL or control bytes\), not text"),
    ],
)
def test_binary_is_binary_whatever_the_size(head, said, size):
    data = (head + b"plain words " * (size // 12))[: max(size, len(head))]
    with pytest.raises(BadInputError, match=rf"f\.txt: {said}"):
        read(read_text, data)
    docs, counts = read(read_book, data, skip=True)
    assert docs == [] and counts["documents_dropped.binary_file"] == 1


@pytest.mark.parametrize("size", [40, 19_000])
def test_three_nul_bytes_in_text_are_dropped_and_counted(size):
    data = b"One \0sentence\0 he\0re.\n" + b"Another line of text.\n" * (size // 22)
    docs, counts = read(read_text, data)
    assert docs[0].paragraphs[0] == "One sentence here."
    assert counts["nul_bytes_dropped"] == 3


def test_every_magic_number_names_its_kind_and_text_names_none():
    for magic, name in _COMPRESSED + _OTHER_BINARY:
        assert magic_kind(magic + b"and more bytes") == name
        assert magic_kind(magic[:-1] + b" text") is None  # a prefix of one is text
    assert magic_kind(b"") is None and magic_kind(b"BZ is a word. GIF is too.") is None
