"""A standing Dask cluster's workers started as docs/runners.md tells users to start them:
`dask worker` processes given the docs' config file, a worker of two threads (what plain
`dask worker` starts), and a worker killed during a build, each against a scheduler in the
test process, on loopback; and a task whose workers keep dying, which Dask gives up."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "distributed", reason="the dask extra is not installed (pip install -e '.[dask]')"
)

from pipeline.runners.dask_runner import trim_threshold, worker_config  # noqa: E402
from tests.helpers import (  # noqa: E402
    ROOT,
    build_process,
    build_shards,
    file_digests,
    shard_set,
)

pytestmark = pytest.mark.slow


def docs_worker_config() -> str:
    """The YAML block docs/runners.md gives for a standing cluster's `dask worker` processes."""
    text = (Path(ROOT) / "docs" / "runners.md").read_text()
    return text.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_workers_config_file_in_the_docs_is_the_runners():
    # The docs' YAML unsets the nanny's trim threshold, as the runner does for the local
    # cluster it starts.
    import yaml

    assert yaml.safe_load(docs_worker_config()) == worker_config()
    assert worker_config() == {
        "distributed": {"nanny": {"pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": None}}}
    }


def docs_config_folder(tmp_path) -> str:
    """A folder holding the docs' YAML block, as DASK_CONFIG names it in docs/runners.md."""
    folder = tmp_path / "dask-config"
    folder.mkdir(exist_ok=True)
    (folder / "workers.yaml").write_text(docs_worker_config())
    return str(folder)


