"""Input files opened as stored, and how far their readers have come: the read step's
progress markers count each stored byte of a file once, however it is read (whole, or in
spans by many workers)."""

from __future__ import annotations

import io

from pipeline.files import fsio


def open_raw(path: str, stop: int | None = None):
    """A file as stored: decompression is `read_input`'s, which notices truncated files.
    `stop`: the end of the span read (an object store is asked for little past it)."""
    return fsio.open_read(path, stop=stop)


class Opener:
    """Opens the input files of a group as stored and follows how far they have been read: a
    whole file by its reader's bytes, a span by the bytes of the span its reader has read (a
    span's reader also reads the file's header, or on past the span's end, or a Parquet
    file's footer), so that every byte of a file counts once however it is cut (the first span
    counts from the file's start)."""

    def __init__(self):
        self.done = 0  # bytes of the group's finished items
        self.span = None
        self.file = None

    def start_item(self, span):
        self.done = self.consumed()
        self.span, self.file = span, None

    def open(self, path: str):
        span, window = self.span, None
        if span is not None:
            window = (0 if span.start <= span.header_end else span.start, span.end)
        self.file = TrackedFile(open_raw(path, window and window[1]), window)
        return self.file

    def consumed(self) -> int:
        if self.file is None:
            return self.done
        return self.done + (self.file.pos if self.span is None else self.file.inside)


class TrackedFile:
    """A file object that remembers its position after every read (it stays known once the
    reader has closed the file). A reader that seeks (Parquet's, to the footer first, then to
    each row group) is followed by the bytes it has read instead, up to the file's size, so the
    progress line does not take the footer for the end of the work. With a `window` (a span's
    bytes, [start, end)), `inside` counts the bytes within it that have been read, each once."""

    def __init__(self, f, window: tuple[int, int] | None = None):
        self._f = f
        self.pos = 0
        self.inside = 0
        self._window = window
        self._read: list[list[int]] = []  # the window's parts read, disjoint, in order
        self._size = None  # known once the reader seeks

    def read(self, n=-1):
        before = self._where()
        data = self._f.read(n)
        self._moved(before, len(data))
        return data

    def readinto(self, buffer):
        before = self._where()
        n = self._f.readinto(buffer)
        self._moved(before, n)
        return n

    def seek(self, offset, whence=0):
        if self._size is None:
            self._size = self._f.seek(0, io.SEEK_END)
        return self._f.seek(offset, whence)

    def _where(self) -> int | None:
        return None if self._window is None else self._f.tell()

    def _moved(self, before: int | None, n: int) -> None:
        if before is not None:
            lo, hi = self._window
            self._add(max(lo, before), min(hi, before + n))
        if self._size is None:
            self.pos = self._f.tell()
        else:
            self.pos = min(self._size, self.pos + n)

    def _add(self, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        parts, merged = [], [lo, hi]
        for part in self._read:
            if part[1] < merged[0] or part[0] > merged[1]:
                parts.append(part)
            else:
                merged = [min(part[0], merged[0]), max(part[1], merged[1])]
        self._read = sorted([*parts, merged])
        self.inside = sum(b - a for a, b in self._read)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()
