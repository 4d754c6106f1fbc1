"""Archives read as folders (`pipeline.sources.archives`, docs/inputs.md): a tar, compressed
or not, or a zip of books gives the documents of the same files in a folder, named below the
archive; hidden names, macOS's copies, links and folders are left out and counted; a damaged
archive stops the build in one line naming it (and the member), or is counted with
--skip-bad-input; an archive of Parquet is refused before any work; and an archive is read
whole, never cut into spans. A build from an archive makes the bytes of a build from a folder
that holds its files under the archive's name."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import zipfile

import pytest

from pipeline.sources.archives import archive_kind, member_name
from pipeline.sources.documents import BadInputError, Tally
from pipeline.stages.read import plan_reads, read_item
from tests.helpers import ROOT, build_shards, file_digests, refusal

SAMPLE_BOOKS = os.path.join(ROOT, "sample", "books")
TARS = {
    "tar": "w",
    "tar.gz": "w:gz",
    "tgz": "w:gz",
    "tar.bz2": "w:bz2",
    "tbz2": "w:bz2",
    "tar.xz": "w:xz",
    "txz": "w:xz",
}
# what the archives hold beside the books, and is left out: (name, bytes)
JUNK = [("books/._on-rivers.txt", b"\0\x05\x16\x07\0\x02" * 40), (".DS_Store", b"\0\0\0\1Bud1")]


def book_files() -> dict[str, bytes]:
    """The sample's books, by their names below the folder `books/`."""
    found = {}
    for folder, _, names in os.walk(SAMPLE_BOOKS):
        for name in names:
            path = os.path.join(folder, name)
            found["books/" + os.path.relpath(path, SAMPLE_BOOKS)] = open(path, "rb").read()
    return dict(sorted(found.items()))


def write_tar(path, files: dict[str, bytes], mode: str, junk=JUNK, link: bool = True) -> str:
    with tarfile.open(path, mode) as tar:
        for name, data in [*files.items(), *junk]:
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("./books/link.txt")
            info.type, info.linkname = tarfile.SYMTYPE, "essays/on-rivers.txt"
            tar.addfile(info)
        folder = tarfile.TarInfo("./books/empty")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    return str(path)


def write_zip(path, files: dict[str, bytes], junk=JUNK) -> str:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("books/", b"")
        for name, data in [*files.items(), *junk]:
            archive.writestr(name, data)
        archive.writestr("__MACOSX/books/._on-rivers.txt", b"\0\x05\x16\x07" * 30)
    return str(path)


def documents(path: str, rel: str, fmt: str = "books", skip: bool = False):
    """A file's documents as the read step reads them, and its counts."""
    tally = Tally(skip_bad_input=skip)
    return list(read_item((fmt, path, rel, None), tally, skip)), tally.counts


def folder_documents(files: dict[str, bytes], rel: str, tmp_path) -> list:
    """The documents of `files` in a folder, each read as a file named `rel/name`."""
    docs = []
    for name, data in files.items():
        (tmp_path / "plain").mkdir(exist_ok=True)
        path = tmp_path / "plain" / name.replace("/", "_")
        path.write_bytes(data)
        docs += documents(str(path), f"{rel}/{name}")[0]
    return docs


@pytest.mark.parametrize(
    "name, kind",
    [
        ("a.tar", "tar"),
        ("a.tgz", "tar"),
        ("a.TGZ", None),  # as written, as compressed files' suffixes are
        ("a.tar.zst", "tar"),
        ("a.tzst", "tar"),
        ("a.zip", "zip"),
        ("a.gz", None),
        ("a.txt", None),
        ("tar", None),
    ],
)
def test_archives_are_known_by_their_names(name, kind):
    assert archive_kind(name) == kind


@pytest.mark.parametrize(
    "name, read_as",
    [
        ("./books/a.txt", "books/a.txt"),
        ("/abs/a.txt", "abs/a.txt"),
        ("a//b.txt", "a/b.txt"),
        (".DS_Store", None),
        ("books/._a.txt", None),
        ("repo/.git/HEAD", None),
        ("../up.txt", None),
        ("__MACOSX/books/._a.txt", None),
        ("books/__MACOSX.txt", "books/__MACOSX.txt"),
        ("", None),
    ],
)
def test_member_names(name, read_as):
    assert member_name(name) == read_as


