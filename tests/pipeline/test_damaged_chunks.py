"""Every intermediate file carries checksums written with it and checked when it is read back:
a resumed build makes a damaged file again and ends with a clean build's bytes; a damage found
while a file is read stops the build naming the file, which is removed so that --resume makes it
again. A build that makes no instance publishes nothing."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from pipeline.core.instances import TokenizedDoc
from pipeline.files.chunks import (
    CHECK_KEY,
    DamagedChunkError,
    finished,
    read_documents,
    read_sentences,
    write_documents,
    write_sentences,
)
from pipeline.files.units import hash_range, read_units, write_units
from pipeline.sources.documents import Document
from tests.helpers import ROOT, SAMPLE_INPUT, build_in_a_process, build_shards, file_digests

ARGS = ("--num-shards", "4")  # the settings of `sample_shards`


class KeepBuildArea(beam.PTransform):
    """Publish's stand-in: the build runs to its shards and leaves its build area as an
    interrupted build would."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def expand(self, built):
        return built | beam.Map(lambda b: 0)


@pytest.fixture(scope="module")
def unpublished(tmp_path_factory) -> str:
    """OUT of a sample build stopped before publishing: every chunk file and shard is there."""
    out = str(tmp_path_factory.mktemp("unpublished") / "out")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pipeline.build.Publish", KeepBuildArea)
        with pytest.raises(FileNotFoundError):  # the report finds nothing published
            build_shards(out, *ARGS)
    assert glob.glob(f"{out}/shards/.building/tmp/units/*.arrow")
    return out


def overwrite_token_ids(path: str) -> None:
    """Five token ids of the largest batch replaced by others: the file stays valid Arrow."""
    mapped = pa.memory_map(path)
    base = mapped.read_buffer().address
    reader = pa.ipc.open_file(mapped)
    batch = max((reader.get_batch(i) for i in range(reader.num_record_batches)), key=len)
    values = batch.column(4).values
    at = values.buffers()[1].address - base + values.offset * values.type.byte_width
    at += len(values) // 2 * values.type.byte_width
    width = values.type.byte_width
    old = np.frombuffer(open(path, "rb").read()[at : at + 5 * width], dtype=f"<u{width}")
    del batch, values, reader, mapped
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(((old.astype(np.int64) + 7) % 1000).astype(f"<u{width}").tobytes())


def flip_bytes(path: str, n: int = 32) -> None:
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        middle = len(data) // 2
        data[middle : middle + n] = bytes(b ^ 0xFF for b in data[middle : middle + n])
        f.seek(0)
        f.write(data)


def largest(pattern: str) -> str:
    return max(glob.glob(pattern), key=os.path.getsize)


@pytest.mark.parametrize(
    ("kind", "damage"),
    [
        ("units", overwrite_token_ids),
        ("units", flip_bytes),
        ("sentences", flip_bytes),
        ("documents", flip_bytes),
    ],
    ids=["units-five-token-ids", "units-32-bytes", "sentences-32-bytes", "documents-32-bytes"],
)
def test_a_resume_remakes_a_damaged_chunk_and_equals_a_clean_build(
    unpublished, sample_shards, tmp_path, kind, damage
):
    out = str(tmp_path / "out")
    shutil.copytree(unpublished, out)
    building = f"{out}/shards/.building"
    for path in glob.glob(f"{building}/bucket-*"):  # the buckets are made again, from the units
        os.remove(path)
    if kind == "documents":  # its sentences too, so that the document file is read again
        shutil.rmtree(f"{building}/tmp/sentences")
    target = largest(f"{building}/tmp/{kind}/*.arrow")
    damage(target)
    assert build_shards(out, *ARGS, "--resume") == 0
    assert file_digests(out) == file_digests(sample_shards)


def some_units(n=400, length=50):
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 999, (n, length)).astype(np.uint16)
    return [
        (int(h), 0, TokenizedDoc(f"d{i}", ids[i], np.array([0, length]), "s"))
        for i, h in enumerate(rng.integers(0, 2**64, n, dtype=np.uint64))
    ]


def test_every_kind_of_chunk_file_checks_what_it_reads(tmp_path):
    units = write_units(str(tmp_path / "units" / "u.arrow"), some_units())
    sentences = write_sentences(str(tmp_path / "sentences" / "s.arrow"), [("a", "s", ("x.",))])
    documents = write_documents(
        str(tmp_path / "documents" / "0123-00000.arrow"), [Document("a", "s", ("x.",), False)]
    )
    assert finished(units.path) == units and finished(sentences.path) == sentences
    assert len(read_units(units, 0, 1 << 64)) == 400 and read_sentences(sentences.path)
    assert [d.id for d in read_documents(documents.path)] == ["a"]
    marker = tmp_path / "items" / "0123.json"  # the document file's read group is done
    marker.parent.mkdir()
    marker.write_text("{}")
    for chunk, read in (
        (units, lambda: read_units(units, *hash_range(0, 1))),
        (sentences, lambda: read_sentences(sentences.path)),
        (documents, lambda: list(read_documents(documents.path))),
    ):
        flip_bytes(chunk.path, 4)
        with pytest.raises(DamagedChunkError) as e:
            read()
        assert str(e.value).startswith(chunk.path) and "--resume" in str(e.value)
        assert not os.path.exists(chunk.path)  # removed: a resume makes it again
    assert not marker.exists() and not os.path.exists(units.path + ".index")


