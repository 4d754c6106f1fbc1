"""The export's contract beyond the rows: same set, same bytes; the summary describes the files
on disk; refusals come before anything is written; `--overwrite` replaces only what an export
writes; the commands (`bert-schemas export`, `bert-shards export`, `make export-shards`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from schemas.export.run import ExportError, ExportOptions, export
from tests.helpers import read_only_folder, tmpfs

FORMATS = ("hdf5", "tfrecord", "mds")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def files_of(dest: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(dest)):
        with open(os.path.join(dest, name), "rb") as f:
            out[name] = f.read()
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_set_same_bytes_and_the_summary_lists_them(synthetic_shards, tmp_path, fmt):
    a, b = str(tmp_path / "a"), str(tmp_path / "nested" / "b")
    export(synthetic_shards, a, ExportOptions(fmt, mds_size_limit=300_000))
    export(synthetic_shards, b, ExportOptions(fmt, mds_size_limit=300_000))
    first, second = files_of(a), files_of(b)
    assert first == second
    summary = json.loads(first["export.json"])
    listed = [*summary["files"], summary["vocab"]]
    listed += [summary["index"]] if summary["index"] else []
    assert sorted(e["path"] for e in listed) == sorted(set(first) - {"export.json"})
    for e in listed:
        assert e["bytes"] == len(first[e["path"]])
        assert e["sha256"] == hashlib.sha256(first[e["path"]]).hexdigest()
    with open(os.path.join(synthetic_shards, "manifest.json")) as f:
        rows = sum(s["rows"] for s in json.load(f)["shards"])
    assert summary["rows"] == rows == sum(e["rows"] for e in summary["files"])
    assert first["vocab.txt"] == open(os.path.join(synthetic_shards, "vocab.txt"), "rb").read()


def test_a_set_that_fails_validation_is_refused_and_nothing_is_written(synthetic_shards, tmp_path):
    out = str(tmp_path / "set")
    shutil.copytree(synthetic_shards, out)
    shard = os.path.join(out, "shards", sorted(os.listdir(os.path.join(out, "shards")))[1])
    with open(shard, "r+b") as f:  # one byte of a shard: its sha256 no longer the manifest's
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    dest = str(tmp_path / "dest")
    with pytest.raises(ExportError, match="fails validation"):
        export(out, dest, ExportOptions("tfrecord"))
    assert not os.path.exists(dest)


def test_refusals_before_any_work(synthetic_shards, tmp_path):
    with pytest.raises(ExportError, match="not one of"):
        export(synthetic_shards, str(tmp_path / "d"), ExportOptions("parquet"))
    with pytest.raises(ExportError, match="inside the shard set"):
        export(synthetic_shards, os.path.join(synthetic_shards, "x"), ExportOptions("mds"))
    with pytest.raises(ExportError, match="below the largest sample"):
        export(synthetic_shards, str(tmp_path / "d"), ExportOptions("mds", mds_size_limit=1000))
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ExportError, match="not a folder"):
        export(synthetic_shards, str(afile), ExportOptions("hdf5"))
    urls = ((synthetic_shards, "s3://bucket/x"), ("s3://bucket/set", str(tmp_path / "d")))
    for out, dest in urls:  # gs:// is exported (tests/schemas/test_export_gcs.py), others not
        with pytest.raises(ExportError, match="local folders and gs:// URLs only"):
            export(out, dest, ExportOptions("tfrecord"))
    assert not os.path.exists("s3:")
    with pytest.raises(ExportError, match="no such directory"):
        export(str(tmp_path / "none"), str(tmp_path / "d"), ExportOptions("hdf5"))
    with pytest.raises(ExportError, match="is a file, not a shard set directory; give the folder"):
        export(str(afile), str(tmp_path / "d"), ExportOptions("hdf5"))
    assert not (tmp_path / "d").exists()


def test_a_dest_that_cannot_be_written_is_refused_before_validation(
    synthetic_shards, tmp_path, monkeypatch
):
    def validate(*args, **kwargs):
        raise AssertionError("validation ran (it reads every shard) before the refusal")

    monkeypatch.setattr("schemas.validate.run.validate", validate)
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ExportError) as under_a_file:
        export(synthetic_shards, f"{afile}/d", ExportOptions("hdf5"))
    assert str(under_a_file.value) == (
        f"{afile}/d cannot be made: {afile} is a file; give a folder for the export"
    )
    with read_only_folder(tmp_path / "ro") as ro:
        for dest, why in ((ro, "is"), (f"{ro}/d", f"cannot be made: {ro} is")):
            with pytest.raises(ExportError) as refused:
                export(synthetic_shards, dest, ExportOptions("tfrecord"))
            assert str(refused.value) == (
                f"{dest} {why} on a read-only filesystem; choose another DEST or remount it "
                "writable"
            )


def test_an_mds_size_limit_too_small_is_refused_before_validation(
    synthetic_shards, tmp_path, monkeypatch
):
    def validate(*args, **kwargs):
        raise AssertionError("validation ran (it reads every shard) before the refusal")

    monkeypatch.setattr("schemas.validate.run.validate", validate)
    with pytest.raises(ExportError, match="below the largest sample"):
        export(synthetic_shards, str(tmp_path / "d"), ExportOptions("mds", mds_size_limit=1000))
    assert not (tmp_path / "d").exists()


def test_hdf5_without_h5py_is_refused_in_one_line(synthetic_shards, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)  # as where the export extra is not installed
    with pytest.raises(ExportError, match=r"needs h5py.*bert-shards\[export\]") as refused:
        export(synthetic_shards, str(tmp_path / "d"), ExportOptions("hdf5"))
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "d").exists()


def test_overwrite_replaces_only_what_an_export_writes(synthetic_shards, sample_shards, tmp_path):
    dest = str(tmp_path / "dest")
    export(synthetic_shards, dest, ExportOptions("tfrecord"))  # 4 shards
    (tmp_path / "dest" / "notes.txt").write_text("mine")
    (tmp_path / "dest" / "training-00009-of-00010.tfrecord").write_text("an old export's")
    (tmp_path / "dest" / "training-00001-of-00004.tfrecord.tmp-x1y2").write_text("a killed one's")
    before = files_of(dest)
    with pytest.raises(ExportError, match="not empty"):
        export(sample_shards, dest, ExportOptions("tfrecord"))
    assert files_of(dest) == before
    export(sample_shards, dest, ExportOptions("tfrecord", overwrite=True))
    after = files_of(dest)
    summary = json.loads(after["export.json"])
    written = {e["path"] for e in summary["files"]} | {"vocab.txt", "export.json"}
    assert set(after) == written | {"notes.txt"}  # stale and half-written files gone, notes kept
    assert after["notes.txt"] == b"mine"
    fresh = str(tmp_path / "fresh")
    export(sample_shards, fresh, ExportOptions("tfrecord"))
    assert files_of(fresh) == {k: v for k, v in after.items() if k != "notes.txt"}


def test_bert_schemas_and_bert_shards_export(synthetic_shards, tmp_path, capsys):
    from pipeline.shell.cli import main as shards_main
    from schemas.cli import main as schemas_main

    dest = str(tmp_path / "d")
    assert schemas_main(["export", synthetic_shards, dest, "--format", "mds"]) == 0
    assert "mds file(s)" in capsys.readouterr().out
    assert shards_main(["export", synthetic_shards, dest, "--format", "mds"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bert-shards export: ") and "--overwrite" in err
    assert err.count("\n") == 1  # one line, no traceback
    assert shards_main(["export", synthetic_shards, dest, "--format", "mds", "--overwrite"]) == 0
    capsys.readouterr()
    said = {
        "csv": "argument --format: invalid choice: 'csv'",
        "-1": "--mds-size-limit must be in [1, 4294967295] (got -1)",
    }
    for flags in (["--format", "csv"], ["--format", "mds", "--mds-size-limit", "-1"]):
        with pytest.raises(SystemExit) as e:
            shards_main(["export", synthetic_shards, dest, *flags])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bert-shards export: error: {said[flags[-1]]}")
        assert err.endswith("; see bert-shards export --help\n") and err.count("\n") == 1


def test_an_export_that_fills_the_disk_is_one_line_saying_how_to_go_on(
    sample_shards, tmp_path, capsys
):
    """The disk's refusal named with the file and what to run once there is space: the same
    command, with --overwrite where finished files stay in DEST."""
    from schemas.cli import main

    with tmpfs(tmp_path / "fs", "size=150k", "no other export fills a disk") as where:
        dest, grow = f"{where}/d", ["mount", "-o", "remount,size=64m", where]
        args = ["export", sample_shards, dest, "--format", "tfrecord"]
        assert main(args) == 1
        err = capsys.readouterr().err  # the files finished, then the line
        assert re.fullmatch(
            rf"bert-schemas export: error: {re.escape(dest)}/training-0000[1-3]-of-00004\."
            r"tfrecord: No space left on device; free some space there, then run the same "
            r"command with --overwrite, which replaces the files it wrote",
            err.splitlines()[-1],
        ), err
        assert "Traceback" not in err
        subprocess.run(grow, check=True)
        assert main([*args, "--overwrite"]) == 0


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_export_shards_quotes_its_paths_and_needs_format_and_dest():
    venv = sys.prefix
    make = ["make", "--no-print-directory", f"VENV={venv}", "-o", f"{venv}/.installed-stamp"]
    r = subprocess.run(
        [*make, "-n", "export-shards", "EXPORT_FORMAT=hdf5", "OUT=out/my set", "DEST=ex/my dest"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "export 'out/my set' 'ex/my dest' --format 'hdf5'" in r.stdout
    r = subprocess.run([*make, "export-shards"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "give EXPORT_FORMAT=" in r.stderr


def test_overwrite_never_deletes_a_listed_file_an_export_does_not_name(synthetic_shards, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    foreign = {"files": [{"path": "notes.txt"}], "index": None, "vocab": {"path": "notes.txt"}}
    (dest / "export.json").write_text(json.dumps(foreign))
    export(synthetic_shards, str(dest), ExportOptions("tfrecord", overwrite=True))
    assert (dest / "notes.txt").read_text() == "mine"


def test_a_failed_overwrite_leaves_no_mix_of_old_and_new_files(
    synthetic_shards, tmp_path, monkeypatch
):
    import schemas.export.run as run

    dest = str(tmp_path / "dest")
    export(synthetic_shards, dest, ExportOptions("mds"))
    old = set(files_of(dest))

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(run, "_id_dtype", fail)  # fails right before the first data file
    with pytest.raises(OSError):
        export(synthetic_shards, dest, ExportOptions("mds", overwrite=True))
    left = set(files_of(dest))
    assert not any(run.OWN_NAMES["mds"].fullmatch(n) for n in left), left
    assert "export.json" not in left and old - left
