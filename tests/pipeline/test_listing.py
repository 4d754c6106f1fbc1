"""Local globs are matched by `localglob.local_match`: the same files and metadata as Beam's
`LocalFileSystem.match`, which stats every file below the pattern's folder first, where ours
walks only the folders the glob's leading names match; and a symbolic link to a folder is
entered (Beam's match leaves it out), its files named under the link, a loop refused."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from apache_beam.io.filesystems import FileSystems

from pipeline.files import fsio, localglob
from pipeline.files.listing import InputSpec, listed, listing_digest, listing_rows, one_listing
from pipeline.sources.documents import BadInputError

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
    "copy/000/y.txt",  # what "?", "[!x]" and "[.-0]" match across a "/" in Beam's globs
)


@pytest.fixture
def tree(tmp_path):
    for k, name in enumerate(NAMES):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * (k + 1))
        os.utime(path, (1_000_000 + k, 1_000_000 + k))
    os.symlink(tmp_path / "copy-000", tmp_path / "link-000")  # Beam's match does not enter it
    os.symlink(tmp_path / "top.txt", tmp_path / "copy-011" / "top-link.txt")
    return str(tmp_path)


def beams(pattern: str) -> list[tuple[str, int, float]]:
    try:
        found = [m for r in FileSystems.match([pattern]) for m in r.metadata_list]
    except Exception:  # Beam raises where it finds nothing to list
        found = []
    return sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in found)


def beams_in_a_copy(tree: str, rel: str, tmp_path_factory) -> list[tuple[str, int, float]]:
    """Beam's match of `tree/rel` on a copy of the tree whose links are what they name (a link
    to a folder a copy of the folder), its paths named in the tree."""
    copy = str(shutil.copytree(tree, tmp_path_factory.mktemp("copy") / "t", symlinks=False))
    return [(p.replace(copy, tree, 1), size, t) for p, size, t in beams(f"{copy}/{rel}")]


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
        "copy?000/**",
        "copy[!x]000/**",
        "copy[.-0]000/**",
        "[c]opy-000/sub/[d]eep/*",
        "c*/s*/*.txt",
        "*/sub/**",
        "[c]opy-0[01]1/*",
        "[cl]*/**",
        "[l]ink-000/*",
        "link-000/*",
        "[]c]opy-000/*",
        "[c/]opy-000/*",
        "[c-d]opy-000/*",
        "[c]opy-000[/]sub/*",
        "[c]opy-000/sub",
        "[c]opy-000/sub/",
    ],
)
def test_local_globs_match_what_beam_matches_with_links_entered(tree, rel, tmp_path_factory):
    """Ours on the tree against Beam's match on a copy of it whose links are what they name (a
    link to a folder a copy of the folder): the same names, sizes and times."""
    expected = beams_in_a_copy(tree, rel, tmp_path_factory)
    assert ours(f"{tree}/{rel}") == expected
    if "link-000" in rel or "**" in rel and rel.startswith(("*", "[cl]")):
        assert [p for p, *_ in expected if "/link-000/" in p]  # the link's files among them


@pytest.mark.parametrize("rel", ["*.txt", "**/*.txt", "[c]opy-000/**", "copy-0?1/*", "*/sub/**"])
def test_a_relative_glob_matches_from_the_current_folder(tree, rel, monkeypatch, tmp_path_factory):
    """`--input '*.txt'` typed in the corpus's folder: the files the same glob matches under
    that folder's absolute path, named as the glob spells them (Beam's own match finds none)."""
    matched = beams_in_a_copy(tree, rel, tmp_path_factory)
    monkeypatch.chdir(tree)
    expected = [(p[len(tree) + 1 :], size, t) for p, size, t in matched]
    assert expected and ours(rel) == expected


def test_a_pattern_walks_the_folders_its_names_match_each_once_inside_a_listing(tree, monkeypatch):
    walks, real_walk = [], localglob.files_below

    def walk(top):
        walks.append(top)
        return real_walk(top)

    monkeypatch.setattr(localglob, "files_below", walk)
    specs = [InputSpec("text", f"{tree}/[c]opy-00{k}/**") for k in (0, 1)]
    with one_listing():
        first = [listed(s) for s in specs]
        assert fsio.match(f"{tree}/[c]opy-000/*.txt", {})  # walked again: another listing
    assert walks == [f"{tree}/copy-000", f"{tree}/copy-001", f"{tree}/copy-000"]
    assert [len(x) for x in first] == [4, 2]
    assert [rel for *_, rel, _ in first[0]] == [
        "copy-000/a.txt",
        "copy-000/notes.md",
        "copy-000/sub/b.txt",
        "copy-000/sub/deep/c.txt",
    ]
    # a folder walked whole serves the patterns for folders below it
    walks.clear()
    with one_listing():
        whole = listed(InputSpec("text", f"{tree}/**"))
        copies = [listed(s) for s in specs]
    assert walks == [tree]
    # the link to top.txt, and copy-000's 4 files again under link-000
    assert copies == first and len(whole) == len(NAMES) + 1 + 4
    # outside a listing nothing is kept: a new file is seen
    open(os.path.join(tree, "copy-000", "new.txt"), "w").close()
    assert len(listed(specs[0])) == 5
    assert walks == [tree, f"{tree}/copy-000"]


def test_a_folders_files_are_os_walks_following_links(tree, tmp_path):
    """The walk lists what `os.walk(followlinks=True)` lists, in its order: links to files and
    dangling links among the files, links to folders entered, a pipe listed (the listing
    refuses it later), a folder that is a link walked itself, a file or nothing given: none."""
    os.symlink(tmp_path / "missing.txt", tmp_path / "copy-000" / "dangling.txt")
    os.mkfifo(tmp_path / "copy-000" / "sub" / "pipe")
    for top in (
        tree,
        f"{tree}/",
        f"{tree}/copy-000",
        f"{tree}/link-000",
        f"{tree}/top.txt",
        f"{tree}/absent",
    ):
        walked = os.walk(top, followlinks=True)
        assert localglob.files_below(top) == [os.path.join(d, f) for d, _, fs in walked for f in fs]
    assert f"{tree}/copy-000/dangling.txt" in localglob.files_below(tree)
    assert f"{tree}/link-000/sub/deep/c.txt" in localglob.files_below(tree)


def test_a_folder_spelt_otherwise_is_walked_itself(tree):
    """A folder named with "//" inside lists its paths that way, where the walk of a folder
    above it spells them with one "/"."""
    walks = {}
    assert fsio.match(f"{tree}/**", walks)
    odd = f"{tree}/copy-000//sub/[d]eep/*"
    found = [(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in fsio.match(odd, walks)]
    assert found == beams(odd) and len(found) == 1


def test_a_pattern_through_a_link_is_served_by_the_walk_above_it(tree, monkeypatch):
    """The walk of a folder enters the links to folders below it, so a pattern through such a
    link takes its files from that walk: the names Beam's match gives the pattern itself."""
    walks = {}
    everything = fsio.match(f"{tree}/**", walks)
    inside = [m.path for m in everything if "/link-000/" in m.path]
    assert inside == [
        m.path.replace("/copy-000/", "/link-000/") for m in fsio.match(f"{tree}/copy-000/**")
    ]
    assert ours(f"{tree}/link-000/**") == beams(f"{tree}/link-000/**")
    monkeypatch.setattr(localglob, "files_below", None)  # no walk is made again
    assert [m.path for m in fsio.match(f"{tree}/link-000/**", walks)] == inside


