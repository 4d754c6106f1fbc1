"""The local GCS the object-storage tests run against: every request stays on loopback and is
counted, and the storage client's real credential path runs against a throwaway key."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("gcp_storage_emulator")


def test_write_list_read_rename_are_counted(gcs_emulator, gcs_bucket):
    from apache_beam.io.filesystems import FileSystems

    path = f"gs://{gcs_bucket}/a/b.txt"
    data = os.urandom(5000)  # does not compress: the bytes on the wire are the body's
    with FileSystems.create(path) as f:
        f.write(data)
    with FileSystems.open(path) as f:
        assert f.read() == data
    FileSystems.rename([path], [f"gs://{gcs_bucket}/a/c.txt"])
    assert gcs_emulator.list_objects(gcs_bucket) == ["a/c.txt"]
    stats = gcs_emulator.stats()
    assert stats["bytes_up"] >= 5000  # the upload's body went through the proxy
    assert stats["bytes_down"] >= 5000
    assert stats["by_kind"]["upload"] >= 1 and stats["by_kind"]["batch"] >= 1
    assert stats["requests"] == sum(stats["by_kind"].values())


def test_nothing_points_off_the_machine(gcs_emulator):
    for key in ("STORAGE_EMULATOR_HOST", "GCE_METADATA_HOST", "GCE_METADATA_IP"):
        assert "127.0.0.1" in gcs_emulator.env[key]
