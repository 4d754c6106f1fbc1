"""`wikiextractor:` input, Wikipedia as WikiExtractor writes it (`text/AA/wiki_00`, ...):
WikiExtractor's own output of a real export (the `wikiextractor` package, run as its command)
read and built, compressed as its `--compress` writes it and plain; real articles rendered by
the `wikipedia` format and written in WikiExtractor's layout read back as the same paragraphs
under the same page ids; the layout's variants; its damage stops the run naming the file and
line, or is skipped and counted; such a file given as another format (and another format's
file given as it) is refused before any work; its `--json` output reads as its blocks do."""

from __future__ import annotations

import bz2
import glob
import html
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from pipeline.core.buckets import RepeatedIdError
from pipeline.shell.cli import main
from pipeline.sources.documents import BadInputError, Tally
from pipeline.sources.head import check_head
from pipeline.sources.wikiextractor import read_wikiextractor
from pipeline.sources.wikipedia.pages import iter_pages
from pipeline.sources.wikipedia.reader import page_document
from schemas.reader import ShardSet
from tests.pipeline.wikidata import ARTICLES, export, gensim_file, gensim_xml, page_xml


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("dump") / ARTICLES
    path.write_bytes(gensim_file(ARTICLES))
    return str(path)


@pytest.fixture(scope="module")
def compressed(dump, tmp_path_factory) -> str:
    """Its `--compress` output of the export in files of 200 KB (read-only: copy to change)."""
    out = str(tmp_path_factory.mktemp("extracted") / "text")
    return wikiextractor(dump, out, "--compress", "--bytes", "200K")


def wikiextractor(dump: str, out: str, *flags: str) -> str:
    """WikiExtractor's output of `dump` in `out` (`AA/wiki_00`, ...), from its own command."""
    cmd = [sys.executable, "-m", "wikiextractor.WikiExtractor", dump, "-o", out, "-q"]
    subprocess.run([*cmd, "--processes", "1", *flags], check=True, capture_output=True)
    return out


def block(ident: int, title: str, paragraphs: list[str]) -> str:
    """One article as WikiExtractor 3 writes it: escaped text (`--html-safe`, its default), the
    title unescaped in the tag and again as the first line, a blank line, a paragraph a line."""
    url = f"https://en.wikipedia.org/wiki?curid={ident}"
    body = "".join(html.escape(p, quote=False) + "\n" for p in paragraphs)
    return f'<doc id="{ident}" url="{url}" title="{title}">\n{title}\n\n{body}\n</doc>\n'


def read(data: str | bytes, name: str = "AA/wiki_00", skip: bool = False):
    raw = data.encode() if isinstance(data, str) else data
    tally = Tally(skip_bad_input=skip)
    docs = list(read_wikiextractor(io.BytesIO(raw), name, tally))
    return [(d.id, d.paragraphs) for d in docs], tally.counts


def real_articles() -> list[tuple[str, str, tuple[str, ...]]]:
    """(page id, title, paragraphs) of the real export's articles, as the `wikipedia` format
    renders them."""
    articles = []
    for page in iter_pages(io.BytesIO(gensim_xml(ARTICLES)), ARTICLES, Tally()):
        doc = page_document(page, Tally())
        if doc is not None:
            articles.append((page.page_id, page.title, doc.paragraphs))
    return articles


def test_real_articles_in_wikiextractors_layout_read_as_the_wikipedia_formats() -> None:
    articles = real_articles()
    assert len(articles) > 50
    text = "".join(block(int(i), title, list(ps)) for i, title, ps in articles)
    assert "&amp;" in text and "&lt;" in text  # the escaping is undone, not read as prose
    docs, counts = read(text)
    assert docs == [(f"wikiextractor:en.wikipedia.org:{i}", ps) for i, _, ps in articles]
    assert not counts


def test_the_layouts_variants() -> None:
    text = (
        '<doc id="6" url="u" title=""Weird Al" Yankovic">\n"Weird Al" Yankovic\n\n'
        "He sings.\n\n\nHe plays the accordion.\n</doc>\n"
        # WikiExtractor 2.x: no blank line after the title, a revid before the url
        '<doc id="7" revid="99" url="u" title="AT&T">\nAT&T\nA company &amp; more.\n</doc>\n'
        # a first line that is not the title is text; an article of its title alone is dropped
        '<doc id="8" url="u" title="Stub">\nStub\n\n</doc>\n'
        '<doc id="9" url="u" title="Alpha">\nBeta is not the title.\n</doc>\n'
        # a fork that writes the title on the tag's line; Windows line ends
        '<doc id="10" url="u" title="Same line">Same line\r\nText here.\r\n</doc>\r\n'
    )
    docs, counts = read(text)
    assert docs == [
        ("wikiextractor:6", ("He sings.", "He plays the accordion.")),
        ("wikiextractor:7", ("A company & more.",)),
        ("wikiextractor:9", ("Beta is not the title.",)),
        ("wikiextractor:10", ("Text here.",)),
    ]
    assert counts == {"documents_read": 1, "documents_dropped.wikiextractor_no_text": 1}