@contextlib.contextmanager
def standing_cluster(tmp_path, *workers: tuple[str, int, str | None]):
    """A scheduler in this process and, for each (name, threads, DASK_CONFIG folder or None),
    one `dask worker` process started as a standing cluster's are, on loopback and with this
    checkout on its path; yields the scheduler's address once every worker has joined."""
    import dask.config
    from distributed import Client, LocalCluster

    dask_cli = str(Path(sys.executable).with_name("dask"))
    env = {k: v for k, v in os.environ.items() if k != "DASK_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    # Dask's scratch folder (its locks) under tmp_path, not in the machine's /tmp
    with (
        dask.config.set({"temporary-directory": str(tmp_path)}),
        LocalCluster(
            n_workers=0,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as local,
    ):
        started = []
        try:
            for name, threads, config in workers:
                cmd = [dask_cli, "worker", local.scheduler_address, "--name", name]
                cmd += ["--host", "127.0.0.1", "--nworkers", "1", "--nthreads", str(threads)]
                cmd += ["--no-dashboard", "--local-directory", str(tmp_path)]
                extra = {"DASK_CONFIG": config} if config else {}
                started.append(subprocess.Popen(cmd, env={**env, **extra}, **quiet))
            with Client(local.scheduler_address) as client:
                client.wait_for_workers(len(workers), timeout=120)
            yield local.scheduler_address
        finally:
            for worker in started:
                worker.terminate()
            for worker in started:
                worker.wait(timeout=60)


def test_dask_worker_started_as_the_docs_say_runs_without_the_trim_threshold(tmp_path):
    # The docs' recipe run as written: `dask worker ADDRESS --nworkers 1 --nthreads 1` with
    # DASK_CONFIG naming a folder that holds the YAML block. Beside it, a worker started
    # without the folder has Dask's default, so the test tells the two apart.
    from distributed import Client

    docs = ("docs", 1, docs_config_folder(tmp_path))
    with standing_cluster(tmp_path, docs, ("default", 1, None)) as address, Client(address) as c:
        names = {a: w["name"] for a, w in c.scheduler_info()["workers"].items()}
        by_name = {names[a]: v for a, v in c.run(trim_threshold).items()}
    assert by_name == {"docs": None, "default": "65536"}, by_name


def test_a_worker_of_two_threads_builds_the_local_runners_bytes(sample_shards, tmp_path):
    # Plain `dask worker` runs a thread per CPU in one process. docs/runners.md advises one
    # thread per process (the steps are Python), but a worker whose two threads run the
    # build's tasks at once must write the same bytes.
    from distributed import Client, get_task_stream

    out = str(tmp_path / "dask")
    two = ("two", 2, docs_config_folder(tmp_path))
    with standing_cluster(tmp_path, two) as address, Client(address) as client:
        assert list(client.nthreads().values()) == [2]
        with get_task_stream(client) as stream:
            args = ["--num-shards", "4", "--runner", "DaskRunner", "--dask-address", address]
            assert build_shards(out, *args, "--progress-seconds", "0") == 0
    assert len({task["thread"] for task in stream.data}) == 2  # both threads ran its tasks
    assert file_digests(out) == file_digests(sample_shards)


def building_past_the_vocab(out: str, address: str) -> subprocess.Popen:
    """A build of the sample on the cluster at `address`, returned once its vocab is trained,
    when the workers hold the results kept for the steps after it and the reshuffled pieces."""
    args = ["--num-shards", "4", "--runner", "DaskRunner", "--dask-address", address]
    driver = build_process(out, *args, "--progress-seconds", "0")
    deadline = time.monotonic() + 120
    while not glob.glob(f"{out}/shards/.building/tmp/vocab.json"):
        assert driver.poll() is None, "the build ended before its workers were killed"
        assert time.monotonic() < deadline, "the vocab was not trained in two minutes"
        time.sleep(0.02)
    return driver


def test_a_worker_killed_during_a_build_is_made_good(sample_shards, tmp_path):
    # A worker lost mid-build (a spot machine taken back, the kernel's OOM killer): its nanny
    # starts another, the scheduler computes again elsewhere what the lost one held, and the
    # build ends with the local runner's bytes.
    from distributed import Client

    out = str(tmp_path / "dask")
    config = docs_config_folder(tmp_path)
    with (
        standing_cluster(tmp_path, ("a", 1, config), ("b", 1, config)) as address,
        Client(address) as client,
    ):
        victim = min(client.run(os.getpid).values())
        driver = building_past_the_vocab(out, address)
        os.kill(victim, signal.SIGKILL)
        said = driver.communicate(timeout=300)[0].decode()
        assert driver.returncode == 0, said[-2000:]
        assert victim not in client.run(os.getpid).values()  # the nanny's new worker ran on
    assert shard_set(out) == shard_set(sample_shards)  # the manifest's counts counted once


def test_a_task_whose_workers_keep_dying_ends_in_one_line_and_resume_goes_on(
    sample_shards, tmp_path
):
    # Dask gives a task up (KilledWorker) once the workers running it died
    # `allowed-failures` + 1 times, as the OOM killer does to a task too large for its
    # machines: one line naming the step and what kills, then --resume. Set to 0 here, so one
    # death running a task gives it up; every worker killed until the build ends.
    import dask.config
    from distributed import Client

    out = str(tmp_path / "dask")
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        standing_cluster(tmp_path, ("a", 1, None), ("b", 1, None)) as address,
        Client(address) as client,
    ):
        driver = building_past_the_vocab(out, address)
        deadline = time.monotonic() + 120
        while driver.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # a worker that is starting again
                for pid in client.run(os.getpid, wait=True).values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        said = driver.communicate(timeout=60)[0].decode().strip().splitlines()
        assert driver.returncode == 1, said[-20:]
        # the step named when the task is one of a step's (not one of a Reshuffle's pieces)
        assert re.match(
            r"error: a worker process of the Dask cluster died running one task( of step \w+)?,"
            r" 1 time\(s\) in all \(Dask gave it up: KilledWorker\): killed, as the kernel's "
            "out-of-memory killer kills",
            said[-1],
        ), said[-1]
        assert said[-1].endswith(
            "; then run the same command with --resume to continue from what is finished"
        ), said[-1]
        client.wait_for_workers(2, timeout=60)  # the nannies' new workers
        resumed = build_process(
            out,
            "--num-shards",
            "4",
            "--runner",
            "DaskRunner",
            "--dask-address",
            address,
            "--progress-seconds",
            "0",
            "--resume",
        )
        assert resumed.wait(timeout=300) == 0, resumed.stdout.read().decode()[-2000:]
    assert shard_set(out) == shard_set(sample_shards)