def test_a_link_to_a_folder_that_holds_it_is_refused_in_one_line(tree, tmp_path):
    """A link to the folder it is in, or above, and two folders linking to each other: their
    walks would never end. Two links to one folder are read twice, as nested inputs are."""
    os.symlink(tmp_path / "copy-000", tmp_path / "copy-001" / "again")  # not a loop
    assert len(localglob.files_below(tree)) == len(NAMES) + 1 + 4 + 4
    loops = [(tmp_path / "copy-000" / "sub" / "up", tmp_path / "copy-000")]
    loops.append((tmp_path / "copy-011" / "to-other", tmp_path / "other"))
    loops.append((tmp_path / "other" / "to-copy", tmp_path / "copy-011"))
    os.symlink(*reversed(loops[0]))
    for pattern in (tree, f"{tree}/copy-000", f"{tree}/[c]opy-000/**"):
        with pytest.raises(BadInputError) as e:
            listed(InputSpec("text", pattern))
        link, said = str(e.value).split(" is a symbolic link to ", 1)  # met by either name
        assert link in (str(loops[0][0]), str(loops[0][0]).replace("copy-000", "link-000"))
        assert said.startswith(f"{tmp_path}/copy-000, a folder that holds the link or one the")
        assert said.endswith("that leaves it out") and "\n" not in said
    assert listed(InputSpec("text", f"{tree}/[o]ther/**"))  # a glob that leaves it out
    os.remove(loops[0][0])
    for link, folder in loops[1:]:
        os.symlink(folder, link)
    with pytest.raises(BadInputError, match=r"^\S+/(to-other|to-copy) is a symbolic link to"):
        localglob.files_below(f"{tree}/copy-011")


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