def test_a_changed_count_in_a_record_is_found(tmp_path):
    """The record a resumed build takes (counts, sizes) is checked like the rows."""
    path = str(tmp_path / "sentences" / "s.arrow")
    write_sentences(path, [("a", "s", ("x.",))], {"books/sentences": 1})
    data = open(path, "rb").read()
    assert b'"books/sentences": 1' in data  # in the schema at its head (and its footer's copy)
    open(path, "wb").write(data.replace(b'"books/sentences": 1', b'"books/sentences": 7', 1))
    assert finished(path) is None  # made again


def test_a_file_checked_another_way_is_made_again(tmp_path):
    """A chunk file of an earlier version, its check under another key (CRC-32 before the
    CRC-32C), is not taken by a resumed build, and a read of it names it as damaged."""
    path = str(tmp_path / "sentences" / "s.arrow")
    write_sentences(path, [("a", "s", ("x.",))], {"books/sentences": 1})
    assert finished(path) is not None
    data = open(path, "rb").read()
    assert CHECK_KEY == b"crc32c" and data.count(CHECK_KEY) == 2  # the head's schema, the footer's
    open(path, "wb").write(data.replace(CHECK_KEY, b"crc_32"))
    assert finished(path) is None  # made again
    open(path, "wb").write(data.replace(CHECK_KEY, b"crc_32"))
    with pytest.raises(DamagedChunkError, match="no checksum: not written by this version"):
        read_sentences(path)


def test_a_damaged_units_file_on_gcs_is_named_and_removed(gcs_emulator, gcs_bucket):
    """On gs:// a bucket reads only its slices, each checked against the CRC-32C in the index."""
    from pipeline.files.fsio import blob, exists

    path = f"gs://{gcs_bucket}/tmp/units/u.arrow"
    chunk = write_units(path, some_units(4000))
    assert finished(path) == chunk
    data = bytearray(blob(path).download_as_bytes())
    middle = len(data) // 2
    data[middle : middle + 32] = bytes(b ^ 0xFF for b in data[middle : middle + 32])
    blob(path).upload_from_string(bytes(data))
    with pytest.raises(DamagedChunkError) as e:
        for bucket in range(16):
            read_units(chunk, *hash_range(bucket, 16))
    assert str(e.value).startswith(path) and "CRC-32C" in str(e.value)
    assert not exists(path) and not exists(path + ".index")


# For `python -c`: the build's command, whose first read of a units file in any of its workers
# (the first to create MARK) finds that file's index cut to nothing, as if it had changed on disk
# after the tokenizing stage checked it whole.
CUT_AN_INDEX = """
import os, sys
import pipeline.files.units as units

real, mark = units.unit_batches, sys.argv.pop(1)

def unit_batches(chunk, first, stop):
    try:
        os.close(os.open(mark, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        open(chunk.path + units.INDEX_SUFFIX + ".cut", "wb").close()  # says which file
        open(chunk.path + units.INDEX_SUFFIX, "wb").close()
    return real(chunk, first, stop)

units.unit_batches = unit_batches
from pipeline.shell.entry import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_damage_a_forked_worker_finds_is_the_drivers_one_line(tmp_path, sample_shards):
    """With 2 local workers the damage is found in a forked worker, and the driver finds its line
    in the text Beam carries back: the command ends with that line alone, the file and its index
    are gone, and --resume makes them again (run as `bert-shards build` runs, in a fresh process
    that forks its workers)."""
    out, mark = str(tmp_path / "out"), str(tmp_path / "mark")
    cmd = [sys.executable, "-c", CUT_AN_INDEX, mark, "build", "--input", SAMPLE_INPUT]
    cmd += ["--out", out, *ARGS, "--workers", "2", "--progress-seconds", "0"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    # the worker that found the damage, or the other, which found the file gone, is reported
    path = glob.glob(f"{out}/shards/.building/tmp/units/*.arrow.index.cut")[0][: -len(".index.cut")]
    found = ("its index is too short", "it or its index is missing")
    assert done.stderr in {
        f"error: {path}: this intermediate file of the build is damaged ({what}); it was "
        "removed: run the same command with --resume to make it again\n"
        for what in found
    }
    assert not os.path.exists(path) and not os.path.exists(path + ".index")
    build_in_a_process(out, *ARGS, "--resume")
    assert file_digests(out) == file_digests(sample_shards)


def test_whitespace_only_input_publishes_nothing(tmp_path, capsys):
    books = tmp_path / "books"
    books.mkdir()
    (books / "blank.txt").write_text(" \n\n\t \n   \n")
    out = tmp_path / "out"
    assert build_shards(str(out), inputs=f"books:{books}") == 1
    captured = capsys.readouterr()
    assert "no instances were made" in captured.err and "documents_read" in captured.out
    assert "wrote 0 shard(s)" not in captured.out
    assert not (out / "manifest.json").exists()
    assert not (out / "vocab.txt").exists()


@pytest.mark.parametrize("gone", ["", ".index"])
def test_a_units_object_missing_on_gcs_is_named(gcs_emulator, gcs_bucket, gone):
    """Another bucket's worker may remove a damaged units file (and its index) as this one goes
    to read it: on gs:// too, the same line as for a damage, not the store's own error."""
    from pipeline.files.fsio import blob

    path = f"gs://{gcs_bucket}/tmp/units/u.arrow"
    chunk = write_units(path, some_units(400))
    blob(path + gone).delete()
    with pytest.raises(DamagedChunkError) as e:
        read_units(chunk, *hash_range(0, 1))
    assert str(e.value).startswith(path) and "it or its index is missing" in str(e.value)
