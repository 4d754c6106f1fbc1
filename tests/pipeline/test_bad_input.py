"""Bad input, everywhere: each case has a defined outcome, and nothing is lost without a count.

Outcomes (docs/bad-input.md): undecodable bytes are replaced and counted; an
overlong line or page is skipped and counted; an empty file is a counted drop; a malformed
record (XML page, JSON line, binary book) or a damaged file (truncated or corrupt compressed
data, an export cut short) stops the run naming the file and place, or with `--skip-bad-input`
is skipped and counted. The "1 GB single-line file" is streamed from a generator (no disk, no 1
GB buffer) through each reader under `tracemalloc`; through the whole CLI a 48 MB single line
stands in for it, which is enough to exceed every line and page limit while keeping the suite
fast."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import tracemalloc

import pytest
import zstandard

from pipeline.sources.books import read_book
from pipeline.sources.compressed import DecompressingReader
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.jsonl import MAX_RECORD_BYTES, read_jsonl
from pipeline.sources.text import read_text
from pipeline.sources.wikipedia.reader import read_wikipedia
from pipeline.sources.wikipedia.split import PageSplitter
from schemas.reader import ShardSet
from tests.helpers import build_shards
from tests.pipeline.wikidata import MARKUP_RESIDUE, TABLE_MARKUP, export, gensim_file, page_xml

TEXT = b"Some text that compresses. " * 20_000
COMPRESS = {
    "bz2": bz2.compress,
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "zstd": zstandard.ZstdCompressor(write_checksum=True).compress,  # as the zstd command does
}


def decompress_all(data: bytes, kind: str, n: int = 1 << 16) -> bytes:
    reader, out = DecompressingReader(io.BytesIO(data), kind, f"f.{kind}"), []
    while chunk := reader.read(n):
        assert len(chunk) <= n
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_a_truncated_compressed_file_is_an_error_naming_it(kind: str) -> None:
    data = COMPRESS[kind](TEXT)
    assert decompress_all(data, kind) == TEXT
    with pytest.raises(BadInputError, match=rf"f\.{kind}: .*truncated"):
        decompress_all(data[: len(data) * 2 // 3], kind)


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_corrupt_compressed_data_is_an_error_naming_the_file(kind: str) -> None:
    data = bytearray(COMPRESS[kind](TEXT))
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0x5A
    with pytest.raises(BadInputError, match=rf"f\.{kind}: "):
        decompress_all(bytes(data), kind)


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_concatenated_streams_and_empty_files(kind: str) -> None:
    compress = COMPRESS[kind]
    assert decompress_all(compress(b"first ") + compress(b"second"), kind) == b"first second"
    assert decompress_all(b"", kind) == b""
    assert decompress_all(compress(b""), kind) == b""


def test_decompression_output_is_bounded_per_read() -> None:
    bomb = gzip.compress(bytes(64 << 20), compresslevel=9)  # 64 MiB of zeros in ~64 KB
    reader = DecompressingReader(io.BytesIO(bomb), "gzip", "bomb.gz")
    assert len(reader.read(1 << 20)) == 1 << 20


def test_zstd_skippable_frames_are_read_past() -> None:
    """pzstd (parallel zstd) puts a skippable frame before each frame it writes."""
    skip = (0x184D2A50).to_bytes(4, "little") + (4).to_bytes(4, "little") + b"meta"
    frame = COMPRESS["zstd"](b"one frame\n")
    assert decompress_all(skip + frame + skip + frame, "zstd") == b"one frame\n" * 2


def test_zstd_output_is_bounded_too() -> None:
    """zstd inflates a few bytes into a block of 128 KiB, and its decompressor takes no bound:
    1 GiB of zeros is about 32 KB, and reading its first MiB holds a few MiB, not the GiB."""
    compressor = zstandard.ZstdCompressor(level=19).compressobj()
    bomb = b"".join(compressor.compress(bytes(1 << 20)) for _ in range(1024))
    bomb += compressor.flush()
    assert len(bomb) < 1 << 16
    reader = DecompressingReader(io.BytesIO(bomb), "zstd", "bomb.jsonl.zst")
    tracemalloc.start()
    try:
        sizes = [len(reader.read(1 << 20)) for _ in range(3)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sizes == [1 << 20] * 3 and peak < 24 << 20, peak


def test_wikipedia_export_cut_short_is_an_error() -> None:
    data = export(page_xml(1, "A", "An article here."), close=False)
    with pytest.raises(BadInputError, match=r"cut\.xml: the XML ends before </mediawiki>"):
        list(read_wikipedia(io.BytesIO(data), "cut.xml", Tally()))


def test_a_file_that_is_not_an_export() -> None:
    with pytest.raises(BadInputError, match=r"x\.xml: not a MediaWiki XML export"):
        list(read_wikipedia(io.BytesIO(b"<html><page>x</page></html>"), "x.xml", Tally()))


def test_empty_files_are_counted_drops_in_every_format() -> None:
    for reader in (read_wikipedia, read_jsonl, read_book):
        tally = Tally()
        assert list(reader(io.BytesIO(b""), "empty", tally)) == []
        assert tally.counts == {"documents_read": 1, "documents_dropped.empty_file": 1}, reader


MALFORMED = page_xml(2, "Broken", "x").replace("</title>", "</titel>")


def test_a_malformed_page_stops_the_run_naming_file_and_byte() -> None:
    data = export(page_xml(1, "A", "First article."), MALFORMED, page_xml(3, "C", "Third one."))
    with pytest.raises(BadInputError, match=r"d\.xml \(byte \d+ of the XML\): malformed <page>"):
        list(read_wikipedia(io.BytesIO(data), "d.xml", Tally()))


def test_malformed_pages_are_skipped_and_counted_when_asked() -> None:
    lost_close = page_xml(4, "D", "Its closing tag is lost.").replace("</page>", "")
    data = export(
        page_xml(1, "A", "First article."),
        MALFORMED,
        lost_close,
        page_xml(5, "E", "Fifth one, after the damage."),
        "  <title>stray</title>\n",
        page_xml(6, "F", "Sixth one stands."),
    )
    tally = Tally(skip_bad_input=True)
    docs = list(read_wikipedia(io.BytesIO(data), "d.xml", tally))
    assert [d.id for d in docs] == ["wikipedia:1", "wikipedia:5", "wikipedia:6"]
    assert tally.counts["documents_dropped.wiki_malformed_page"] == 3
    assert tally.counts["wiki_pages"] == 4  # the page with a lost </page> was never whole


def test_a_page_with_broken_markup_is_rendered_as_well_as_it_can_be() -> None:
    text = (
        "{{Infobox unclosed\n| a = b\n'''Bold''' prose [[unclosed link here and more.\n\n"
        "A clean paragraph follows. {{cite|x}}&lt;ref&gt;dangling\n\n{| class=x\n| cell\n"
    )
    tally = Tally()
    docs = list(read_wikipedia(io.BytesIO(export(page_xml(1, "A", text))), "b.xml", tally))
    for doc in docs:
        for paragraph in doc.paragraphs:
            assert not [r for r in MARKUP_RESIDUE if r in paragraph], paragraph
    assert sum(tally.counts.values()) > 1  # whatever was dropped is counted


def test_invalid_utf8_in_a_page_is_replaced_and_counted() -> None:
    data = export(page_xml(1, "A", "Caf@ au lait is served here.")).replace(b"@", b"\xff")
    tally = Tally()
    [doc] = read_wikipedia(io.BytesIO(data), "u.xml", tally)
    assert doc.paragraphs == ("Caf\ufffd au lait is served here.",)
    assert tally.counts["undecodable_bytes_replaced"] == 1


class OneLine:
    """`size` bytes of one line (no newline), made on the fly: a huge file without the disk."""

    def __init__(self, size: int, head: bytes = b"", fill: bytes = b"a"):
        self.left, self.head, self.block = size, head, fill * (1 << 20)

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            self.left -= len(out)
            return out
        n = min(self.left, len(self.block) if n is None or n < 0 else n)
        self.left -= n
        return self.block[:n]


GIB = 1 << 30
MAX_RECORD_MIB = MAX_RECORD_BYTES >> 20


def peak_mib(run) -> float:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("reader", "limit_mib"), [(read_book, 16), (read_text, 16), (read_jsonl, MAX_RECORD_MIB + 8)]
)
def test_a_1gb_single_line_is_skipped_in_bounded_memory(reader, limit_mib: int) -> None:
    tally = Tally()
    peak = peak_mib(lambda: list(reader(OneLine(GIB), "big", tally)))
    assert peak < limit_mib, f"{reader.__name__} held {peak:.0f} MiB"
    dropped = (
        tally.counts["lines_dropped.too_long"]
        + tally.counts["documents_dropped.jsonl_record_too_long"]
    )
    assert dropped == 1


def test_a_1gb_page_or_a_1gb_non_export_in_bounded_memory() -> None:
    head = export(page_xml(1, "A", "A normal page.")).decode().replace("</mediawiki>\n", "")
    head += '  <page><title>Huge</title><ns>0</ns><id>2</id><revision><text xml:space="preserve">'
    splitter = PageSplitter("huge.xml")
    peak = peak_mib(lambda: list(splitter.split(OneLine(GIB, head.encode(), b"w"))))
    assert splitter.pages_seen == 1 and splitter.oversized == 1 and peak < 128
    with pytest.raises(BadInputError, match="not a MediaWiki XML export"):
        list(read_wikipedia(OneLine(GIB), "not-xml.xml", Tally()))


def write_bad_corpus(root) -> str:
    """Every kind of bad input next to good input, as a user might have them."""
    wiki, books, jsonl = root / "wiki", root / "books", root / "jsonl"
    for d in (wiki, books, jsonl):
        d.mkdir()
    good = gensim_file(TABLE_MARKUP)
    (wiki / "good.xml.bz2").write_bytes(good)
    (wiki / "cut.xml.bz2").write_bytes(bz2.compress(export(page_xml(9, "Z", "Lost."))[:-40]))
    (wiki / "bad-page.xml").write_bytes(export(page_xml(1, "A", "A fine article."), MALFORMED))
    story = "\n\n".join(f"Paragraph {i} of a plain story. It goes on." for i in range(12))
    (books / "story.txt").write_text(story, encoding="utf-8")
    (books / "binary.txt").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(4096))
    (books / "empty.txt").write_bytes(b"")
    (books / "one-line.txt").write_bytes(b"x" * (48 << 20))
    (books / "latin1.txt").write_bytes(b"A caf\xe9 story. It is short but fine.\n")
    records = [{"text": f"Record {i} is a line of prose. It has two sentences."} for i in range(9)]
    lines = [json.dumps(r).encode() for r in records] + [b"{not json", b'{"no_text": 1}']
    (jsonl / "part-0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    good_lines = b"\n".join(lines[:-2]) + b"\n"
    (jsonl / "part-1.jsonl.gz").write_bytes(gzip.compress(good_lines)[:-30])
    return f"wikipedia:{wiki},books:{books},jsonl:{jsonl}"


def test_the_cli_stops_on_bad_input_naming_the_file(tmp_path) -> None:
    (tmp_path / "w").mkdir()
    cut = bz2.compress(export(page_xml(9, "Z", "Lost article text.")))[:-40]
    (tmp_path / "w" / "cut.xml.bz2").write_bytes(cut)
    with pytest.raises(SystemExit) as e:
        build_shards(str(tmp_path / "out"), inputs=f"wikipedia:{tmp_path}/w")
    assert str(e.value).startswith(f"error: {tmp_path}/w/cut.xml.bz2: ")
    assert str(e.value).endswith(
        "the file is truncated. Fetch or copy the file again, or pass --skip-bad-input (make: "
        "ARGS=--skip-bad-input) to keep what was read before the damage and count the file as "
        "unreadable"
    )
    with pytest.raises(BadInputError, match=r"cut\.xml\.bz2: .*truncated"):  # --verbose
        build_shards(str(tmp_path / "out"), "--verbose", inputs=f"wikipedia:{tmp_path}/w")


def test_an_input_file_gone_since_the_listing_is_said_to_be_gone(tmp_path, monkeypatch) -> None:
    """A file listed when the build started and removed before its read (a user tidying the
    corpus while it builds): the line says it is gone and what to do, not that it is damaged;
    with --skip-bad-input it is counted unreadable and the build goes on."""
    import pipeline.stages.read as read

    books = tmp_path / "books"
    books.mkdir()
    for name in ("a", "b"):
        (books / f"{name}.txt").write_text(f"Book {name} has a line. It has two sentences.\n")
    gone = str(books / "a.txt")
    real = read.read_input

    def removed_first(item, *args):
        if os.path.exists(gone):
            os.remove(gone)
        return real(item, *args)

    monkeypatch.setattr(read, "read_input", removed_first)
    with pytest.raises(SystemExit) as e:
        build_shards(str(tmp_path / "out"), inputs=f"books:{books}")
    assert str(e.value) == (
        f"error: {gone}: this books input file was listed when the build started and is gone now "
        "(moved or removed while the build ran); put it back and run the same command with "
        "--resume, or run it again without --resume to build from the files there are"
    )
    (books / "a.txt").write_text("Book a has a line. It has two sentences.\n")
    out = str(tmp_path / "skipped")
    assert (
        build_shards(out, "--skip-bad-input", "--vocab-size", "200", inputs=f"books:{books}") == 0
    )
    assert ShardSet.open(out).manifest.counts["total"]["files_dropped.unreadable"] == 1


def test_the_cli_skips_and_counts_every_kind_of_bad_input(tmp_path) -> None:
    inputs = write_bad_corpus(tmp_path)
    out = str(tmp_path / "out")
    assert build_shards(out, "--skip-bad-input", "--vocab-size", "500", inputs=inputs) == 0
    counts = ShardSet.open(out).manifest.counts
    wiki, books, jsonl = (counts["by_source"][s] for s in ("wikipedia", "books", "jsonl"))
    assert wiki["files_dropped.unreadable"] == 1  # cut.xml.bz2
    assert wiki["documents_dropped.wiki_malformed_page"] == 1
    assert wiki["documents_used"] == 6  # 5 articles of the gensim export, 1 of bad-page.xml
    assert books["documents_dropped.binary_file"] == 1
    assert books["documents_dropped.empty_file"] == 1  # empty.txt
    assert books["documents_dropped.only_overlong_lines"] == 1  # one-line.txt
    assert books["lines_dropped.too_long"] == 1
    assert books["undecodable_bytes_replaced"] == 1
    assert books["documents_used"] == 2
    assert jsonl["documents_dropped.jsonl_bad_record"] == 2  # part-0; part-1 is cut short
    assert jsonl["files_dropped.unreadable"] == 1
    total = counts["total"]
    dropped = sum(n for k, n in total.items() if k.startswith("documents_dropped."))
    assert total["documents_read"] == total["documents_used"] + dropped


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_damaged_compressed_data_says_what_to_do(kind: str) -> None:
    data = COMPRESS[kind](TEXT)
    with pytest.raises(BadInputError, match=r"truncated\. Fetch or copy the file again, or pass"):
        decompress_all(data[: len(data) // 2], kind)
    damaged = bytearray(data)
    for i in range(len(data) // 3, len(data) // 3 + 64):
        damaged[i] ^= 0x5A
    with pytest.raises(BadInputError, match=r"\. Fetch or copy .* --skip-bad-input"):
        decompress_all(bytes(damaged), kind)


def test_a_wikipedia_export_cut_short_says_what_to_do() -> None:
    data = export(page_xml(1, "A", "An article here."), close=False)
    with pytest.raises(BadInputError, match=r"truncated\. Fetch or copy the file again"):
        list(read_wikipedia(io.BytesIO(data), "cut.xml", Tally()))


def test_a_truncated_index_says_to_fetch_it_or_move_it_away(tmp_path) -> None:
    """The index is read while reads are planned, where --skip-bad-input does not reach."""
    from pipeline.files.fsio import exists, open_read
    from pipeline.sources.wikipedia.spans import plan_wikipedia

    dump = tmp_path / "enwiki-multistream.xml.bz2"
    dump.write_bytes(bz2.compress(export(page_xml(1, "A", "An article here."))))
    index = bz2.compress(b"".join(b"%d:%d:Title %d\n" % (k * 10, k, k) for k in range(5000)))
    (tmp_path / "enwiki-multistream-index.txt.bz2").write_bytes(index[: len(index) // 2])
    with pytest.raises(BadInputError, match=r"index\.txt\.bz2: .*truncated\. Fetch the index"):
        plan_wikipedia(str(dump), dump.stat().st_size, open_read, exists)


@pytest.mark.parametrize(
    "name, data",
    [("f", b""), ("f", b"\n  \n\t\n"), ("f.gz", gzip.compress(b"", mtime=0))],
    ids=["empty", "blank", "empty-gz"],
)
def test_empty_and_blank_files_are_counted_drops_in_every_format(name: str, data: bytes) -> None:
    from pipeline.sources.compressed import decompressed
    from pipeline.sources.readers import READERS

    for reader in READERS.values():
        tally = Tally()
        assert list(reader(decompressed(io.BytesIO(data), name), name, tally)) == []
        assert tally.counts == {"documents_read": 1, "documents_dropped.empty_file": 1}, reader
