"""The input files of a command, listed once before any work starts: input patterns (a file,
a folder read at every depth, a glob; local or gs://) -> (format, path, relative path,
metadata), sorted.

A name that is no regular file, or a dangling link, is refused here, where it is first seen
(`refuse_unusable_inputs`), and so, for a build, are two files whose documents would take the
same ids (`refuse_shared_names`). Inside `one_listing` each pattern is listed once and its sizes
kept, for the command's checks, its disk estimate, the progress total and the first stage
(`pipeline.stages.read`), which reads the files listed here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import stat
from dataclasses import dataclass

from apache_beam.io.filesystem import FileMetadata

from pipeline.files import fsio
from pipeline.files.localglob import files_below
from pipeline.sources.documents import BadInputError, hidden_name
from pipeline.sources.readers import FIELD_FORMATS, GROUPED_FORMATS, READERS
from pipeline.sources.wikipedia.spans import is_index
from schemas.manifest import MANIFEST_NAME, SHARDS_DIR

GLOB_CHARS = fsio.GLOB_CHARS


@dataclass(frozen=True)
class InputSpec:
    format: str  # a key of READERS
    pattern: str  # file, directory or glob, local or gs://

    def __post_init__(self):
        if self.format not in READERS:
            raise ValueError(
                f"unknown input format {self.format!r} for {self.pattern}; "
                f"choose one of: {', '.join(sorted(READERS))}"
            )


def field_inputs(specs) -> bool:
    """Whether an input's records hold their text in a named field (JSON Lines, Parquet,
    Arrow)."""
    return any(s.format in FIELD_FORMATS for s in specs)


def grouped_inputs(specs) -> bool:
    """Whether an input's records can be joined into documents (`--records-per-document`)."""
    return any(s.format in GROUPED_FORMATS for s in specs)


def glob_root(pattern: str) -> str:
    """The directory that relative paths (and so document ids) are taken from."""
    cut = min((pattern.find(c) for c in GLOB_CHARS if c in pattern), default=-1)
    if cut < 0:
        return posixpath.dirname(pattern.rstrip("/"))
    return pattern[:cut].rsplit("/", 1)[0] if "/" in pattern[:cut] else ""


_LISTINGS: dict | None = None  # InputSpec -> its listing, inside `one_listing`
_SIZES: dict[str, int] = {}  # path -> stored size, from the listings inside `one_listing`
_WALKS: dict[str, list[str]] = {}  # local folder -> its files, for the inputs' listings inside it
HIDDEN: dict = {}  # InputSpec -> the names below it left out as hidden (`leave_out_hidden`)


@contextlib.contextmanager
def one_listing():
    """Inside, each input pattern is listed once: a command's input checks, disk check, resume
    record, progress total and the graph's first steps (when they run in this process or in
    workers forked from it) share one listing and its sizes: each listing of a corpus of many
    files costs CPU in the driver before the first stage (docs/benchmarks.md, raw formats)."""
    global _LISTINGS
    outer = _LISTINGS
    if outer is None:
        _LISTINGS = {}
    try:
        yield
    finally:
        if outer is None:
            _LISTINGS = None
            _SIZES.clear()
            _WALKS.clear()
            HIDDEN.clear()


def listed(spec: InputSpec) -> list[tuple[str, str, str, FileMetadata]]:
    """(format, path, relative path, metadata) of every file the pattern names, sorted, from one
    listing (Beam compiles a pattern per path it is asked to match: a path at a time, 17,000
    books cost a minute). A pattern without glob characters is a file, or a folder read at
    every depth, with or without a trailing slash, on every filesystem (on object stores a
    folder is a name prefix). Inside `one_listing`, listed once."""
    if _LISTINGS is None:
        return list_files(spec)
    if spec not in _LISTINGS:
        _LISTINGS[spec] = list_files(spec)
        _SIZES.update((m.path, m.size_in_bytes) for *_, m in _LISTINGS[spec])
    return list(_LISTINGS[spec])