@pytest.mark.parametrize("suffix", [*TARS, "tar.zst", "zip"])
def test_an_archive_gives_the_documents_of_its_files(suffix, tmp_path):
    files = book_files()
    path = str(tmp_path / f"books1.{suffix}")
    if suffix == "zip":
        write_zip(path, files)
    elif suffix == "tar.zst":
        import zstandard

        plain = write_tar(tmp_path / "plain.tar", files, "w")
        with open(plain, "rb") as f, open(path, "wb") as out:
            zstandard.ZstdCompressor().copy_stream(f, out)
    else:
        write_tar(path, files, TARS[suffix])
    docs, counts = documents(path, f"books1.{suffix}")
    assert docs == folder_documents(files, f"books1.{suffix}", tmp_path)
    assert [d.id for d in docs] == [f"books:books1.{suffix}/{name}" for name in files]
    links = 0 if suffix == "zip" else 1
    hidden = 3 if suffix == "zip" else 2  # and macOS's copy in the zip
    assert counts["archive_members_read"] == len(files)
    assert counts["archive_members_skipped.hidden"] == hidden
    assert counts["archive_members_skipped.not_a_file"] == links


def test_compressed_members_and_other_formats_are_read_as_files(tmp_path):
    import gzip

    records = b'{"id": "1", "text": "One record. It has two sentences."}\n'
    path = write_tar(
        tmp_path / "j.tar", {"a/x.jsonl.gz": gzip.compress(records)}, "w", (), link=False
    )
    docs, _ = documents(path, "j.tar", fmt="jsonl")
    assert [(d.id, d.paragraphs) for d in docs] == [
        ("jsonl:1", ("One record. It has two sentences.",))
    ]


def test_an_archive_is_read_whole_never_in_spans(tmp_path, monkeypatch):
    """A plain tar of a Wikipedia export larger than a span is one read item, whose pages are
    the export's own (cut into spans, its bytes would be read as XML)."""
    from pipeline.sources.wikipedia import spans
    from tests.pipeline.wikidata import export, page_xml

    monkeypatch.setattr(spans, "XML_SPAN_BYTES", 1000)
    pages = [page_xml(i, f"Page {i}", f"The text of page {i}. " * 20) for i in range(1, 9)]
    xml = export(*pages)
    path = write_tar(tmp_path / "w.tar", {"dump.xml": xml}, "w", (), link=False)
    assert os.path.getsize(path) > 4000
    items = list(plan_reads(("wikipedia", path, "w.tar")))
    assert items == [("wikipedia", path, "w.tar", None)]
    assert [p.title for p in documents(path, "w.tar", fmt="wikipedia")[0]] == [
        f"Page {i}" for i in range(1, 9)
    ]
    plain = tmp_path / "dump.xml"
    plain.write_bytes(xml)
    assert len(list(plan_reads(("wikipedia", str(plain), "dump.xml")))) > 1


def truncated(path: str, keep: float) -> str:
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: int(len(data) * keep)])
    return path


@pytest.mark.parametrize("suffix", ["tar", "tar.gz", "zip"])
def test_a_damaged_archive_stops_naming_it_or_is_counted(suffix, tmp_path):
    files = book_files()
    path = str(tmp_path / f"b.{suffix}")
    if suffix == "zip":
        write_zip(path, files)
    else:
        write_tar(path, files, TARS[suffix], (), link=False)
    truncated(path, 0.6)
    with pytest.raises(BadInputError) as stop:
        documents(path, f"b.{suffix}")
    said = str(stop.value)
    assert f"b.{suffix}" in said.split(": ", 1)[0] and "\n" not in said
    assert "--skip-bad-input" in said
    if suffix == "tar":  # the member whose data was cut is named
        assert said.startswith("b.tar/books/"), said
    docs, counts = documents(path, f"b.{suffix}", skip=True)
    assert counts["files_dropped.unreadable"] == 1
    assert len(docs) < len(files)


def test_an_archive_of_parquet_is_refused_before_any_work(tmp_path, capsys):
    path = write_tar(tmp_path / "p.tar", {"p.parquet": b"PAR1"}, "w", (), link=False)
    said = refusal(capsys, "--input", f"parquet:{path}", "--out", str(tmp_path / "out"))
    assert "p.tar: an archive of parquet files is not read" in said
    assert not (tmp_path / "out").exists()


def test_the_first_member_is_checked_as_the_inputs_first_file(tmp_path, capsys):
    record = b'{"id": "1", "text": "A record."}\n' * 30
    path = write_tar(tmp_path / "j.tgz", {"d/a.jsonl": record}, "w:gz", JUNK, link=False)
    said = refusal(capsys, "--input", f"books:{path}", "--out", str(tmp_path / "out"))
    assert said.startswith("error: j.tgz/d/a.jsonl: JSON Lines, a record per line"), said


def test_a_build_of_an_archive_is_the_build_of_its_folder(tmp_path):
    """The archive's members are named as the files of a folder of the archive's name."""
    files = book_files()
    archived, unpacked = tmp_path / "archived", tmp_path / "unpacked" / "books1.tar.gz"
    archived.mkdir()
    write_tar(archived / "books1.tar.gz", files, "w:gz")
    for name, data in files.items():
        (unpacked / name).parent.mkdir(parents=True, exist_ok=True)
        (unpacked / name).write_bytes(data)
    outs = []
    for folder in (archived, unpacked.parent):
        outs.append(str(tmp_path / f"out-{folder.name}"))
        flags = ("--workers", "1", "--vocab-size", "500")
        assert build_shards(outs[-1], *flags, inputs=f"books:{folder}") == 0
    assert file_digests(outs[0]) == file_digests(outs[1])
    shutil.rmtree(tmp_path / "unpacked")


