"""The build through Beam's portable job API, as Flink, Spark and Dataflow Runner v2 run Python:
a job service (`local_job_service_main`) and an external worker pool (`worker_pool_main`) as
separate processes on loopback ports, the SDK harness in processes the pool starts. The shards
are the local runner's bytes, from a local disk and from gs:// (the emulator) alike, for every
input format; and a build stopped by a signal asks the job service to cancel its job."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from tests.gcs_emulator import _wait_for, free_port, upload_tree
from tests.helpers import (
    INTERRUPTED,
    SAMPLE,
    SAMPLE_INPUT,
    build_process,
    build_shards,
    kill_when,
    shard_set,
    write_other_formats,
    write_parquet,
)

pytest.importorskip("gcp_storage_emulator")


def beam_service(module: str, port_flag: str, env: dict, log_path) -> tuple[subprocess.Popen, int]:
    """`python -m module` serving on a free loopback port (not yet waited for), and its port.
    `python` on its PATH is this interpreter, which a worker pool starts its workers with."""
    env = dict(env, PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, port_flag, str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, port


JOB_SERVICE = ("apache_beam.runners.portability.local_job_service_main", "--port")
WORKER_POOL = ("apache_beam.runners.worker.worker_pool_main", "--service_port")


@pytest.fixture(scope="module")
def portable(gcs_emulator, tmp_path_factory):
    """The job service and the worker pool, whose workers reach the emulator (its
    environment)."""
    logs = tmp_path_factory.mktemp("portable")
    started = {}
    try:
        for name, service in (("job service", JOB_SERVICE), ("worker pool", WORKER_POOL)):
            started[name] = beam_service(*service, dict(os.environ), logs / f"{name}.log")
        for name, (proc, port) in started.items():  # both start, then both are waited for
            _wait_for(port, proc, name, timeout=60)
        yield [
            "--runner",
            "PortableRunner",
            "--job_endpoint",
            f"localhost:{started['job service'][1]}",
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            f"localhost:{started['worker pool'][1]}",
        ]
    finally:
        for proc, _ in started.values():
            proc.terminate()
        for proc, _ in started.values():
            proc.wait(timeout=30)


def build(inputs: str, out: str, runner_args: list[str]) -> int:
    from pipeline.shell.cli import main

    return main(["build", "--input", inputs, "--out", out, "--num-shards", "4", *runner_args])


def test_portable_build_is_the_local_build(portable, sample_shards, tmp_path):
    # `bert-shards build` as a user runs it, in a process of its own that ends with the quick
    # exit (`schemas.quick_exit`) once the build has returned: status 0, the output whole. INPUT
    # and OUT given relative to a folder that is not the worker pool's: its workers are given
    # them absolute (else they would read nothing there).
    shutil.copytree(SAMPLE, tmp_path / "corpus", ignore=shutil.ignore_patterns("finetune"))
    temporary = tmp_path / "tmp"  # the build's temporary folder: what is left in it?
    temporary.mkdir()
    cmd = [sys.executable, "-m", "pipeline", "build", "--out", "out", "--num-shards", "4"]
    cmd += ["--input", "books:corpus/books,text:corpus/text", "--progress-seconds", "0"]
    env = {**os.environ, "TMPDIR": str(temporary)}
    done = subprocess.run(
        [*cmd, *portable], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shard_set(str(tmp_path / "out")) == shard_set(sample_shards)
    assert os.listdir(temporary) == []  # the staged sdist, package list and session are gone


@pytest.mark.slow
def test_portable_build_from_and_into_gcs(portable, sample_shards, gcs_emulator):
    gcs_emulator.create_bucket("portable")
    upload_tree(SAMPLE, "gs://portable/sample")
    inputs = "books:gs://portable/sample/books,text:gs://portable/sample/text"
    assert build(inputs, "gs://portable/out", portable) == 0
    assert shard_set("gs://portable/out") == shard_set(sample_shards)
    names = gcs_emulator.list_objects("portable", "out/")
    assert names and not [n for n in names if "/.building/" in n or n.endswith(".lock")]


@pytest.mark.slow
def test_a_wikipedia_dump_and_jsonl_build_the_local_bytes(portable, tmp_path, monkeypatch):
    """The formats the sample lacks: a `-multistream` Wikipedia dump, its index beside it (the
    dump read by span in the pool's workers, as a paragraphs file is, cut small), JSONL
    (compressed as zstd), Parquet and Arrow (the three read from `--text-field`'s field, which
    reaches the pool's workers, as `--cjk-sentences` does), and WikiExtractor's output; weighted
    by `--language-smoothing` (the rates reach the pool's workers as a side input)."""
    import json

    import zstandard

    from tests.pipeline.wikidata import TABLE_MARKUP, gensim_xml, write_multistream

    dumps, lines = tmp_path / "dumps", tmp_path / "jsonl"
    lines.mkdir()
    write_multistream(dumps, pages_per_stream=2)
    with open(f"{SAMPLE}/text/wiki-style.txt") as f:
        documents = [*f.read().split("\n\n"), "他说：“明天见。”然后走了。今天天气很好！"]
    records = [{"id": f"doc-{i}", "text": d} for i, d in enumerate(documents) if d.strip()]
    text = "".join(json.dumps({"id": r["id"], "body": r["text"]}) + "\n" for r in records)
    (lines / "part-0.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    (tmp_path / "parquet").mkdir()
    rows = [{"id": f"row-{i}", "text": r["text"][::-1]} for i, r in enumerate(records)]
    write_parquet(tmp_path / "parquet" / "part-0.parquet", rows, 2, "body")
    inputs = f"wikipedia:{dumps},jsonl:{lines},parquet:{tmp_path / 'parquet'},"
    inputs += write_other_formats(tmp_path / "other", [r["text"] for r in records], "body")
    local, portable_out = str(tmp_path / "local"), str(tmp_path / "portable")
    fields = ["--text-field", "body", "--cjk-sentences", "--language-smoothing", "0.7"]
    flags = ["--num-shards", "4", "--progress-seconds", "0"]
    monkeypatch.setattr("pipeline.sources.line_spans.LINE_SPAN_BYTES", 1000)  # both builds
    assert build_shards(local, *flags, *fields, inputs=inputs) == 0
    assert build(inputs, portable_out, [*portable, *fields]) == 0
    assert shard_set(portable_out) == shard_set(local)
    with open(f"{local}/manifest.json") as f:
        total = json.load(f)["counts"]["total"]
    assert total["wiki_pages"] == gensim_xml(TABLE_MARKUP).count(b"<page>") > 1
    assert total["files_read"] == 7  # the dump; JSONL, Parquet, WikiExtractor 2, Arrow, paragraphs
    parquet = json.load(open(f"{portable_out}/manifest.json"))["counts"]["by_source"]["parquet"]
    assert parquet["documents_used"] == len(rows)
    assert len(json.load(open(f"{local}/manifest.json"))["counts"]["by_input"]) == 6


@pytest.mark.slow
def test_records_joined_into_documents_build_the_local_bytes(portable, tmp_path):
    """`--records-per-document` reaches the pool's workers with the read step's other
    settings: the sample's sentences as records, and as lines with no blank one, joined."""
    import json

    folder = f"{SAMPLE}/text"
    lines = [
        line.strip()
        for name in sorted(os.listdir(folder))
        for line in open(os.path.join(folder, name), encoding="utf-8")
        if line.strip()
    ]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps({"text": s}) + "\n" for s in lines))
    (tmp_path / "flat.txt").write_text("".join(s + "\n" for s in lines))
    inputs = f"jsonl:{tmp_path / 'r.jsonl'},text:{tmp_path / 'flat.txt'}"
    joined = ["--records-per-document", "16", "--vocab-size", "500"]
    local, pooled = str(tmp_path / "local"), str(tmp_path / "portable")
    assert build_shards(local, "--num-shards", "4", *joined, inputs=inputs) == 0
    assert build(inputs, pooled, [*portable, *joined]) == 0
    assert shard_set(pooled) == shard_set(local)
    with open(f"{pooled}/manifest.json") as f:
        assert json.load(f)["counts"]["total"]["documents_used"] == 30


def job_states(endpoint: str, job_id: str) -> list[str]:
    """The job's states as its service recorded them, up to the first terminal one (where the
    service's stream ends), then the state it ends in once its run is over (DONE or FAILED)."""
    import time

    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    names = beam_job_api_pb2.JobState.Enum.Name
    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        request = beam_job_api_pb2.GetJobStateRequest(job_id=job_id)
        states = [names(e.state) for e in stub.GetStateStream(request, timeout=120)]
        deadline = time.monotonic() + 60
        while states[-1] not in ("DONE", "FAILED") and time.monotonic() < deadline:
            state = names(stub.GetState(request, timeout=30).state)
            if state != states[-1]:
                states.append(state)
            time.sleep(0.1)
    return states


def job_ids(endpoint: str) -> set[str]:
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        jobs = stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info
    return {job.job_id for job in jobs}


@pytest.mark.slow
def test_a_signal_stops_the_driver_and_asks_the_job_service_to_cancel(
    portable, sample_shards, tmp_path
):
    """SIGTERM once the build's first sentence chunk is written: the driver ends in its one
    line and 143, and asks the job service to cancel the job. Beam's local job service (the
    pinned 2.77) records the job as cancelled but lets it run (its `cancel` is a to-do), so
    here the job then ends DONE and OUT holds the local runner's bytes; Flink's, Spark's and
    Dataflow's services stop the job instead (untested)."""
    endpoint = portable[portable.index("--job_endpoint") + 1]
    before = job_ids(endpoint)
    out = str(tmp_path / "out")
    driver = build_process(out, "--num-shards", "4", "--progress-seconds", "0", *portable)
    assert kill_when(driver, f"{out}/shards/.building/tmp/sentences/*", sig=signal.SIGTERM)
    said = driver.stdout.read().decode().strip().splitlines()
    assert driver.returncode == 143 and said[-1] == INTERRUPTED, said
    [job] = job_ids(endpoint) - before
    states = job_states(endpoint, job)
    assert states.index("CANCELLING") < states.index("CANCELLED") < states.index("DONE"), states
    assert shard_set(out) == shard_set(sample_shards)
    # the line said to resume; the job finished the build instead, and --resume says so
    from pipeline.shell.cli import main

    with pytest.raises(SystemExit) as refused:
        main(
            [
                "build",
                "--input",
                SAMPLE_INPUT,
                "--out",
                out,
                "--num-shards",
                "4",
                *portable,
                "--resume",
            ]
        )
    assert refused.value.code == (
        "error: --resume refused: OUT holds a finished build (manifest.json), so there is "
        "nothing to resume (a job that ran on after the command was stopped can have finished "
        "it: bert-shards validate OUT checks the set); to build it again, run the command "
        "without --resume (make: leave ARGS=--resume out)"
    )


@pytest.mark.slow
def test_workers_without_credentials_are_named_in_the_line(portable, gcs_emulator, tmp_path):
    """The driver checks the store with its own credentials before any work; a runner whose
    workers were started without any (a second worker pool, its key file missing) fails the
    build in one line that names where the worker runs and says what to give it."""
    gcs_emulator.create_bucket("portable-no-key")
    upload_tree(f"{SAMPLE}/books", "gs://portable-no-key/books")
    # (without the emulator's address too, as a worker on another machine has none)
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    env["GOOGLE_APPLICATION_CREDENTIALS"] = str(tmp_path / "no-key.json")
    pool, port = beam_service(*WORKER_POOL, env, tmp_path / "pool.log")
    try:
        _wait_for(port, pool, "worker pool", timeout=60)
        runner = list(portable)
        runner[runner.index("--environment_config") + 1] = f"localhost:{port}"
        with pytest.raises(SystemExit) as e:
            build("books:gs://portable-no-key/books", str(tmp_path / "out"), runner)
    finally:
        pool.terminate()
        pool.wait(timeout=30)
    line = str(e.value.code)
    said = re.fullmatch(
        r"error: gs:// needs Google Cloud credentials on the runner's worker on host (\S+), "
        r"process (\d+) \(File \S+ was not found\): the driver has them, but the runner's "
        r"workers need their own; run .*",
        line,
    )
    assert said and said[1] == socket.gethostname(), line
    assert "GOOGLE_APPLICATION_CREDENTIALS" in line and "\n" not in line


def test_a_workers_listing_unlike_the_commands_stops_the_build_in_one_line(
    portable, tmp_path, monkeypatch
):
    """The pool's workers list the input themselves before planning the reads, as a cluster's
    do; a listing that differs from the command's (here its digest replaced, as if a file had
    been removed in between) stops the build with the workers' line, through the job service."""
    import pipeline.files.listing

    monkeypatch.setattr(pipeline.files.listing, "listing_digest", lambda specs: "0" * 64)
    with pytest.raises(SystemExit) as e:
        build(SAMPLE_INPUT, str(tmp_path / "out"), [*portable, "--progress-seconds", "0"])
    line = str(e.value.code)
    assert line.startswith("error: the input changed after the command started ("), line
    assert "restore the input as it was and run the same command with --resume" in line
    assert "\n" not in line
