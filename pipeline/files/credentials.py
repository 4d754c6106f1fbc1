"""Whose process met a gs:// problem, and the line for gs:// without credentials: the driver
(which checks the store with its own credentials before any work) and the local workers it
forks, a Dask worker, or another runner's own worker (a portable runner's SDK harness, Flink's,
Spark's, Dataflow's), each told what to give whom."""

from __future__ import annotations

import os
import sys

# Set in the driver (the command, or a graph built with `pipeline.build.build`), and so in the
# local workers it forks; unset in a runner's own workers (a portable runner's SDK harness,
# Flink's, Spark's, Dataflow's), which import this module afresh
_DRIVERS_OWN = False


def mark_driver() -> None:
    """This process is a build's driver: a gs:// problem met here or in a worker forked from
    it is the driver's own, said without naming a runner's worker."""
    global _DRIVERS_OWN
    _DRIVERS_OWN = True


def no_credentials(said: str, worker: str | None = None, elsewhere: str | None = None) -> str:
    """The line for gs:// without credentials. On a Dask worker (`worker`, its address) or
    another runner's worker (`elsewhere`, where it runs) it names it: the driver had them,
    since it checked the store before any work, and workers the runner started need their
    own."""
    if worker is not None:
        return (
            f"gs:// needs Google Cloud credentials on the Dask worker {worker} ({said}): the "
            "driver has them, but the cluster's workers need their own; run `gcloud auth "
            "application-default login` on that worker's host, or start the workers with "
            "GOOGLE_APPLICATION_CREDENTIALS set to a key file there"
        )
    if elsewhere is not None:
        return (
            f"gs:// needs Google Cloud credentials on the runner's worker on {elsewhere} "
            f"({said}): the driver has them, but the runner's workers need their own; run "
            "`gcloud auth application-default login` on that host, or start the runner's "
            "workers with GOOGLE_APPLICATION_CREDENTIALS set to a key file there"
        )
    return (
        f"gs:// needs Google Cloud credentials ({said}): run `gcloud auth "
        "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file"
    )


def runner_worker() -> str | None:
    """Where this process runs ("host H, process P") when it is a runner's own worker, not
    the driver nor a worker forked from it (`mark_driver`); else None."""
    if _DRIVERS_OWN:
        return None
    import socket

    return f"host {socket.gethostname()}, process {os.getpid()}"


def dask_worker() -> str | None:
    """The address of the Dask worker this runs in, or None outside one (`distributed` not
    imported, or not inside a task)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        return distributed.get_worker().address
    except ValueError:  # not inside a task of a worker
        return None
