"""A build never replaces what it did not write, and one build at a time per OUT."""

from __future__ import annotations

import os

import pytest

from pipeline.shell.cli import main
from pipeline.shell.outdir import OutputLock
from tests.helpers import build_shards

TEXT = "text:" + os.path.join(os.path.dirname(__file__), "..", "..", "sample", "text")


def someone_elses(out) -> dict[str, bytes]:
    (out / "shards").mkdir(parents=True)
    files = {
        "manifest.json": b'{"model": "mine"}',
        "vocab.txt": b"[PAD]\nmine\n",
        "shards/train-final-model.arrow": b"weights",
    }
    for rel, data in files.items():
        (out / rel).write_bytes(data)
    return files


def build_error(out, *extra) -> str:
    with pytest.raises(SystemExit) as e:
        main(["build", "--input", TEXT, "--out", str(out), "--workers", "1", *extra])
    return str(e.value.code)


def test_a_directory_of_someone_elses_files_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "out"
    files = someone_elses(out)
    message = build_error(out)
    assert "holds files this build did not write" in message
    assert (
        "shards/train-final-model.arrow" in message
        and "--overwrite (make: ARGS=--overwrite)" in message
    )
    for rel, data in files.items():
        assert (out / rel).read_bytes() == data


def test_overwrite_replaces_them(tmp_path):
    out = tmp_path / "out"
    someone_elses(out)
    assert build_shards(str(out), "--num-shards", "1", "--overwrite", inputs=TEXT) == 0
    assert b"schema_name" in (out / "manifest.json").read_bytes()


def test_a_shard_set_of_ours_is_rebuilt_without_overwrite(copy_shards):
    from schemas.reader import ShardSet

    out = copy_shards()
    assert len(ShardSet.open(out)) == 4  # the sample's, from books and text
    assert build_shards(out, "--num-shards", "1", inputs=TEXT) == 0
    rebuilt = ShardSet.open(out)
    assert len(rebuilt) == 1 and rebuilt.config["inputs"] == ["text"]
    assert sorted(os.listdir(f"{out}/shards")) == ["train-00000-of-00001.arrow"]  # none left


def test_a_file_as_out_is_refused_before_work(tmp_path):
    out = tmp_path / "file"
    out.write_text("mine")
    assert "is not a directory" in build_error(out)
    assert out.read_text() == "mine"


def test_an_unwritable_out_is_refused_before_work(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    assert "not writable" in build_error(out)


def test_a_second_build_into_the_same_out_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with OutputLock(str(out)):
        message = build_error(out)
    assert f"build pid {os.getpid()}" in message and "is building into it now" in message
    assert not (out / "manifest.json").exists()


def test_a_build_is_refused_when_the_disk_lacks_its_estimate(tmp_path, monkeypatch):
    import shutil as shutil_module
    from collections import namedtuple

    import pipeline.shell.outdir as outdir

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda _: usage(10**9, 10**9 - 1000, 1000))
    message = build_error(tmp_path / "out")
    assert "needs about" in message and "kB of free disk" in message  # the unit that fits
    assert (
        "--no-disk-check (make: ARGS=--no-disk-check)" in message
        and not (tmp_path / "out" / "shards").exists()
    )
    expected = outdir.DISK_PER_TEXT_BYTE * sum(
        f.stat().st_size for f in (tmp_path / ".." / TEXT[5:]).resolve().glob("*") if f.is_file()
    )
    assert f"needs about {outdir.disk_figure(expected)} of free disk" in message
    assert "its filesystem has 1.0 kB;" in message


def test_the_disk_estimate_counts_compressed_input_as_more_text():
    from pipeline.shell.outdir import COMPRESSED_TEXT, text_bytes

    assert text_bytes([("a.txt", 10), ("b.xml.bz2", 10)]) == 10 + 10 * COMPRESSED_TEXT
