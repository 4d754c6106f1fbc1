"""gs:// builds while the store fails (tests/gcs_emulator.py's proxy injects the faults): a
request GCS sheds (503, 429), whose connection drops or whose answer is cut off is sent again,
of every kind a build makes, a batch's deletes among them, and the build gives the local
bytes; a lock whose answer was lost is still taken; a refusal (403) ends the build in one line
naming the object and what to do; so do credentials that Google's token service refuses."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from schemas.storage_errors import StoreError
from tests.gcs_emulator import fake_service_account, upload_tree
from tests.helpers import ROOT, SAMPLE, SAMPLE_INPUT, build_shards, shard_set

pytest.importorskip("gcp_storage_emulator")

# every kind of request a gs:// build makes (the proxy's names)
BUILD_KINDS = ["batch", "copy", "delete", "download", "list", "object-get", "upload"]
FIRST_ONLY = 10**9  # `inject_faults`' every: the first request of each kind, then none
CREDENTIALS = (
    "check the credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth "
    "application-default login`) and the bucket's permissions"
)


@pytest.fixture(scope="module")
def corpus(gcs_emulator) -> str:
    """The sample corpus in a bucket of its own, as the build's inputs on gs://."""
    gcs_emulator.create_bucket("faults-corpus")
    upload_tree(SAMPLE, "gs://faults-corpus/sample")
    return "books:gs://faults-corpus/sample/books,text:gs://faults-corpus/sample/text/"


@pytest.fixture
def faults(gcs_emulator):
    """The emulator, whose proxy injects no fault again once the test ends."""
    yield gcs_emulator
    gcs_emulator.inject_faults(0, [])


def build(out: str, corpus: str, *extra: str, env=None) -> subprocess.CompletedProcess:
    """`bert-shards build` with 2 forked workers, as a user runs it (the sample_shards
    settings), in this environment or `env`."""
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", corpus, "--out", out]
    cmd += ["--num-shards", "4", "--workers", "2", "--progress-seconds", "0", *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def left_over(gcs, bucket: str) -> list[str]:
    return [n for n in gcs.list_objects(bucket) if "/.building/" in n or n.endswith(".lock")]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["before", "drop", "cut"])
def test_a_build_whose_requests_the_store_shed_is_the_local_build(
    faults, corpus, gcs_bucket, sample_shards, mode
):
    """The first request of each kind answered 503, its connection closed unanswered, or its
    answer cut off halfway, in the driver or a worker: each is sent again (a copy and a batch
    of deletes, which the client would not retry, among them)."""
    faults.inject_faults(FIRST_ONLY, BUILD_KINDS, mode=mode)
    out = f"gs://{gcs_bucket}/out"
    done = build(out, corpus)
    assert done.returncode == 0, done.stderr[-2000:]
    assert faults.injected() == dict.fromkeys(BUILD_KINDS, 1)
    assert shard_set(out) == shard_set(sample_shards)
    assert left_over(faults, gcs_bucket) == []


@pytest.mark.slow
def test_a_dask_build_whose_requests_the_store_shed_is_the_local_build(
    faults, corpus, gcs_bucket, sample_shards
):
    """The same on Dask (its own local cluster, worker processes of their own): the first
    request of each kind answered 503, those a Dask worker makes first among them (the shards'
    copies out of the build area), is sent again there too."""
    pytest.importorskip("distributed")
    faults.inject_faults(FIRST_ONLY, BUILD_KINDS)
    out = f"gs://{gcs_bucket}/out"
    done = build(out, corpus, "--runner", "DaskRunner")
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(faults.injected()) == set(BUILD_KINDS)
    assert shard_set(out) == shard_set(sample_shards)
    assert left_over(faults, gcs_bucket) == []


def test_deletes_a_batch_answered_429_part_by_part_are_sent_again(
    faults, corpus, gcs_bucket, sample_shards
):
    """GCS answers each part of a batch on its own: a batch whose every delete came back 429
    is sent again (each batch's first try so answered), and the build area goes."""
    faults.inject_faults(2, ["batch"], status=429, mode="parts")
    out = f"gs://{gcs_bucket}/out"
    assert build_shards(out, "--num-shards", "4", inputs=corpus) == 0
    assert faults.injected()["batch"] >= 2  # the old manifest's delete, the build area's
    assert left_over(faults, gcs_bucket) == []
    assert shard_set(out) == shard_set(sample_shards)


def test_a_lock_whose_answer_was_lost_is_taken(faults, gcs_bucket):
    """The lock's upload done, its answer lost: the client's second try finds the object
    there (412), and it is this build's own, so the build holds the lock."""
    from pipeline.shell.outdir import GcsLock

    faults.inject_faults(FIRST_ONLY, ["upload"], mode="after")
    lock = GcsLock(f"gs://{gcs_bucket}/out").acquire()
    assert faults.injected() == {"upload": 1}
    assert faults.list_objects(gcs_bucket) == ["out/.bert-shards.lock"]
    lock.release()
    assert faults.list_objects(gcs_bucket) == []


