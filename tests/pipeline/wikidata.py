"""Wikipedia exports for tests: small ones written here (`page_xml`, `export`), and real ones,
those gensim 4.4.0 ships in its wheel's test data; and where `make corpora` puts the kernel's
Chinese documentation, real Chinese prose (`ZH_DOCS`).

Looked up, in order: `data/gensim/` (filled by `bench/fetch_corpora.sh`), the wheel in
`data/wheels/`, then a `pip download` of the wheel into `data/wheels/`. The tests that need them
are skipped, saying why, only when none of these works (no network and nothing fetched).
"""

from __future__ import annotations

import bz2
import os
import re
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "gensim"
WHEELS = ROOT / "data" / "wheels"
PREFIX = "gensim/test/test_data/"
TABLE_MARKUP = "enwiki-table-markup.xml.bz2"
ARTICLES = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BULGARIAN = "bgwiki-latest-pages-articles-shortened.xml.bz2"  # UTF-16, a real oddity
ZH_DOCS = (
    ROOT / "data/debian/linux-doc/usr/share/doc/linux-doc-6.1/Documentation/translations/zh_CN"
)
MARKUP_RESIDUE = ("[[", "]]", "{{", "}}", "'''", "<ref", "|}", "thumb|", "&amp;")


@cache
def _wheel() -> Path | None:
    found = sorted(WHEELS.glob("gensim-4.4.0-*.whl"))
    if found:
        return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "gensim==4.4.0", "--no-deps"]
    cmd += ["--only-binary=:all:", "-d", str(WHEELS), "-q"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    except (subprocess.SubprocessError, OSError):
        return None
    found = sorted(WHEELS.glob("gensim-4.4.0-*.whl"))
    return found[0] if found else None


def gensim_file(name: str) -> bytes:
    """The compressed bytes of one gensim test-data file, or skip the calling test."""
    local = DATA / name
    if local.is_file():
        return local.read_bytes()
    wheel = _wheel()
    if wheel is None:
        pytest.skip(
            f"{name}: not in {DATA} and `pip download gensim==4.4.0` failed (offline?); "
            "run bench/fetch_corpora.sh once with network access"
        )
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(PREFIX + name)


@cache
def gensim_xml(name: str) -> bytes:
    """The decompressed export."""
    return bz2.decompress(gensim_file(name))


def multistream(xml: bytes, pages_per_stream: int) -> tuple[bytes, bytes]:
    """(dump, index) laid out as Wikimedia's `-multistream` dumps: the header in a bz2 stream of
    its own, then `pages_per_stream` pages per stream, then the closing tag; the index lines
    are `offset:page_id:title`."""
    first = xml.index(b"<page>")
    first = xml.rindex(b"\n", 0, first) + 1
    last = xml.rindex(b"</page>") + len(b"</page>\n")
    pages = re.findall(rb"[ \t]*<page>.*?</page>\n", xml[first:last], re.S)
    assert b"".join(pages) == xml[first:last], "pages are not contiguous"
    dump, index = [bz2.compress(xml[:first])], []
    offset = len(dump[0])
    for i in range(0, len(pages), pages_per_stream):
        group = pages[i : i + pages_per_stream]
        for page in group:
            page_id = re.search(rb"<id>(\d+)</id>", page).group(1).decode()
            title = re.search(rb"<title>(.*?)</title>", page).group(1).decode()
            index.append(f"{offset}:{page_id}:{title}\n")
        dump.append(bz2.compress(b"".join(group)))
        offset += len(dump[-1])
    dump.append(bz2.compress(xml[last:]))
    return b"".join(dump), bz2.compress("".join(index).encode())


def write_multistream(folder, pages_per_stream: int) -> None:
    """gensim's table-markup export as an English `-multistream` dump and its index, written
    into `folder` (made), under the names Wikimedia gives them; its first stream holds a
    `<siteinfo>` naming the wiki, as a real dump's does (page ids then name it: the runners
    carry that through their chunk files)."""
    xml = gensim_xml(TABLE_MARKUP)
    opened = xml.index(b">") + 1  # <mediawiki ...>
    site = b"\n  <siteinfo>\n    <dbname>enwiki</dbname>\n  </siteinfo>"
    dump, index = multistream(xml[:opened] + site + xml[opened:], pages_per_stream)
    os.makedirs(folder, exist_ok=True)
    name = os.path.join(folder, "enwiki-20240101-pages-articles-multistream")
    with open(f"{name}.xml.bz2", "wb") as f:
        f.write(dump)
    with open(f"{name}-index.txt.bz2", "wb") as f:
        f.write(index)


def page_xml(page_id: int, title: str, text: str, ns: int = 0, redirect: bool = False) -> str:
    redirect_tag = f'<redirect title="{title} target" />' if redirect else ""
    return (
        f"  <page>\n    <title>{title}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n"
        f"    {redirect_tag}<revision><id>{page_id * 10}</id>"
        f'<text xml:space="preserve">{text}</text></revision>\n  </page>\n'
    )


HEADER = (
    '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">\n'
    "  <siteinfo><namespaces>"
    '<namespace key="0" case="first-letter" />'
    '<namespace key="6" case="first-letter">Datei</namespace>'
    '<namespace key="14" case="first-letter">Kategorie</namespace>'
    "</namespaces></siteinfo>\n"
)


def export(*pages: str, close: bool = True) -> bytes:
    return (HEADER + "".join(pages) + ("</mediawiki>\n" if close else "")).encode()
