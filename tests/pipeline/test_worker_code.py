"""Workers that run other code than the command: a standing Dask cluster's (another release of
the package, or one from before workers could be asked) are refused before OUT is touched,
naming the worker and what differs; on any runner, a worker whose sources are not the
command's stops the build at its first read, in one line. Workers that run the command's code
(every other test of the suite) are not."""

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


def test_a_worker_whose_sources_are_not_the_commands_stops_at_its_first_read(tmp_path, monkeypatch):
    """The command's digest of its sources (here made another's) travels with the read step;
    the worker (this process, on the local runner) computes its own and refuses."""
    import pipeline.build
    from pipeline.files.code import OWN, code_record, same_sources

    same_sources(code_record()[OWN])  # its own: nothing said
    same_sources("")  # not asked
    other = {**code_record(), OWN: "f" * 64}
    monkeypatch.setattr(pipeline.build, "code_record", lambda: other)
    with pytest.raises(SystemExit) as e:
        build_shards(str(tmp_path / "out"), "--vocab-size", "300")
    mine = code_record()[OWN]
    assert str(e.value) == (
        f"error: a worker runs other bert-shards code than the command (its sources' digest "
        f"{mine[:12]}..., the command's ffffffffffff...), and a set made by two versions would "
        "be the bytes of neither; install the command's bert-shards on every worker"
    )