def test_archives_on_gcs_read_as_on_a_local_disk(gcs_emulator, gcs_bucket, tmp_path):
    """A tar read as a stream of ranged requests, a zip by seeking to its directory."""
    from schemas import storage

    files = book_files()
    for name, write in (("b.tar.gz", lambda p: write_tar(p, files, "w:gz")), ("b.zip", None)):
        path = write(tmp_path / name) if write else write_zip(tmp_path / name, files)
        storage.upload(path, f"gs://{gcs_bucket}/in/{name}")
        remote = documents(f"gs://{gcs_bucket}/in/{name}", name)
        assert remote == documents(path, name)
        assert len(remote[0]) == len(files)


@pytest.mark.parametrize("kind", ["tar", "gzipped tar", "zip"])
def test_an_archive_without_its_extension_is_named_as_one(kind, tmp_path, capsys):
    """Read as a file, an archive is refused naming its kind and the extension to give it."""
    path = str(tmp_path / "corpus.bin")
    if kind == "zip":
        write_zip(path, book_files(), ())
    else:
        write_tar(path, book_files(), "w:gz" if kind == "gzipped tar" else "w", (), link=False)
        if kind == "gzipped tar":
            os.rename(path, path := str(tmp_path / "corpus.gz"))
    said = refusal(capsys, "--input", f"books:{path}", "--out", str(tmp_path / "out"))
    name = os.path.basename(path)
    if kind == "zip":
        assert said.startswith(f"error: {name}: a zip archive, not text"), said
        assert "name it .zip, or extract it" in said
    else:
        assert said.startswith(f"error: {name}: a tar archive, not text"), said
        assert "name it .tar (.tar.gz if it came gzipped" in said


def test_a_tar_keeps_no_member_it_has_read(tmp_path, monkeypatch):
    """Memory flat in the archive's size: tarfile would keep every member's header met."""
    real, kept = tarfile.TarFile.next, []

    def next_header(self):
        kept.append(len(self.members))
        return real(self)

    monkeypatch.setattr(tarfile.TarFile, "next", next_header)
    files = {f"d/{i}.txt": f"Sentence {i}.\n".encode() for i in range(300)}
    path = write_tar(tmp_path / "many.tar.gz", files, "w:gz", (), link=False)
    docs, counts = documents(path, "many.tar.gz", fmt="text")
    assert len(docs) == 300 == counts["archive_members_read"]
    assert len(kept) > 300 and max(kept) <= 1


def test_a_members_name_that_is_not_utf8_is_read_escaped(tmp_path):
    """A member is no file on disk to open by name: its Latin-1 bytes are written escaped in
    its id, two such names staying two (a folder's file so named is refused, as
    test_input_refusals.py shows). The names' bytes are \\xe9 and \\xe8, held as surrogates."""
    files = {f"b/caf{chr(0xDC00 + byte)}.txt": b"A sentence.\n" for byte in (0xE9, 0xE8)}
    path = write_tar(tmp_path / "l.tar", files, "w", (), link=False)
    docs, _ = documents(path, "l.tar")
    assert [d.id for d in docs] == ["books:l.tar/b/caf\\xe9.txt", "books:l.tar/b/caf\\xe8.txt"]


def test_a_zip_member_zipfile_cannot_open_is_named_and_a_link_left_out(tmp_path):
    """A method zipfile lacks (here zstd's number, 93, written into a stored member's headers)
    stops the build naming the member and what to do; a link, as Unix's zip stores one, is
    left out and counted."""
    import stat

    path = tmp_path / "z.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.txt", b"A sentence one.\n")
        link = zipfile.ZipInfo("l.txt")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, b"a.txt")
        archive.writestr("b.txt", b"A sentence two.\n")
    docs, counts = documents(str(path), "z.zip")
    assert [d.id for d in docs] == ["books:z.zip/a.txt", "books:z.zip/b.txt"]
    assert counts["archive_members_skipped.not_a_file"] == 1
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04", data.index(b"l.txt") + 5)  # b.txt's local header
    central = data.rindex(b"PK\x01\x02")  # b.txt's entry in the directory
    data[local + 8 : local + 10] = data[central + 10 : central + 12] = (93).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(BadInputError) as stop:
        documents(str(path), "z.zip")
    assert str(stop.value).startswith("z.zip/b.txt: cannot be read from the zip (")
    assert "extract the archive with a tool that can" in str(stop.value)
    docs, counts = documents(str(path), "z.zip", skip=True)
    assert len(docs) == 1 and counts["files_dropped.unreadable"] == 1
