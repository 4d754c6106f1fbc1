"""A shard set in an object store, read without Beam: `schemas.storage` against the local GCS
emulator (tests/gcs_emulator.py), and `validate` / `inspect` on a gs:// OUT giving what they
give on the same set on a local disk."""

from __future__ import annotations

import json
import os
import socket

import pytest

pytest.importorskip("gcp_storage_emulator")
pytest.importorskip("google.cloud.storage")

from schemas import storage, storage_errors  # noqa: E402
from schemas.cli import main as schemas_main  # noqa: E402
from schemas.manifest import MANIFEST_NAME, read_manifest  # noqa: E402
from schemas.validate.run import validate  # noqa: E402
from tests.gcs_emulator import free_port, upload_tree  # noqa: E402


def test_local_and_gs_answer_alike(gcs_bucket, tmp_path):
    local = tmp_path / "set"
    (local / "sub").mkdir(parents=True)
    (local / "a.txt").write_bytes(b"one\r\ntwo\n")
    (local / "sub" / "b.bin").write_bytes(os.urandom(3000))
    url = f"gs://{gcs_bucket}/set"
    upload_tree(str(local), url)
    for base in (str(local), url):
        assert storage.list_files(base) == {"a.txt": 9, "sub/b.bin": 3000}
        assert storage.isdir(base) and storage.isdir(storage.join(base, "sub"))
        assert storage.exists(storage.join(base, "a.txt"))
        assert not storage.exists(storage.join(base, "sub"))  # a folder is not a file
        assert not storage.exists(storage.join(base, "nope"))
        assert storage.size(storage.join(base, "sub/b.bin")) == 3000
        assert storage.read_text(storage.join(base, "a.txt")) == "one\ntwo\n"  # as open() reads
        with storage.open_file(storage.join(base, "sub/b.bin")) as f:
            f.seek(1000)
            assert f.read(10) == (local / "sub" / "b.bin").read_bytes()[1000:1010]
    copy = str(tmp_path / "copy")
    assert storage.fetch(storage.join(url, "sub/b.bin"), copy) == storage.fetch(
        str(local / "sub" / "b.bin"), copy + "2"
    )
    assert open(copy, "rb").read() == (local / "sub" / "b.bin").read_bytes()
    assert storage.list_files(f"gs://{gcs_bucket}/nothing") == {}
    assert not storage.isdir(f"gs://{gcs_bucket}/nothing")


def test_an_upload_past_one_chunk_is_resumable_and_arrives_whole(
    gcs_emulator, gcs_bucket, tmp_path
):
    """A file larger than one chunk (an export's shard of a large set) goes up in a resumable
    session of chunk-sized requests, and the object is the file, byte for byte; below a chunk,
    one request."""
    big, small = tmp_path / "big.bin", tmp_path / "small.bin"
    big.write_bytes(os.urandom(storage.CHUNK + 4096))
    small.write_bytes(os.urandom(4096))
    for local in (big, small):
        gcs_emulator.reset_stats()
        url = f"gs://{gcs_bucket}/{local.name}"
        storage.upload(str(local), url)
        uploads = [(p, st) for _, p, st in gcs_emulator.request_log() if p.startswith("/upload/")]
        assert storage.read_bytes(url) == local.read_bytes()
        if local is small:
            assert len(uploads) == 1 and "uploadType=multipart" in uploads[0][0], uploads
            continue
        assert "uploadType=resumable" in uploads[0][0], uploads  # the session begun
        # then one request per chunk: a full one (308: go on), the rest (200: the object made)
        assert [st for _, st in uploads] == [200, 308, 200], uploads


def test_missing_objects_and_buckets_are_one_line_errors(gcs_bucket):
    for url in (f"gs://{gcs_bucket}/nope.txt", "gs://no-such-bucket-here/x.txt"):
        with pytest.raises(FileNotFoundError) as e:
            storage.read_bytes(url)
        assert str(e.value).startswith(url) and "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError):
        storage.size(f"gs://{gcs_bucket}/nope.txt")
    with pytest.raises(ValueError, match="no bucket"):
        storage.read_bytes("gs:///x")


def test_the_client_takes_the_emulator_and_the_credentials(gcs_emulator, gcs_bucket):
    """STORAGE_EMULATOR_HOST is honoured (the proxy sees the requests) and the throwaway
    service-account key is the one used (its token endpoint is the proxy's)."""
    storage._CLIENT.clear()
    with storage.open_file(f"gs://{gcs_bucket}/x.txt", "w") as f:
        f.write("x")
    stats = gcs_emulator.stats()
    assert stats["requests"] >= 1 and stats["token_requests"] >= 1