def list_files(spec: InputSpec) -> list[tuple[str, str, str, FileMetadata]]:
    """`listed`'s listing, made: a name that cannot be read as a file is refused here, where it
    is first seen, before anything reads it (`BadInputError`, whose name the runner's one-line
    failure finds also when a remote worker raised it)."""
    pattern = spec.pattern
    walks = _WALKS if _LISTINGS is not None else {}  # the inputs' folders, walked once
    missed: list[str] = []  # local names matched that no stat reached: dangling links
    if any(c in pattern for c in GLOB_CHARS):
        found, root = fsio.match(pattern, walks, missed), glob_root(pattern)
        if not found and not missed and names_a_path(pattern):
            found, root, missed = as_written(pattern)
    else:
        found = fsio.files_under(pattern, walks, missed)
        one_file = len(found) == 1 and found[0].path == pattern.rstrip("/")
        root = glob_root(pattern) if one_file else pattern.rstrip("/")
        if not found and fsio.is_local(pattern) and not os.path.isdir(pattern):
            missed = [pattern]  # no file, or a dangling link, by that name
    found, missed, HIDDEN[spec] = leave_out_hidden(found, missed, root, pattern)
    refuse_odd_files(found, sorted(missed), pattern)
    refuse_names_not_utf8(found)
    return [(spec.format, m.path, relative(m.path, root), m) for m in found]


def relative(path: str, root: str) -> str:
    """A file's name within its input: below `root`, else its own name."""
    return (
        path[len(root) :].lstrip("/")
        if root and path.startswith(root)
        else posixpath.basename(path)
    )


def hidden_note(spec: InputSpec) -> str | None:
    """The note for the files an input's listing left out as hidden, if any."""
    return f"note: {spec.pattern}: {_hidden_said(spec)}" if HIDDEN.get(spec) else None


def no_files_said(spec: InputSpec) -> str:
    """Why an input gives no file: nothing matches, or all it holds was left out as hidden."""
    said = f"no input files match {spec.pattern!r} (format {spec.format})"
    return f"{said}: {_hidden_said(spec)}" if HIDDEN.get(spec) else said


def _hidden_said(spec: InputSpec) -> str:
    names = HIDDEN[spec]
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (
        f"{len(names):,} file(s) left out, whose names begin with '.' ({shown}); a pattern "
        "that spells the '.' reads them (--input 'DIR/.name')"
    )


def leave_out_hidden(found, missed: list[str], root: str, pattern: str) -> tuple:
    """(found, missed, hidden names) without the files whose name within the input has a part
    that begins with "." (`.git/`, `.DS_Store`, `.gitattributes`), as Hadoop's and Hugging Face
    `datasets`' listings leave them out, and as a shell's glob does; kept when the pattern spells
    such a part after its folder (`in/.notes/*`, or such a file named alone)."""
    rest = pattern[len(root) :] if root and pattern.startswith(root) else pattern
    if any(p.startswith(".") and p not in (".", "..") for p in rest.split("/")):
        return found, missed, []

    def hidden(path: str) -> bool:  # a part of the name below `root` begins with "."
        if "/." not in path and not path.startswith("."):
            return False  # (most paths: no part of the whole path does)
        return hidden_name(relative(path, root))

    left_out = sorted(relative(p, root) for p in [m.path for m in found] + missed if hidden(p))
    if not left_out:
        return found, missed, []
    return [m for m in found if not hidden(m.path)], [p for p in missed if not hidden(p)], left_out


def names_a_path(pattern: str) -> bool:
    """A local pattern with glob characters that matches nothing but names a file or folder as
    written ("Moby [1851].txt"): read as that path. Only a pattern that matches no file is read
    so, so what a pattern matches never changes."""
    return fsio.is_local(pattern) and os.path.lexists(pattern.rstrip("/") or pattern)


def as_written(path: str) -> tuple[list[FileMetadata], str, list[str]]:
    """(files, root, names left out) of a local path holding glob characters, taken as written:
    a file, or a folder at every depth, listed as a path without them is (the same walk, joins
    and metadata), so its documents have the ids they would have under a plain name."""
    path = path.rstrip("/") or path
    if os.path.isdir(path):
        names = files_below(path)
        root = path
    else:
        names, root = [path], posixpath.dirname(path)
    found, missed = [], []
    for name in names:
        try:
            st = os.stat(name)
        except OSError:  # a dangling link, or gone since the walk
            missed.append(name)
            continue
        found.append(FileMetadata(name, st.st_size, st.st_mtime))
    return sorted(found, key=lambda m: m.path), root, missed