def test_a_worker_that_lists_the_input_itself_reads_the_commands_files_or_says_why_not(tmp_path):
    """A cluster's worker (not forked from the command) lists the input again before it plans
    the reads: a file removed or changed since the command listed it stops the build in one
    line, naming the first such file where a resume record is given; a worker forked from the
    command plans from the command's own listing, as it is."""
    import json

    from pipeline.stages.read import plan_groups

    books = tmp_path / "books"
    books.mkdir()
    for name in ("a", "b", "c"):
        (books / f"{name}.txt").write_text(f"Book {name} has a line.\n")
    specs = [InputSpec("books", str(books))]
    record = tmp_path / "build.json"
    record.write_text(json.dumps({"inputs": listing_rows(specs)}))
    digest = listing_digest(specs)
    assert len(plan_groups(specs, 1 << 20, digest, str(record))[0]) == 3  # as listed: read

    with one_listing():  # the command's process, and the workers it forks
        listed(specs[0])
        os.remove(books / "b.txt")
        assert len(plan_groups(specs, 1 << 20, digest, str(record))[0]) == 3  # its own listing
    with pytest.raises(ValueError) as e:
        plan_groups(specs, 1 << 20, digest, str(record))
    assert str(e.value) == (
        f"the input changed after the command started (1 file(s) added, removed or changed, "
        f"first {books}/b.txt): a worker's listing of it is not the command's; restore the "
        "input as it was and run the same command with --resume, or run the command again once "
        "no input file is being added, removed or changed"
    )
    (books / "d.txt").write_text("Book d came late.\n")
    with pytest.raises(ValueError, match=r"^the input changed .* \(3 input file\(s\) now\): .*"):
        plan_groups(specs, 1 << 20, digest)  # no record (vocab, punkt): the count alone
    with pytest.raises(ValueError, match=r"; run the command again once no input file"):
        plan_groups(specs, 1 << 20, digest)


def test_workers_get_a_digest_only_where_they_list_the_input_themselves(tmp_path):
    """None for workers that run in the command's process or are forked from it (they read its
    listing as it is), and for a graph built without the command's listing (a job made
    offline); the command's digest for any other."""
    from pipeline.files.listing import listing_for_workers, workers_share_listing

    (tmp_path / "a.txt").write_text("A line.\n")
    specs = [InputSpec("text", str(tmp_path))]
    assert listing_for_workers(specs) is None  # no listing made: nothing to check against
    with one_listing():
        listed(specs[0])
        assert listing_for_workers(specs) == listing_digest(specs)
        with workers_share_listing(True):
            assert listing_for_workers(specs) is None
        assert listing_for_workers(specs) == listing_digest(specs)


# A name holding glob characters or a comma, given as it is written: read as that path only
# where the pattern (or the comma-split value) would match nothing, so no pattern changes.