GOOD = block(1, "Good", ["A good article."])
GOOD_RECORD = json.dumps(  # the same article as its --json output writes it
    {"id": "1", "url": "https://en.wikipedia.org/wiki?curid=1", "title": "Good"}
    | {"text": "A good article."}
).encode()


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        (GOOD + '<doc id="2" url="u" title="Cut">\nCut\n\nThe file ends', 7, "ends first"),
        ('<doc id="2" url="u" title="A">\nA\n' + GOOD, 1, "line 3 opens another"),
        ('<doc url="u" title="No id">\nNo id\nText.\n</doc>\n' + GOOD, 1, 'without an id="..."'),
        # a run of such lines is one bad record
        ("Some prose before.\nAnd more.\n\n" + GOOD, 1, "text outside any <doc ...> block"),
    ],
    ids=["cut-short", "unclosed", "no-id", "outside"],
)
def test_damage_stops_the_run_naming_the_line_or_is_skipped_and_counted(text, line, what):
    with pytest.raises(BadInputError, match=rf"^AA/wiki_00:{line}: .*{what}"):
        read(text)
    docs, counts = read(text, skip=True)
    assert ("wikiextractor:en.wikipedia.org:1", ("A good article.",)) in docs
    assert counts["documents_dropped.wikiextractor_bad_record"] == 1


def test_an_article_over_the_bound_is_dropped_unheld(monkeypatch) -> None:
    import pipeline.sources.wikiextractor as module

    monkeypatch.setattr(module, "MAX_DOCUMENT_CHARS", 40)
    long = block(2, "Long", ["A paragraph of some length.", "And another of some length."])
    docs, counts = read(long + GOOD)
    assert docs == [("wikiextractor:en.wikipedia.org:1", ("A good article.",))]
    assert counts == {"documents_read": 1, "documents_dropped.wikiextractor_too_long": 1}


def check(fmt: str, tmp_path, data: bytes, name: str = "wiki_00") -> None:
    path = tmp_path / name
    path.write_bytes(data)
    check_head(fmt, str(path), name, lambda p: open(p, "rb"))


@pytest.mark.parametrize("fmt", ["text", "books", "wikipedia"])
def test_its_files_given_as_another_format_are_refused_before_any_work(fmt, tmp_path) -> None:
    with pytest.raises(BadInputError, match="^wiki_00: WikiExtractor's output.*--format wikiext"):
        check(fmt, tmp_path, GOOD.encode())


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b'{"id": "1", "url": "u", "title": "A", "text": "A text."}\n', "JSON Lines.*jsonl"),
        (export(page_xml(1, "A", "An article here.")), "MediaWiki XML export.*wikipedia"),
        (b"Just prose, one sentence per line.\n", "not WikiExtractor's output"),
    ],
    ids=["its-json-output", "a-dump", "prose"],
)
def test_other_files_given_as_wikiextractor_are_refused_saying_what_they_are(data, said, tmp_path):
    with pytest.raises(BadInputError, match=f"^wiki_00: .*{said}"):
        check("wikiextractor", tmp_path, data)
    check("wikiextractor", tmp_path, GOOD.encode())  # and its own files pass


def test_one_article_in_two_files_is_refused_as_a_repeat() -> None:
    message = str(RepeatedIdError.of("wikiextractor:12", equal=False))
    assert "one article in two files of WikiExtractor's output" in message