def refuse_odd_files(found: list[FileMetadata], missed: list[str], pattern: str = "") -> None:
    """A named pipe, socket or device among an input's files, or a dangling symbolic link, is
    refused: reading a pipe waits for a writer that never comes (the build would hang), and a
    dangling link would be left out uncounted. A pipe named as the input itself (`/dev/stdin`
    under `cat x |`) is read once at most, where a build reads its files more than once."""
    for path in missed:
        if os.path.islink(path) and not os.path.exists(path):
            raise BadInputError(
                f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                "remove the link or restore what it points to"
            )
    for m in found:
        if m.size_in_bytes == 0 and fsio.is_local(m.path):  # how pipes and devices list
            kind = not_a_file(m.path)
            if kind:
                advice = (
                    " (the command reads its files more than once); write what it gives to a "
                    "file, and give that file"
                    if m.path == pattern  # named as the input itself
                    else "; remove it from the input folder, or name the input's files with a "
                    "glob that leaves it out"
                )
                raise BadInputError(
                    f"{m.path} is {kind}, not a regular file, so it cannot be read as input{advice}"
                )


def refuse_names_not_utf8(found: list[FileMetadata]) -> None:
    """A local file whose name is not UTF-8 (Latin-1 names of an old archive: Python holds the
    bytes as surrogates) is refused, naming it with those bytes escaped: document ids, the
    manifest and the records the build passes between its steps are UTF-8 text, and the build
    stopped at its first step on such a name, in words of Beam's."""
    for m in found:
        if not m.path.isascii():
            try:
                m.path.encode("utf-8")
            except UnicodeEncodeError:
                shown = m.path.encode("utf-8", "surrogateescape").decode(
                    "utf-8", "backslashreplace"
                )
                raise BadInputError(
                    f"{shown}: the file's name is not UTF-8 (its bytes shown escaped), and ids "
                    "and the build's records are text; rename it (`convmv -f latin1 -t utf-8 "
                    "--notest -r DIR` renames a folder's), or leave it out of the input"
                ) from None


