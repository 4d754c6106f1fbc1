"""Local globs are matched by `fsio.local_match`: the same files and metadata as Beam's
`LocalFileSystem.match`, which stats every file below the pattern's folder first."""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems

from pipeline.files import fsio
from pipeline.stages.read import InputSpec, listed, one_listing

NAMES = (
    "copy-000/a.txt",
    "copy-000/sub/b.txt",
    "copy-000/sub/deep/c.txt",
    "copy-000/notes.md",
    "copy-001/a.txt",
    "copy-001/sub/b.txt",
    "copy-011/x.txt",
    "other/copy-000.txt",
    "odd name/é ß.txt",
    "top.txt",
)


@pytest.fixture
def tree(tmp_path):
    for k, name in enumerate(NAMES):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * (k + 1))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))
    return str(tmp_path)


def beams(pattern: str) -> list[tuple[str, int, float]]:
    try:
        found = [m for r in FileSystems.match([pattern]) for m in r.metadata_list]
    except Exception:  # Beam raises where it finds nothing to list
        found = []
    return sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in found)


def ours(pattern: str) -> list[tuple[str, int, float]]:
    return [(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in fsio.match(pattern)]


@pytest.mark.parametrize(
    "rel",
    [
        "**",
        "*",
        "*.txt",
        "**/*.txt",
        "**.txt",
        "[c]opy-000/**",
        "[c]opy-00?/**/*.txt",
        "copy-0[01]*/*",
        "copy-*/sub/**",
        "copy-000/",
        "copy-000/sub/*",
        "copy-000/s*",
        "odd name/*",
        "other/*-000.txt",
        "missing/**",
        "missing*/x",
        "c[!o]*/**",
        "[!c]*/**",
    ],
)
def test_local_globs_match_what_beam_matches(tree, rel):
    pattern = f"{tree}/{rel}"
    assert ours(pattern) == beams(pattern)


def test_the_folder_of_many_patterns_is_walked_once_inside_a_listing(tree, monkeypatch):
    walks, real_walk = [], os.walk

    def walk(top, *args, **kwargs):
        walks.append(top)
        return real_walk(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", walk)
    specs = [InputSpec("text", f"{tree}/[c]opy-00{k}/**") for k in (0, 1)]
    with one_listing():
        first = [listed(s) for s in specs]
    assert walks == [tree]
    assert [len(x) for x in first] == [4, 2]
    assert [rel for *_, rel, _ in first[0]] == [
        "copy-000/a.txt",
        "copy-000/notes.md",
        "copy-000/sub/b.txt",
        "copy-000/sub/deep/c.txt",
    ]
    # outside a listing nothing is kept: a new file is seen
    open(os.path.join(tree, "copy-000", "new.txt"), "w").close()
    assert len(listed(specs[0])) == 5
    assert walks == [tree, tree]


def test_what_the_build_lists_while_it_runs_is_listed_afresh(tree, tmp_path):
    """Inside a command's listing only the inputs' folders are walked once: the progress line's
    look at the build area (and every other listing) sees the files written since."""
    from pipeline.files.fsio import write_marker
    from pipeline.shell.progress import Snapshot

    building = str(tmp_path / "building")
    tmp = f"{building}/tmp"
    with one_listing():
        listed(InputSpec("text", f"{tree}/[c]opy-00*/**"))
        write_marker(f"{tmp}/progress/a.json", {"bytes": 5, "documents": 1})
        assert Snapshot(tmp, building, {}).bytes == 5
        write_marker(f"{tmp}/progress/b.json", {"bytes": 7, "documents": 1})
        assert Snapshot(tmp, building, {}).bytes == 12
        open(os.path.join(tree, "copy-000", "late.txt"), "w").close()
        assert f"{tree}/copy-000/late.txt" in [m.path for m in fsio.files_under(tree)]
