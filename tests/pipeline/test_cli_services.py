"""Runners' services and workers checked before any work starts: an address where nothing
listens (a job service, a worker pool, a Dask scheduler) and more local workers than the CPUs
can use are refused in one line, before OUT is claimed."""

from __future__ import annotations

import os

import pytest

from tests.helpers import SAMPLE_TEXT, refusal


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
def test_more_workers_than_four_per_cpu_are_refused_where_they_are_local(
    tmp_path, capsys, command, monkeypatch
):
    from pipeline.shell import configs

    monkeypatch.setattr(configs, "usable_cpus", lambda: 2)
    out = str(tmp_path / "out")
    assert refusal(capsys, "--out", out, "--workers", "9", command=command) == (
        "error: --workers 9: this machine gives the build 2 CPU(s), and its workers are "
        "CPU-bound processes, each with its own memory; give at most 8 (4 per CPU), or 0 for "
        "one per CPU"
    )
    on_dask = refusal(capsys, "--out", out, "--workers", "9", "--runner", "dask", command=command)
    assert on_dask.startswith("error: --workers 9: this machine gives the build 2 CPU(s)")
    assert not os.path.exists(out)  # Dask's local cluster: this machine's processes too


def test_workers_elsewhere_are_not_counted_against_this_machine(monkeypatch):
    from pipeline.shell import configs
    from pipeline.shell.cli import parsers
    from pipeline.shell.configs import refuse_too_many_workers

    monkeypatch.setattr(configs, "usable_cpus", lambda: 2)
    argv = ["build", "--input", SAMPLE_TEXT, "--out", "o", "--workers", "64"]
    remote = ["--runner", "dask", "--dask-address", "tcp://head:8786"]
    refuse_too_many_workers(parsers()[0].parse_args([*argv, *remote]))  # not this machine's
    with pytest.raises(ValueError):
        refuse_too_many_workers(parsers()[0].parse_args(argv))  # the local runner's: refused
    refuse_too_many_workers(parsers()[0].parse_args([*argv[:-1], "8"]))  # 4 per CPU: allowed


def test_a_few_workers_are_allowed_without_counting_the_cpus(monkeypatch):
    """Up to 4 workers suit any machine (it has a CPU), so the CPUs are not counted."""
    from pipeline.shell import configs
    from pipeline.shell.cli import parsers
    from pipeline.shell.configs import refuse_too_many_workers

    monkeypatch.setattr(configs, "usable_cpus", lambda: pytest.fail("the CPUs were counted"))
    argv = ["build", "--input", SAMPLE_TEXT, "--out", "o", "--workers"]
    for workers in ("0", "1", "4"):
        refuse_too_many_workers(parsers()[0].parse_args([*argv, workers]))


@pytest.fixture
def direct_connections(monkeypatch):
    """No proxy named in the environment, and the connection tries of `check_reachable` not
    paused."""
    from pipeline.runners.run import PROXY_VARIABLES
    from schemas import storage

    monkeypatch.setattr(storage, "CONNECT_PAUSE", 0.0)
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.mark.parametrize(
    "runner, flag, said",
    [
        (
            "PortableRunner",
            "--job_endpoint",
            "the job service at {0} took no connection in 3 tries (ConnectionRefusedError",
        ),
        (
            "DaskRunner",
            "--dask-address",
            "the Dask scheduler at {0} took no connection in 3 tries (ConnectionRefusedError",
        ),
    ],
)
def test_a_service_where_nothing_listens_is_refused_before_the_out_folder(
    tmp_path, capsys, direct_connections, runner, flag, said
):
    """Beam's portable runner would wait for its job service with OUT claimed, saying nothing;
    Dask's client would try its scheduler for 30 s."""
    from tests.gcs_emulator import free_port

    address = f"localhost:{free_port()}"
    out = tmp_path / "out"
    message = refusal(capsys, "--out", str(out), "--runner", runner, flag, address)
    start = f"error: {flag} {address}: {said.format(address)}"
    if runner == "PortableRunner":
        start = f"error: --runner {runner}: {flag} {address}: {said.format(address)}"
    assert message.startswith(start), message
    assert message.endswith(", or fix the address") and "\n" not in message
    assert not out.exists()


def test_a_worker_pool_where_nothing_listens_is_refused_before_the_out_folder(
    tmp_path, capsys, direct_connections
):
    """With a job service that answers (here: a socket that takes connections), the external
    worker pool's address is checked too: the job would fail as its first stage starts."""
    import socket

    from tests.gcs_emulator import free_port

    pool = f"localhost:{free_port()}"
    out = tmp_path / "out"
    with socket.create_server(("127.0.0.1", 0)) as service:
        endpoint = f"127.0.0.1:{service.getsockname()[1]}"
        argv = ["--runner", "PortableRunner", "--job_endpoint", endpoint]
        argv += ["--environment_type", "EXTERNAL", "--environment_config", pool]
        message = refusal(capsys, "--out", str(out), *argv)
    assert message.startswith(
        f"error: --runner PortableRunner: --environment_config {pool}: the worker pool at "
        f"{pool} took no connection in 3 tries (ConnectionRefusedError"
    ), message
    assert "worker_pool_main --service_port PORT), or fix the address" in message
    assert not out.exists()


def test_a_job_service_address_is_checked_only_where_it_can_be(monkeypatch, direct_connections):
    import socket

    from pipeline.runners.run import dask_scheduler_problem, job_service_problem
    from tests.gcs_emulator import free_port

    with socket.create_server(("127.0.0.1", 0)) as listening:
        assert job_service_problem(f"127.0.0.1:{listening.getsockname()[1]}") is None
    closed = f"127.0.0.1:{free_port()}"
    assert job_service_problem(closed).startswith(f"--job_endpoint {closed}: the job service")
    for unchecked in ("embed", "dns:///host:8099", "host"):  # Beam's own, a scheme, no port
        assert job_service_problem(unchecked) is None
    said = dask_scheduler_problem("dask", f"tcp://{closed}")  # Dask's scheme for TCP is checked
    assert said.startswith(f"--dask-address tcp://{closed}: the Dask scheduler at {closed} took")
    assert dask_scheduler_problem("DaskRunner", "inproc://10.0.0.1/1/2") is None
    assert dask_scheduler_problem("DirectRunner", closed) is None  # refused later, as unused
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # gRPC would go through it
    assert job_service_problem(closed) is None