@pytest.fixture
def odd_names(tmp_path):
    for name in ("Moby [1851].txt", "Moby 1.txt", "a,b.txt", "Vol [2]/x.txt", "Vol 2/y.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    return tmp_path


def rels(pattern: str) -> list[tuple[str, str]]:
    return [(os.path.basename(path), rel) for _, path, rel, _ in listed(InputSpec("text", pattern))]


def test_a_glob_that_matches_nothing_but_names_a_file_reads_that_file(odd_names):
    os.remove(odd_names / "Moby 1.txt")
    shutil.rmtree(odd_names / "Vol 2")
    assert rels(f"{odd_names}/Moby [1851].txt") == [("Moby [1851].txt", "Moby [1851].txt")]
    # the id "?" in its place gives it, as the file would have under a plain name
    assert rels(f"{odd_names}/Moby ?1851?.txt") == [("Moby [1851].txt", "Moby [1851].txt")]
    assert rels(f"{odd_names}/Vol [2]") == [("x.txt", "x.txt")]
    assert rels(f"{odd_names}/Vol [2]/") == [("x.txt", "x.txt")]


def test_a_glob_that_matches_files_keeps_matching_them(odd_names):
    assert rels(f"{odd_names}/Moby [1851].txt") == [("Moby 1.txt", "Moby 1.txt")]
    assert rels(f"{odd_names}/Vol [2]/*") == [("y.txt", "Vol 2/y.txt")]
    assert rels(f"{odd_names}/Nothing [1].txt") == []


def test_a_value_with_a_comma_is_one_path_only_where_its_parts_match_nothing(
    odd_names, monkeypatch
):
    from pipeline.shell.configs import parse_inputs

    monkeypatch.chdir(odd_names)
    assert parse_inputs(["a,b.txt"], "books") == (InputSpec("books", "a,b.txt"),)
    assert parse_inputs(["text:a,b.txt"], "books") == (InputSpec("text", "a,b.txt"),)
    (odd_names / "a").write_text("a")
    (odd_names / "b.txt").write_text("b")  # both parts name files: split, as before
    assert parse_inputs(["a,b.txt"], "books") == (
        InputSpec("books", "a"),
        InputSpec("books", "b.txt"),
    )


HIDDEN_TREE = ("a.txt", "sub/b.txt", ".DS_Store", ".git/HEAD", "sub/.c.txt", ".notes/d.txt")
LEFT_OUT = [".DS_Store", ".broken", ".git/HEAD", ".notes/d.txt", "sub/.c.txt"]


def hidden_tree(root) -> str:
    """A corpus folder with files and folders whose names begin with '.' among its own."""
    for name in HIDDEN_TREE:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"The file {name} has a sentence.\n")
    os.symlink(root / "missing", root / ".broken")  # a hidden dangling link: left out too
    return str(root)


@pytest.mark.parametrize(
    "rel, read, left_out",
    [
        ("", ["a.txt", "sub/b.txt"], LEFT_OUT),
        ("/**", ["a.txt", "sub/b.txt"], LEFT_OUT),
        ("/sub", ["b.txt"], [".c.txt"]),
        ("/.notes", ["d.txt"], []),  # the folder named: what is below it is read
        ("/.notes/*", ["d.txt"], []),
        ("/.*", [".DS_Store"], []),  # the dot spelt: read (the link is refused, as any)
        ("/sub/.c.txt", [".c.txt"], []),  # one file named
    ],
)
def test_hidden_names_are_left_out_unless_the_pattern_spells_the_dot(tmp_path, rel, read, left_out):
    """Names that begin with '.' below an input (`.git/`, `.DS_Store`) are left out, as
    Hadoop's and `datasets`' listings and a shell's glob leave them; a pattern that spells the
    dot, or names the folder or file, reads them. The names left out are kept for a note."""
    from pipeline.files.listing import HIDDEN, hidden_note

    root = hidden_tree(tmp_path / "in")
    spec = InputSpec("text", root + rel)
    if rel == "/.*":
        with pytest.raises(BadInputError, match="symbolic link to"):
            listed(spec)
        os.remove(f"{root}/.broken")
    assert [r for *_, r, _ in listed(spec)] == read
    assert HIDDEN[spec] == left_out
    said = hidden_note(spec)
    assert (said is None) == (not left_out)
    if left_out:
        assert said.startswith(f"note: {root + rel}: {len(left_out)} file(s) left out, whose")
        assert f"({', '.join(left_out[:3])}, ...)" in said or len(left_out) <= 3


def test_a_build_of_a_folder_with_hidden_files_reads_the_rest_and_says_so(tmp_path, capsys):
    """The build reads its files, with a note, where `.DS_Store` stopped it as a binary file
    and `.git`'s text files became documents."""
    from tests.helpers import build_shards

    root = hidden_tree(tmp_path / "in")
    (tmp_path / "in" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1\x00\x00")
    out = str(tmp_path / "out")
    assert build_shards(out, "--vocab-size", "200", inputs=f"text:{root}") == 0
    said = capsys.readouterr().out
    assert f"note: {root}: 5 file(s) left out, whose names begin with '.' (.DS_Store," in said
    for name in ("a.txt", "sub/b.txt"):
        os.remove(f"{root}/{name}")
    with pytest.raises(SystemExit) as e:  # all it holds hidden: said so
        build_shards(str(tmp_path / "none"), "--vocab-size", "200", inputs=f"text:{root}")
    assert str(e.value.code).startswith(
        f"error: no input files match '{root}' (format text): 5 file(s) left out, whose names"
    )
    assert json.load(open(f"{out}/manifest.json"))["counts"]["total"]["files_read"] == 2
