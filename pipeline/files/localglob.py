"""Local globs matched as Beam's `LocalFileSystem.match` matches them (the same files, the same
metadata), but walking only the folders a glob's leading names can match and statting only the
files it names: a pattern for one copy of a corpus beside many others walks and stats that copy
alone. `walks` (folder -> its files) lets one command list each folder once for all its
patterns. Local only: no Beam filesystem, no request.

One difference, on purpose: a symbolic link to a folder is entered, its files listed under the
link's name, as if the folder were there (Beam's match, like `os.walk`, leaves it out without a
word, so a corpus folder that links in another one lost that one's files silently). A link to a
folder that holds the link, whose walk would never end, is refused (`BadInputError`).
"""

from __future__ import annotations

import os
import re

from apache_beam.io.filesystem import FileMetadata, FileSystem

from pipeline.sources.documents import BadInputError


def _walk(folder: str, walks: dict | None) -> list[str]:
    """Every file below a local folder (Beam's `LocalFileSystem._list` order and joins); from
    `walks` (folder -> files) when it holds the folder or a folder above it, and kept there."""
    if walks is not None:
        if folder in walks:
            return walks[folder]
        above = folder if os.path.normpath(folder) == folder else ""  # else spelt otherwise
        while (up := os.path.dirname(above)) not in (above, ""):
            above = up
            if above in walks:
                below = [p for p in walks[above] if p.startswith(folder + os.sep)]
                walks[folder] = below
                return below
    found = files_below(folder)
    if walks is not None:
        walks[folder] = found
    return found


def files_below(folder: str) -> list[str]:
    """`os.walk(folder, followlinks=True)`'s files (an unreadable folder skipped), each joined to
    its folder, in its order; from the names' `DirEntry`s alone, without `os.walk`'s tuples,
    joins and a `stat` of every folder. A symbolic link to a folder is walked as the folder it
    names, under its own name; one whose folder holds the link (a loop) is refused."""
    found: list[str] = []
    stack: list[tuple[str, tuple[str, ...]]] = [(folder, ())]  # (folder, where links were met)
    while stack:
        top, met = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        folders = []
        for entry in entries:
            if not _holds(entry.is_dir):
                found.append(entry.path)
            elif _holds(entry.is_symlink):
                folders.append((entry.path, _entered(entry.path, met)))
            else:
                folders.append((entry.path, met))
        stack += reversed(folders)
    return found


def _entered(link: str, met: tuple[str, ...]) -> tuple[str, ...]:
    """`met` and the real folder holding `link`, a symbolic link to a folder about to be walked;
    refused when its folder holds that folder or one the walk came through (`met`: where the
    links on the way were met), where the walk would go round for ever."""
    target, here = os.path.realpath(link), os.path.realpath(os.path.dirname(link))
    if any(p == target or p.startswith(target.rstrip(os.sep) + os.sep) for p in (*met, here)):
        raise BadInputError(
            f"{link} is a symbolic link to {os.readlink(link)}, a folder that holds the link or "
            "one the walk came through, so the walk would never end; remove the link, or name "
            "the input's files with a glob that leaves it out"
        )
    return (*met, here)


def _holds(test) -> bool:
    """A `DirEntry` test's answer, False where it cannot be told (as `os.walk` takes it)."""
    try:
        return test()
    except OSError:
        return False


def _name_parts(rest: str) -> list[str]:
    """The leading folder names of a glob's text after its folder whose part of Beam's regular
    expression (`FileSystem.translate_pattern`) cannot match a "/": a path matches the glob only
    if each of those folders' names matches its part. The first part that could (holding `?`,
    `**`, or a class that takes "/") ends them; the glob's last part, the files', is never one."""
    parts: list[str] = []
    i, start, n = 0, 0, len(rest)
    while i < n:
        c = rest[i]
        if c == "/":
            parts.append(rest[start:i])
            start = i + 1
        elif c == "?" or rest.startswith("**", i):
            return parts
        elif c == "[":  # Beam's reading of a class: "[!" negates, "]" first is a member
            j = i + 1 + (rest[i + 1 : i + 2] == "!")
            j += rest[j : j + 1] == "]"
            end = rest.find("]", j)
            if end >= 0:  # else a plain "["
                if re.match(FileSystem.translate_pattern(rest[i : end + 1]), "/"):
                    return parts  # "[!a]", "[/]", a range over "/" such as "[.-0]"
                i = end
        i += 1
    return parts


def _folders(folder: str, rest: str) -> list[str]:
    """The folders below `folder` (symbolic links to folders among them, as `files_below`
    enters them) whose names match the exact leading names of `rest` (`_name_parts`): every
    file the glob can match lies below one of them."""
    folders = [folder]
    for name in _name_parts(rest):
        name_matches = re.compile(FileSystem.translate_pattern(name)).match
        below = []
        for parent in folders:
            try:
                with os.scandir(parent) as it:
                    below += [e.path for e in it if _holds(e.is_dir) and name_matches(e.name)]
            except OSError:  # not a folder, or unreadable: os.walk skips it too
                continue
        folders = sorted(below)
    return folders


def local_match(
    pattern: str, walks: dict | None = None, missed: list[str] | None = None
) -> list[FileMetadata]:
    """Beam's `LocalFileSystem.match` of a glob, with the same files and metadata (and those
    below symbolic links to folders, which Beam leaves out), but Beam
    stats every file below the folder before the pattern's first glob character and then
    matches their names, where this walks only the folders whose names the glob's leading
    names match (`_folders`), matches names, and stats only the matches: a pattern for one
    copy of a corpus beside many others walks and stats that copy alone. `walks`: see `_walk`
    (the input listing of a command walks each folder once for all its patterns). `missed`,
    when given, gets the names that match but could not be statted (a dangling symbolic link, a
    file gone since the walk), which Beam's match leaves out without a word."""
    if pattern.endswith("/"):
        pattern += "*"
    folder = os.path.dirname(re.match(r"^[^[*?]*", pattern).group(0))
    here = folder or os.curdir  # a relative glob with no folder before it ("*.txt"): this one
    if not os.path.exists(here):
        return []
    name_matches = re.compile(FileSystem.translate_pattern(pattern)).match
    found = []
    for below in _folders(here, pattern[len(folder) :].lstrip("/")):
        for path in _walk(below, walks):
            if not folder:  # "./a.txt" -> "a.txt", as the pattern spells it
                path = path[len(here) + 1 :]
            if name_matches(path):
                try:
                    st = os.stat(path)
                except OSError:  # gone since the walk, or a dangling link: Beam skips it
                    if missed is not None:
                        missed.append(path)
                    continue
                found.append(FileMetadata(path, st.st_size, st.st_mtime))
    return sorted(found, key=lambda m: m.path)
