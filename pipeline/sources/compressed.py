"""Compressed inputs read safely: checked decompression, chosen by the file's extension.

Beam's own decompressing reader stops without a word where a `.bz2` or `.gz` file was cut short
(it returns what it has and reports end of file), and it inflates a whole compressed buffer at
once. `DecompressingReader` decompresses in bounded pieces, follows concatenated streams, and
raises `BadInputError` naming the file when the data ends inside a stream or is corrupt.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from typing import BinaryIO

from pipeline.sources.documents import REFETCH_OR_SKIP, BadInputError
from pipeline.sources.streams import CHUNK_BYTES

COMPRESSED = {".bz2": "bz2", ".gz": "gzip", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}
# a compressed tar's short names (`pipeline.sources.archives`)
COMPRESSED.update({".tgz": "gzip", ".tbz2": "bz2", ".tbz": "bz2", ".txz": "xz", ".tzst": "zstd"})


def compression_of(path: str) -> str | None:
    """'bz2', 'gzip', 'xz', 'zstd', or None for a file that is read as it is."""
    for suffix, kind in COMPRESSED.items():
        if path.endswith(suffix):
            return kind
    return None


class _Gzip:
    """zlib's decompressor with the interface bz2's and lzma's share."""

    def __init__(self):
        self._d = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
        self._tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._d.decompress(self._tail + data, max_length)
        self._tail = self._d.unconsumed_tail
        return out

    @property
    def needs_input(self) -> bool:
        return not self._tail

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data


class _Zstd:
    """zstandard's decompressor (Beam's own dependency) with the interface bz2's and lzma's
    share. Its `decompress` takes no bound on its output, and zstd inflates a few bytes of a
    run of one byte into a block of 128 KiB, so the input goes in slices: 256 bytes at first
    (a few MiB at most, whatever the data), then as many as give about `max_length` at the
    ratio seen so far; what a slice gives beyond `max_length` waits for the next call. One
    object decodes one frame; the reader starts another for the next, as for every kind."""

    FIRST, MOST = 256, 1 << 16  # input bytes per slice: the first, and at most

    def __init__(self):
        import zstandard

        self._d = zstandard.ZstdDecompressor().decompressobj()
        self._error = zstandard.ZstdError
        self._in, self._at = b"", 0  # input, and how much of it went in
        self._out, self._slice, self._done = b"", self.FIRST, False
        self.unused_data = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        self._in, self._at = self._in[self._at :] + data, 0
        while len(self._out) < max_length and self._at < len(self._in) and not self._done:
            piece = self._in[self._at : self._at + self._slice]
            self._at += len(piece)
            try:
                got = self._d.decompress(piece)
            except self._error as e:
                raise OSError(str(e)) from None
            self._out += got
            ratio = max(1, len(got) // len(piece))
            self._slice = max(self.FIRST, min(self.MOST, max_length // ratio))
            if self._d.eof:  # the frame ended: what follows is the next frame's
                self._done = True
                self.unused_data = self._d.unused_data + self._in[self._at :]
                self._in, self._at = b"", 0
        out, self._out = self._out[:max_length], self._out[max_length:]
        return out

    @property
    def needs_input(self) -> bool:
        return self._at >= len(self._in) and not self._out and not self._done

    @property
    def eof(self) -> bool:
        return self._done and not self._out


DECOMPRESSORS = {
    "bz2": bz2.BZ2Decompressor,
    "gzip": _Gzip,
    "xz": lzma.LZMADecompressor,
    "zstd": _Zstd,
}


class DecompressingReader:
    """A file-like `read(n)` over compressed bytes, `n` bytes of output at most per call.

    Concatenated streams are read one after another (pbzip2, `-multistream` dumps, `cat a.gz
    b.gz`). An input that ends inside a stream, or holds bytes that do not decompress, raises
    `BadInputError` naming the file and ending with `advice`, what to do; an empty input reads
    as empty.
    """

    def __init__(self, raw: BinaryIO, kind: str, name: str, advice: str = REFETCH_OR_SKIP):
        self._raw, self._kind, self._name, self._advice = raw, kind, name, advice
        self._new = DECOMPRESSORS[kind]
        self._dec = self._new()
        self._in = b""
        self._fed = False  # the current stream has been given input
        self._done = False

    def seekable(self) -> bool:
        """A stream: a reader that must seek (Parquet, Arrow's file format) says so."""
        return False

    def read(self, n: int = CHUNK_BYTES) -> bytes:
        n = CHUNK_BYTES if n is None or n < 0 else n
        while not self._done:
            if self._dec.eof:  # one stream ended: another may follow
                self._in = self._dec.unused_data + self._in
                if not self._in and not self._fill():
                    self._done = True
                    break
                self._dec, self._fed = self._new(), False
            data = b""
            if self._dec.needs_input:
                if not self._in and not self._fill():
                    if self._fed:
                        raise BadInputError(
                            f"{self._name}: the {self._kind} data ends inside a compressed "
                            f"stream; the file is truncated. {self._advice}"
                        )
                    self._done = True
                    break
                data, self._in, self._fed = self._in, b"", True
            try:
                out = self._dec.decompress(data, n)
            except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
                raise BadInputError(
                    f"{self._name}: corrupt {self._kind} data ({e}). {self._advice}"
                ) from e
            if out:
                return out
        return b""

    def _fill(self) -> bool:
        self._in = self._raw.read(CHUNK_BYTES)
        return bool(self._in)

    def close(self) -> None:
        self._raw.close()


def decompressed(raw: BinaryIO, name: str) -> BinaryIO:
    """`raw` itself, or a checked decompressing view when `name` has a compressed suffix."""
    kind = compression_of(name)
    return DecompressingReader(raw, kind, name) if kind else raw
