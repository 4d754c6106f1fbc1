"""Exports from and to an object store (the local GCS emulator, tests/gcs_emulator.py): a set in
gs:// exported to a local folder, and a local set exported to gs://, give every file byte for
byte as the local export of the same set does, `export.json` included, for each format; the
scratch folder is left empty; a non-empty gs:// DEST is refused without `--overwrite`, which
replaces only the objects an export writes; a gs:// set that fails validation, a DEST inside
the set and a DEST that is an object are refused before anything is written; a shard rewritten
after the validation stops the export in one line."""

from __future__ import annotations

import os
import tempfile

import pytest

pytest.importorskip("gcp_storage_emulator")
pytest.importorskip("google.cloud.storage")

from schemas import storage  # noqa: E402
from schemas.cli import main as schemas_main  # noqa: E402
from schemas.export.run import ExportError, ExportOptions, export  # noqa: E402
from schemas.manifest import read_manifest  # noqa: E402
from tests.gcs_emulator import upload_tree  # noqa: E402

FORMATS = ("hdf5", "tfrecord", "mds")


def files_of(folder: str) -> dict[str, bytes]:
    """Every file below a local folder or a gs:// prefix, by its relative name."""
    return {
        rel: storage.read_bytes(storage.join(folder, rel)) for rel in storage.list_files(folder)
    }


@pytest.fixture
def scratch_root(tmp_path, monkeypatch) -> str:
    """Where the export's scratch folders go in this test (to see that none is left)."""
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return str(root)


@pytest.mark.slow
def test_gs_source_and_gs_target_give_the_local_bytes(
    synthetic_shards, gcs_bucket, gcs_emulator, tmp_path, scratch_root
):
    gs_set = f"gs://{gcs_bucket}/sets/synthetic"
    upload_tree(synthetic_shards, gs_set)
    shard_bytes = sum(e.bytes for e in read_manifest(synthetic_shards).shards)
    for fmt in FORMATS:
        options = ExportOptions(fmt, mds_size_limit=300_000)
        local = str(tmp_path / f"local-{fmt}")
        export(synthetic_shards, local, options)
        want = files_of(local)
        assert "export.json" in want and len(want) >= 3

        up = f"gs://{gcs_bucket}/exports/{fmt}"  # local -> gs://
        gcs_emulator.reset_stats()
        export(synthetic_shards, up, options)
        assert files_of(up) == want
        sent = gcs_emulator.stats()["bytes_up"]
        assert sum(map(len, want.values())) <= sent < 1.1 * sum(map(len, want.values())) + 50_000

        down = str(tmp_path / f"from-gs-{fmt}")  # gs:// -> local
        gcs_emulator.reset_stats()
        export(gs_set, down, options)
        assert files_of(down) == want
        # validate reads each shard once, the export once more: twice the shards, no more
        got = gcs_emulator.stats()["bytes_down"]
        assert 2 * shard_bytes <= got < 2.2 * shard_bytes + 200_000

        both = f"gs://{gcs_bucket}/exports/gs-{fmt}"  # gs:// -> gs://
        export(gs_set, both, options)
        assert files_of(both) == want
    assert os.listdir(scratch_root) == []  # each scratch folder removed with its files


def test_a_non_empty_gs_dest_is_refused_and_overwrite_replaces_only_the_exports_objects(
    synthetic_shards, gcs_bucket, capsys
):
    dest = f"gs://{gcs_bucket}/dest"
    assert schemas_main(["export", synthetic_shards, dest, "--format", "tfrecord"]) == 0
    assert f"to {dest} in " in capsys.readouterr().out
    fresh = files_of(dest)
    extra = {
        "notes.txt": b"mine",
        "old/keep.bin": b"a sub-folder's",
        "training-00009-of-00010.tfrecord": b"an old, larger export's",
    }
    for rel, data in extra.items():
        with storage.open_file(storage.join(dest, rel), "wb") as f:
            f.write(data)
    before = files_of(dest)
    assert schemas_main(["export", synthetic_shards, dest, "--format", "tfrecord"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bert-schemas export: ") and err.count("\n") == 1
    assert f"{dest} is not empty (9 entries)" in err and "--overwrite" in err
    assert files_of(dest) == before
    export(synthetic_shards, dest, ExportOptions("tfrecord", overwrite=True))
    after = files_of(dest)
    assert after == fresh | {"notes.txt": b"mine", "old/keep.bin": b"a sub-folder's"}


def test_gs_refusals_come_before_anything_is_written(synthetic_shards, gcs_bucket, tmp_path):
    gs_set = f"gs://{gcs_bucket}/set"
    rels = [e.path for e in read_manifest(synthetic_shards).shards]

    def damage(rel, data):  # one byte of one shard: its sha256 is no longer the manifest's
        return data[:100] + bytes([data[100] ^ 1]) + data[101:] if rel == rels[1] else data

    upload_tree(synthetic_shards, gs_set, damage)
    local = str(tmp_path / "d")
    with pytest.raises(ExportError, match="fails validation"):
        export(gs_set, local, ExportOptions("hdf5"))
    with pytest.raises(ExportError, match="fails validation"):
        export(gs_set, f"gs://{gcs_bucket}/d", ExportOptions("mds"))
    assert not os.path.exists(local) and storage.list_files(f"gs://{gcs_bucket}/d") == {}
    with pytest.raises(ExportError, match="inside the shard set"):
        export(gs_set, f"{gs_set}/export", ExportOptions("tfrecord"))
    with pytest.raises(ExportError, match="is an object, not a folder"):
        export(synthetic_shards, f"{gs_set}/vocab.txt", ExportOptions("tfrecord"))
    with pytest.raises(ExportError, match="does not exist"):
        export(f"gs://{gcs_bucket}/none", local, ExportOptions("hdf5"))
    with pytest.raises(ExportError, match="local folders and gs:// URLs only"):
        export(synthetic_shards, "s3://bucket/x", ExportOptions("hdf5"))
    assert not os.path.exists(local) and not os.path.exists("s3:")
    assert sorted(storage.list_files(f"gs://{gcs_bucket}")) == sorted(
        f"set/{rel}" for rel in storage.list_files(synthetic_shards) if not rel.startswith(".")
    )


def test_a_shard_changed_after_validation_stops_the_export_in_one_line(
    synthetic_shards, gcs_bucket, tmp_path, scratch_root, monkeypatch
):
    """The set is validated first, and each shard is hashed again as it is copied for the
    export: one rewritten in between (a build writing into the set) stops the export in one
    line naming it, with no `export.json` written and the scratch folder left empty."""
    gs_set = f"gs://{gcs_bucket}/set"
    upload_tree(synthetic_shards, gs_set)
    second = storage.join(gs_set, read_manifest(synthetic_shards).shards[1].path)
    fetch, seen = storage.fetch, []

    def rewritten_first(url, local):  # validation reads the shard first, then the export
        seen.append(url)
        if url == second and seen.count(url) == 2:
            data = storage.read_bytes(url)
            with storage.open_file(url, "wb") as f:
                f.write(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        return fetch(url, local)

    monkeypatch.setattr(storage, "fetch", rewritten_first)
    dest = str(tmp_path / "out")
    with pytest.raises(ExportError) as e:
        export(gs_set, dest, ExportOptions("tfrecord"))
    line = str(e.value)
    assert line.startswith(f"{second}: sha256 ") and "\n" not in line, line
    assert "(the shard changed after validation); nothing more was exported" in line
    assert not os.path.exists(os.path.join(dest, "export.json"))
    assert seen.count(second) == 2  # read by the validation, then by the export
    assert os.listdir(scratch_root) == []