@pytest.fixture
def nothing_listens(monkeypatch) -> str:
    """STORAGE_EMULATOR_HOST at a loopback port where nothing listens (a store that cannot be
    reached), the tries of `check_reachable` not paused; returns that address."""
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{address}")
    monkeypatch.setattr(storage, "CONNECT_PAUSE", 0.0)
    return address


def test_an_unreachable_store_is_a_one_line_error_naming_the_url(nothing_listens, capsys, tmp_path):
    """Before its first request the client checks that the store takes a connection: the
    client's own retries of that request would wait two minutes before failing."""
    url = "gs://bucket/set/manifest.json"
    for call in (storage.read_bytes, storage.exists, storage.list_files):
        with pytest.raises(OSError) as e:
            call(url)
        said = str(e.value)
        assert said.startswith(f"{url}: cannot reach the object store: {nothing_listens} took no")
        assert "3 tries (ConnectionRefusedError" in said and "\n" not in said
    assert schemas_main(["validate", "gs://bucket/set"]) == 1
    said = capsys.readouterr()  # one line, not a table of checks that could not run
    assert said.out == "" and "\n" not in said.err.strip()
    assert f"gs://bucket/set: cannot reach the object store: {nothing_listens}" in said.err
    assert schemas_main(["inspect", "gs://bucket/set"]) == 1
    err = capsys.readouterr().err.strip()
    assert f"cannot reach the object store: {nothing_listens}" in err and "\n" not in err
    dest = str(tmp_path / "export")
    assert schemas_main(["export", "gs://bucket/set", dest, "--format", "hdf5"]) != 0
    err = capsys.readouterr().err.strip()
    assert f"cannot reach the object store: {nothing_listens}" in err and "\n" not in err
    assert not os.path.exists(dest)
    # no client kept for that address: the next call checks again
    assert all(host != f"http://{nothing_listens}" for _, host in storage._CLIENT)