def test_a_refused_write_ends_the_build_in_one_line(faults, corpus, gcs_bucket):
    """Every upload refused (403), the first being OUT's lock: one line, before any work."""
    faults.inject_faults(1, ["upload"], status=403)
    out = f"gs://{gcs_bucket}/out"
    done = build(out, corpus)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {out}/.bert-shards.lock: the object store refused access (403 injected by the "
        f"test's proxy); {CREDENTIALS}; then run the same command again"
    ]


def test_a_refusal_in_a_workers_step_is_one_line_saying_to_resume(faults, corpus, gcs_bucket):
    """The shards' copies out of the build area refused (403), a worker's step at the end:
    one line naming the object, and --resume, since OUT holds what was finished."""
    faults.inject_faults(1, ["copy"], status=403)
    out = f"gs://{gcs_bucket}/out"
    done = build(out, corpus)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {out}/shards/.building/bucket-0000")
    assert line.endswith(
        f".arrow: the object store refused access (403 injected by the test's proxy); "
        f"{CREDENTIALS}; then run the same command with --resume to continue from what is "
        "finished"
    )


def test_a_finished_outs_manifest_that_cannot_be_read_is_not_called_anothers(
    faults, gcs_bucket, sample_shards
):
    """A build into an OUT holding a finished set reads its manifest to know the set as one of
    this package's: that read refused (403) was taken as a manifest of another tool's, and the
    line said to pass --overwrite. Now it is the store's line, and OUT is left as it was."""
    out = f"gs://{gcs_bucket}/out"
    upload_tree(sample_shards, out)
    before = faults.list_objects(gcs_bucket)
    faults.inject_faults(1, ["download"], status=403)
    done = build(out, SAMPLE_INPUT)  # local: the manifest is the first object read
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {out}/manifest.json: the object store refused access (403 injected by the "
        f"test's proxy); {CREDENTIALS}; then run the same command again"
    ]
    assert faults.list_objects(gcs_bucket) == before


@pytest.mark.parametrize("skip", [True, False], ids=["skip-bad-input", "plain"])
def test_an_input_the_store_refuses_is_not_a_bad_file(skip):
    """--skip-bad-input skips files that cannot be read as their format (truncated, corrupt).
    An input whose read the store refused (or kept failing) is not one: it was dropped unsaid
    with the flag, and called truncated or corrupt without it. Now the store's line stops the
    build (`--resume` then goes on)."""
    from pipeline.sources.documents import Tally
    from pipeline.stages.read import read_item

    said = "gs://b/in.txt: the object store refused access (403 Forbidden)"

    def refused(*args, **kwargs):
        raise StoreError(said)

    tally = Tally(skip_bad_input=skip)
    with pytest.raises(StoreError, match=re.escape(said) + "$"):
        list(read_item(("text", "gs://b/in.txt", "in.txt", None), tally, skip, refused))
    assert "files_dropped.unreadable" not in tally.counts


@contextlib.contextmanager
def token_service(status: int, answer: dict):
    """An OAuth token endpoint on loopback that answers every request with `status` and
    `answer`; yields its URL."""

    class Answer(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()


REFUSED = (
    "the object store's token service refused the credentials (invalid_grant: Invalid JWT "
    "Signature.); check the credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth "
    "application-default login`): a key deleted or disabled, or this machine's clock far off"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "status, answer, said",
    [
        (400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, REFUSED),
        (
            503,
            {"error": "unavailable", "error_description": "injected by the test"},
            "the object store's token service kept failing (unavailable: injected by the test);",
        ),
    ],
    ids=["refused", "failing"],
)
def test_credentials_without_a_token_end_build_and_validate_in_one_line(
    gcs_emulator, corpus, gcs_bucket, tmp_path, status, answer, said
):
    """Credentials for which Google's token service gives no access token: refused (a key
    deleted or disabled, a clock far off), or the service failing past google-auth's own
    tries. Said as such, not as a store that cannot be reached; nothing written."""
    out = f"gs://{gcs_bucket}/out"
    with token_service(status, answer) as token_uri:
        key = tmp_path / "key.json"
        key.write_text(json.dumps(fake_service_account(token_uri)))
        env = {**os.environ, "GOOGLE_APPLICATION_CREDENTIALS": str(key)}
        done = build(out, corpus, env=env)
        checked = subprocess.run(
            [sys.executable, "-m", "schemas.cli", "validate", out],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    [line] = done.stderr.splitlines()
    assert line.startswith("error: gs://") and f": {said}" in line, line
    assert done.returncode == 1 and line.endswith(" run the same command again"), line
    assert checked.returncode == 1
    assert f"FAIL manifest: {out}/manifest.json: {said}" in checked.stdout, checked.stdout
    assert gcs_emulator.list_objects(gcs_bucket) == []
