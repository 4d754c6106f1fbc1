"""A standing Dask cluster whose workers run other code than the command (another release of
the package, or one from before workers could be asked) is refused before OUT is touched,
naming the worker and what differs; workers that run the command's code (every other Dask test
of the suite) are not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip(
    "distributed", reason="the dask extra is not installed (pip install -e '.[dask]')"
)

from tests.helpers import ROOT, build_shards  # noqa: E402

pytestmark = pytest.mark.slow


def release(folder, change) -> str:
    """A copy of the packages a worker imports, changed by `change(folder)`: another release."""
    for package in ("pipeline", "schemas"):
        shutil.copytree(os.path.join(ROOT, package), folder / package)
    change(folder)
    return str(folder)


def newer(folder) -> None:
    with open(folder / "pipeline" / "build.py", "a") as f:
        f.write("# a line of another release\n")


def older(folder) -> None:
    os.remove(folder / "pipeline" / "files" / "code.py")  # from before workers were asked


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A scheduler in this process, on TCP, without workers: each test starts its own."""
    import dask
    from distributed import LocalCluster

    scratch = str(tmp_path_factory.mktemp("dask"))
    with (
        dask.config.set({"temporary-directory": scratch}),
        LocalCluster(
            n_workers=0, protocol="tcp", host="127.0.0.1", dashboard_address=None
        ) as local,
    ):
        yield local.scheduler_address


@pytest.fixture
def worker_of(scheduler, tmp_path):
    """Starts a worker process importing the code in a folder; stops it after the test."""
    from distributed import Client

    started = []

    def start(code: str) -> str:
        cmd = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler]
        cmd += ["--nthreads", "1", "--no-nanny", "--no-dashboard"]
        cmd += ["--local-directory", str(tmp_path / "worker")]
        env = {**os.environ, "PYTHONPATH": code}
        started.append(subprocess.Popen(cmd, cwd=code, env=env, stderr=subprocess.DEVNULL))
        with Client(scheduler, set_as_default=False) as client:
            client.wait_for_workers(1, timeout=60)
            [address] = client.scheduler_info()["workers"]
        return address

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)
    with Client(scheduler, set_as_default=False) as client:  # gone from the scheduler too
        deadline = time.monotonic() + 30
        while client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)


def test_a_worker_of_another_release_is_refused_naming_it(scheduler, worker_of, tmp_path):
    from pipeline.shell.cluster import cluster_problem

    worker = worker_of(release(tmp_path / "newer", newer))
    assert cluster_problem("DaskRunner", scheduler) == (
        f"--dask-address {scheduler}: 1 of the cluster's 1 workers run other code than this "
        f"command (first {worker}: bert-shards' own code, this command's first), and a set "
        "made by two versions would be the bytes of neither; install the same bert-shards "
        "and libraries on the workers as where the command runs"
    )
    out = tmp_path / "out"
    argv = ("--runner", "DaskRunner", "--dask-address", scheduler)
    with pytest.raises(SystemExit, match="1 of the cluster's 1 workers run other code"):
        build_shards(str(out), *argv)
    assert not out.exists()  # refused before OUT was made
    assert cluster_problem("DirectRunner", None) is None  # no cluster named: nothing asked


def test_a_worker_that_cannot_say_is_refused(scheduler, worker_of, tmp_path):
    from pipeline.shell.cluster import cluster_problem

    worker_of(release(tmp_path / "older", older))
    problem = cluster_problem("DaskRunner", scheduler)
    assert problem.startswith(
        f"--dask-address {scheduler}: the cluster's workers could not say which code they run ("
    )
    assert "No module named 'pipeline.files.code'" in problem
    assert problem.endswith("install this command's bert-shards on every worker")