def test_the_check_connects_where_requests_would(monkeypatch):
    """To the API's own host and port, or to the proxy the environment names for it unless
    `no_proxy` exempts the host; nothing is sent."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setattr(storage, "CONNECT_PAUSE", 0.0)
        for key in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            monkeypatch.delenv(key, raising=False)
            monkeypatch.delenv(key.upper(), raising=False)
        storage.check_reachable(f"http://127.0.0.1:{port}")
        closed = free_port()
        refused = f"^127.0.0.1:{closed} took no connection"
        with pytest.raises(storage_errors.Unreachable, match=refused):
            storage.check_reachable(f"http://127.0.0.1:{closed}")
        monkeypatch.setenv("all_proxy", f"http://127.0.0.1:{port}")
        storage.check_reachable(f"https://127.0.0.1:{closed}")  # the proxy answers for it
        monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{free_port()}")
        with pytest.raises(storage_errors.Unreachable):  # the scheme's own proxy comes first
            storage.check_reachable(f"https://127.0.0.1:{closed}")
        monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
        storage.check_reachable(f"https://127.0.0.1:{closed}")
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        with pytest.raises(storage_errors.Unreachable, match=f"^127.0.0.1:{closed} "):
            storage.check_reachable(f"https://127.0.0.1:{closed}")


@pytest.fixture
def gs_set(sample_shards, gcs_bucket) -> str:
    url = f"gs://{gcs_bucket}/shards/sample"
    upload_tree(sample_shards, url)
    return url


def _report(directory: str) -> dict:
    report = json.loads(validate(directory).to_json())
    report.pop("seconds")
    report.pop("directory")
    return report


def test_validate_on_gs_equals_local_and_reads_each_shard_once(gs_set, sample_shards, gcs_emulator):
    gcs_emulator.reset_stats()
    remote = _report(gs_set)
    stats = gcs_emulator.stats()
    assert remote == _report(sample_shards)
    assert validate(gs_set).ok
    shards = read_manifest(sample_shards).shards
    # manifest (size, then bytes), vocab, tokenizer.json, tokenizer_config.json,
    # special_tokens_map.json, one listing, one read per shard
    assert stats["requests"] <= 7 + len(shards), stats
    total = sum(e.bytes for e in shards)
    assert total < stats["bytes_down"] < 1.2 * total + 200_000, stats


def test_validate_on_gs_finds_changed_missing_and_extra_shards(sample_shards, gcs_bucket):
    rels = [e.path for e in read_manifest(sample_shards).shards]

    def damage(rel, data):
        if rel == rels[1]:
            return data[:-100] + bytes(b ^ 0xFF for b in data[-100:])  # same size, other bytes
        if rel == rels[2]:
            return None
        return data

    url = f"gs://{gcs_bucket}/broken"
    upload_tree(sample_shards, url, damage)
    extra = storage.join(url, "shards/train-00099-of-00099.arrow")
    with storage.open_file(extra, "wb") as f:
        f.write(b"x")
    report = validate(url)
    assert not report.ok
    lines = report.to_text()
    assert f"{rels[1]}: sha256" in lines
    assert f"{rels[2]}: listed in the manifest but missing" in lines
    assert "shards/train-00099-of-00099.arrow: not listed in the manifest" in lines


def test_validate_and_inspect_refuse_a_missing_set_in_one_line(gcs_bucket, capsys):
    for url in (f"gs://{gcs_bucket}/none", "gs://no-such-bucket-here/out"):
        assert schemas_main(["validate", url]) == 1
        out = capsys.readouterr().out
        assert f"{url}/{MANIFEST_NAME} does not exist" in out
        assert schemas_main(["inspect", url]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("bert-schemas inspect: ") and "\n" not in err
        assert "does not exist" in err


def test_inspect_on_gs_prints_what_it_prints_locally(gs_set, sample_shards, capsys):
    assert schemas_main(["inspect", sample_shards, "--n", "2", "--shard", "1"]) == 0
    local = capsys.readouterr().out
    assert schemas_main(["inspect", gs_set, "--n", "2", "--shard", "1"]) == 0
    assert capsys.readouterr().out == local
    from pipeline.shell.cli import main as shards_main  # `bert-shards inspect` forwards to it

    assert shards_main(["validate", gs_set]) == 0
    assert "pass" in capsys.readouterr().out


def test_validate_inspect_and_export_through_shed_requests(
    gs_set, sample_shards, gcs_emulator, tmp_path, capsys
):
    """The first request of each kind answered 503: each is sent again, and the report, the
    rows and an export into gs:// are what they are without (uploads among them)."""
    from schemas.export.run import ExportOptions, export

    local = str(tmp_path / "tfrecord")
    export(sample_shards, local, ExportOptions("tfrecord"))
    assert schemas_main(["inspect", sample_shards, "--n", "1"]) == 0
    rows = capsys.readouterr().out
    kinds = ["download", "list", "object-get", "upload"]
    gcs_emulator.inject_faults(10**9, kinds)
    try:
        assert _report(gs_set) == _report(sample_shards)
        assert schemas_main(["inspect", gs_set, "--n", "1"]) == 0
        assert capsys.readouterr().out == rows
        export(gs_set, f"{gs_set}-tfrecord", ExportOptions("tfrecord"))
        assert gcs_emulator.injected() == dict.fromkeys(kinds, 1)
    finally:
        gcs_emulator.inject_faults(0, [])
    for rel in storage.list_files(local):
        assert storage.read_bytes(f"{gs_set}-tfrecord/{rel}") == storage.read_bytes(
            os.path.join(local, rel)
        )


def test_a_refused_listing_is_said_once_not_as_missing_shards(gs_set, gcs_emulator):
    """The shards' listing refused (403): one failure naming it and what to check; the shards
    the manifest lists are read still, not called missing."""
    gcs_emulator.inject_faults(1, ["list"], status=403)
    try:
        lines = validate(gs_set).to_text()
    finally:
        gcs_emulator.inject_faults(0, [])
    assert "missing" not in lines
    assert (
        f"FAIL files: shards/: cannot be listed ({gs_set}/shards: the object store refused "
        "access (403 injected by the test's proxy); check the credentials" in lines
    )
    assert "1 of " in lines and "checks failed" in lines


def test_a_store_that_kept_failing_is_one_line():
    """The client's retries spent (its RetryError): the last answer, and to try later."""
    from google.api_core import exceptions as api

    with (
        pytest.raises(storage_errors.StoreError) as caught,
        storage_errors.store_errors("gs://b/x"),
    ):
        raise api.RetryError("Timeout of 120.0s exceeded", api.ServiceUnavailable("slow down"))
    assert str(caught.value) == (
        "gs://b/x: the object store kept failing through two minutes of retries "
        "(503 slow down); try again later"
    )