SPECIAL_FILES = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_a_file(path: str) -> str | None:
    """What a local name is when it is no regular file (links followed), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # gone since the listing: reading it says so
        return None
    return next((kind for test, kind in SPECIAL_FILES if test(mode)), None)


def refuse_unusable_inputs(specs) -> None:
    """Lists every input before any work starts (the listing is kept for the command, inside
    `one_listing`): a name that is no readable file stops the command in one line, and so
    does `-` (standard input: the command reads its files more than once)."""
    for spec in specs:
        if spec.pattern == "-":
            raise SystemExit(
                "error: --input -: standard input cannot be an input (the command reads its files "
                "more than once); write it to a file, and give that file"
            )
        try:
            listed(spec)
        except BadInputError as e:
            raise SystemExit(f"error: {e}") from None


def shard_set_inside(spec: InputSpec) -> str | None:
    """The manifest of a shard set the input would read (a build's OUT given as, or under, an
    input): its shards, vocab and JSON would be read as text, the shards failing as binary
    once OUT is claimed, or, with --skip-bad-input, skipped while the rest trains the vocab."""
    rels = {rel: path for _, path, rel, _ in listed(spec)}
    for rel, path in rels.items():
        folder, _, name = rel.rpartition("/")
        shards = f"{folder}/{SHARDS_DIR}/" if folder else f"{SHARDS_DIR}/"
        if name == MANIFEST_NAME and any(r.startswith(shards) for r in rels):
            return path
    return None


# formats whose document ids are a file's name in its input
IDS_OF_NAMES = ("text", "paragraphs", "books")


def refuse_shared_names(specs, dedup: bool) -> None:
    """Two files whose documents would take the same ids stop a build before any work starts,
    instead of when the ids meet (`pipeline.core.buckets.refuse_repeated_ids`), after OUT was
    made. Ids stay as they are (they decide the shards' bytes). With --dedup equal copies are
    dropped before the ids meet, so nothing is refused here."""
    if dedup:
        return
    line = shared_name(specs)
    if line:
        raise SystemExit(f"error: {line}")


def shared_name(specs) -> str | None:
    """The first clash of ids among the inputs' files, as a line, or None. Text and books ids
    are made of a file's name within its input; any file read twice under one name repeats
    every id (JSONL ids of records without one, Wikipedia's page ids). Empty files make no
    document and a multistream index is read with its dump, so neither can clash."""
    seen: dict[tuple, tuple[str, str, int]] = {}
    for spec in specs:
        for fmt, path, rel, m in listed(spec):
            if m.size_in_bytes == 0 or (fmt == "wikipedia" and is_index(path)):
                continue
            key = (fmt, rel) if fmt in IDS_OF_NAMES else (fmt, rel, path)
            if key in seen:
                return clash_line(seen[key], (path, spec.pattern, m.size_in_bytes), rel)
            seen[key] = (path, spec.pattern, m.size_in_bytes)
    return None


def clash_line(first: tuple[str, str, int], second: tuple[str, str, int], rel: str) -> str:
    """What is wrong with two listings of one name, and what to do. --dedup is named only for
    files of one size: it helps only when their documents are equal."""
    (path, pattern, size), (other, other_pattern, other_size) = first, second
    if path == other:
        return (
            f"{path} is read twice, as {rel} of the inputs {pattern} and {other_pattern}, so "
            "each of its documents would be there twice; give each file once"
        )
    copies = "pass --dedup (make: ARGS=--dedup) if they are copies, or " * (size == other_size)
    return (
        f"{path} and {other} have the same name within their inputs ({rel}), which names their "
        f"documents; rename one, {copies}give a folder above both as one input"
    )


def expand_pattern(spec: InputSpec) -> list[tuple[str, str, str]]:
    """(format, path, relative path) for every file the pattern names, sorted."""
    return [(fmt, path, rel) for fmt, path, rel, _ in listed(spec)]


def listing_rows(specs) -> list[list]:
    """[format, path, stored size, modification time] of every input file, sorted: what a
    build's resume record keeps of its input, and what a worker's own listing must give again."""
    return sorted(
        [spec.format, m.path, m.size_in_bytes, m.last_updated_in_seconds]
        for spec in specs
        for *_, m in listed(spec)
    )


def listing_digest(specs) -> str:
    """One sha256 over `listing_rows`: the command's listing, carried to its workers."""
    return rows_digest(listing_rows(specs))


def rows_digest(rows: list[list]) -> str:
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


_SHARED = False  # whether the graph now built runs in this process or in workers forked from it


@contextlib.contextmanager
def workers_share_listing(shared: bool):
    """While a graph is built and run: whether its steps run in this process or in workers
    forked from it, which read this process's listing (`one_listing`) as it is. Elsewhere (a
    cluster's workers, a job service's) the first stage carries a digest of the listing, which
    their own must equal (`check_listing`)."""
    global _SHARED
    before, _SHARED = _SHARED, shared
    try:
        yield
    finally:
        _SHARED = before


def listing_for_workers(specs) -> str | None:
    """The digest (`listing_digest`) that workers check their own listing against; None where
    they read this process's listing, and where this process made none (a graph built offline,
    such as a job's for Dataflow): then there is nothing to check against."""
    if _SHARED or not listed_here(specs):
        return None
    return listing_digest(specs)


def listed_here(specs) -> bool:
    """Whether this process holds every pattern's listing from `one_listing`: the command's
    own process, or a worker forked from it, which reads what the command listed."""
    return _LISTINGS is not None and all(spec in _LISTINGS for spec in specs)


def changed_files(before: list[list], after: list[list]) -> list[str]:
    """The paths added, removed or changed between two `listing_rows`, sorted."""
    old = {tuple(f[:2]): f for f in before}
    new = {tuple(f[:2]): f for f in after}
    return [key[1] for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]


def check_listing(specs, digest: str, record: str | None = None) -> None:
    """In a worker that listed the input itself (a cluster's, a job service's): ValueError
    unless it found the files the command listed at its start (`digest`), so that no runner
    reads a file added since, or leaves out one removed since without a word. `record`, a
    build's resume record (its `inputs` are `listing_rows`), names the first file changed."""
    rows = listing_rows(specs)
    if rows_digest(rows) == digest:
        return
    what = f"{len(rows)} input file(s) now"
    try:
        if record:
            differ = changed_files(json.loads(fsio.read_bytes(record))["inputs"], rows)
            what = f"{len(differ)} file(s) added, removed or changed, first {differ[0]}"
    except (TypeError, OSError, ValueError, KeyError, IndexError):  # no record, or not one
        pass
    again = "run the command again once no input file is being added, removed or changed"
    if record:
        again = "restore the input as it was and run the same command with --resume, or " + again
    raise ValueError(
        f"the input changed after the command started ({what}): a worker's listing of it is "
        f"not the command's; {again}"
    )


def input_files(specs) -> list[tuple[str, int]]:
    """(path, stored size) of every input file."""
    return [(m.path, m.size_in_bytes) for spec in specs for *_, m in listed(spec)]


def input_bytes(specs) -> int:
    """The stored size of every input file (what the progress line counts against)."""
    return sum(size for _, size in input_files(specs))


def known_size(path: str) -> int | None:
    """A file's stored size from a listing made in this process inside `one_listing` (its
    workers forked after it see it too), or None: one request fewer per file on gs://."""
    return _SIZES.get(path)