@pytest.mark.slow
def test_wikiextractors_own_output_is_read_and_built(compressed, tmp_path) -> None:
    """Its `--compress` output in files of 200 KB, one file decompressed as a user might: every
    block an article of the export under its page id, its title line gone, its escaping undone."""
    folder = shutil.copytree(compressed, tmp_path / "text")
    files = sorted(glob.glob(f"{folder}/*/wiki_*.bz2"))
    assert len(files) > 2
    with open(files[0][: -len(".bz2")], "wb") as f:
        f.write(bz2.decompress(open(files[0], "rb").read()))
    os.remove(files[0])
    blocks = sum(bz2.decompress(open(p, "rb").read()).count(b"<doc ") for p in files[1:])
    blocks += open(files[0][: -len(".bz2")], "rb").read().count(b"<doc ")
    titles = {int(i): t for i, t, _ in real_articles()}
    docs, counts = [], Tally()
    for path in sorted(glob.glob(f"{folder}/*/wiki_*")):
        with open(path, "rb") as raw:
            f = bz2.BZ2File(raw) if path.endswith(".bz2") else raw
            docs += list(read_wikiextractor(f, os.path.relpath(path, folder), counts))
    assert len(docs) > 50
    assert counts.counts == {"documents_read": 1, "documents_dropped.wikiextractor_no_text": 1}
    assert len(docs) + 1 == blocks  # one article of its title alone
    for doc in docs:
        page = int(doc.id.removeprefix("wikiextractor:en.wikipedia.org:"))
        assert page in titles and doc.paragraphs[0] != titles[page]
        assert not any(s in p for p in doc.paragraphs for s in ("&amp;", "&lt;", "<doc", "</doc"))
    out = str(tmp_path / "out")
    argv = ["build", "--input", f"wikiextractor:{folder}", "--out", out, "--workers", "1"]
    assert main([*argv, "--vocab-size", "500"]) == 0
    built = ShardSet.open(out).manifest.counts["by_source"]["wikiextractor"]
    assert built["documents_used"] == len(docs)
    assert built["documents_read"] == blocks


def test_its_json_output_reads_as_its_blocks_and_as_jsonl_is_noted(dump, tmp_path) -> None:
    """Its --json output (a record per article, the text HTML-escaped as in its blocks) read as
    `wikiextractor`: the documents of its block output, ids, escaping undone and paragraphs
    alike. Given as `jsonl` (which reads it, `&amp;` and all, under ids naming no wiki), the
    first-file check says so, naming the format."""
    folders = [
        wikiextractor(dump, str(tmp_path / k), *f) for k, f in (("b", ()), ("j", ["--json"]))
    ]
    blocks, records = ([], Tally()), ([], Tally())
    for folder, (docs, tally) in zip(folders, (blocks, records), strict=True):
        for path in sorted(glob.glob(f"{folder}/*/wiki_*")):
            with open(path, "rb") as f:
                docs += [(d.id, d.paragraphs) for d in read_wikiextractor(f, path, tally)]
    assert blocks[0] == records[0] and len(records[0]) > 50
    assert blocks[1].counts == records[1].counts
    first = sorted(glob.glob(f"{folders[1]}/*/wiki_*"))[0]
    assert "&amp;" in open(first).read() or "&lt;" in open(first).read()
    assert check_head("wikiextractor", first, "AA/wiki_00", lambda p: open(p, "rb")) is None
    note = check_head("jsonl", first, "AA/wiki_00", lambda p: open(p, "rb"))
    assert note.startswith("note: AA/wiki_00 is WikiExtractor's --json output, whose text keeps")
    assert "--format wikiextractor (make: FORMAT=wikiextractor) reads it undone" in note
    bad = b'{"id": "1", "url": "https://en.wikipedia.org/wiki?curid=1", "title": "A"}\n'
    with pytest.raises(BadInputError, match="^f:2: not a record of its --json output"):
        read(b'{"id": "2", "url": "u", "title": "B", "text": "B."}\n' + bad, "f")
    docs, counts = read(bad + b"\n" + GOOD_RECORD, "f", skip=True)
    assert docs == [("wikiextractor:en.wikipedia.org:1", ("A good article.",))]
    assert counts["documents_dropped.wikiextractor_bad_record"] == 1


def test_its_files_on_gcs_read_as_the_local_bytes(compressed, gcs_emulator, gcs_bucket):
    """A `--compress` file through Beam's GCS filesystem: the first-file check and the reader."""
    from pipeline.files import fsio
    from pipeline.sources.readers import read_input

    path = sorted(glob.glob(f"{compressed}/*/wiki_*.bz2"))[0]
    url = f"gs://{gcs_bucket}/text/AA/wiki_00.bz2"
    with open(path, "rb") as f:
        fsio.write_bytes(url, f.read())
    check_head("wikiextractor", url, "AA/wiki_00.bz2", fsio.open_read)
    item = ("wikiextractor", url, "AA/wiki_00.bz2", None)
    remote = [(d.id, d.paragraphs) for d in read_input(item, Tally(), fsio.open_read)]
    with open(path, "rb") as f:
        assert remote == read(bz2.decompress(f.read()), "AA/wiki_00.bz2")[0]
    assert len(remote) > 1
