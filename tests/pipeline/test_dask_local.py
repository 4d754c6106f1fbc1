"""Dask without a cluster of its own: the runner's names, and a command given no scheduler's
address, which starts a local cluster of worker processes for its run and stops it after."""

from __future__ import annotations

import os
import tempfile
from multiprocessing import resource_tracker

import pytest

pytest.importorskip(
    "distributed", reason="the dask extra is not installed (pip install -e '.[dask]')"
)

from apache_beam.options.pipeline_options import DirectOptions, StandardOptions  # noqa: E402

from pipeline.runners.dask_runner import DaskRunner, trim_threshold  # noqa: E402
from pipeline.runners.run import DASK_RUNNER, make_pipeline, pipeline_options  # noqa: E402
from tests.helpers import (  # noqa: E402
    SAMPLE_INPUT,
    build_process,
    children,
    file_digests,
    left_in_session,
)


def test_the_short_name_means_beams_dask_runner(tmp_path, monkeypatch):
    options = pipeline_options([], "DaskRunner", 3)
    assert options.view_as(StandardOptions).runner == DASK_RUNNER
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert pipeline_options([], "dask", 0).view_as(StandardOptions).runner == DASK_RUNNER
    # Beam's full path names it too, and each name gets this package's runner, not Beam's
    # (a pipeline made and never run keeps its temporary folder: it goes under tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in ("DaskRunner", "dask", "apache_beam.runners.dask.dask_runner.DaskRunner"):
        assert type(make_pipeline(pipeline_options([], name, 2)).runner) is DaskRunner


# A cluster of another module run before in this process may still hold the scheduler's
# default HTTP port.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")
def test_without_an_address_the_vocab_is_built_on_a_local_cluster(
    sample_shards, tmp_path, monkeypatch
):
    # `make shards RUNNER=DaskRunner WORKERS=2`: the runner starts two worker processes of its
    # own and stops them after; Dask's scratch folder goes under tmp_path here.
    import dask
    import distributed

    from pipeline.shell.cli import main

    trims = {}  # each worker process's MALLOC_TRIM_THRESHOLD_, asked while the cluster runs

    class Asked(distributed.LocalCluster):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with distributed.Client(self) as client:
                trims.update(client.run(trim_threshold))

    monkeypatch.setattr(distributed, "LocalCluster", Asked)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    out = str(tmp_path / "vocab")
    args = ["vocab", "--input", SAMPLE_INPUT, "--out", out, "--runner", "DaskRunner"]
    # Dask starts its processes through multiprocessing, whose resource tracker, once started,
    # lives as long as this process (it ends when its parent does): start it first, so that
    # the test passes alone as in the module.
    resource_tracker.ensure_running()
    before = set(children(os.getpid()))  # what this process had started before
    with dask.config.set({"temporary-directory": str(tmp_path / "scratch")}):
        assert main([*args, "--workers", "2"]) == 0
    assert set(children(os.getpid())) == before  # its processes ended with it
    # Its workers run with glibc's own trim threshold, as the local runner's (not Dask's
    # 65536), and Dask's setting did not leak into this process's environment either.
    assert list(trims.values()) == [None, None], trims
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ
    with open(f"{out}/vocab.txt") as built, open(f"{sample_shards}/vocab.txt") as local:
        assert built.read() == local.read()


@pytest.mark.slow
def test_a_build_on_its_own_local_cluster_runs_to_its_end_as_a_command(sample_shards, tmp_path):
    """`make shards RUNNER=DaskRunner WORKERS=2` as a user runs it: `python -m pipeline build`
    in a fresh process, which starts a cluster of two worker processes, trains the vocab and
    builds on it, stops the cluster and ends as every command ends (`pipeline/__main__.py`,
    without Python's teardown): status 0, the local runner's bytes, and no process of its
    session left shortly after it has ended."""
    out, log = str(tmp_path / "out"), tmp_path / "output.txt"
    args = ["--num-shards", "4", "--runner", "DaskRunner", "--workers", "2"]
    with open(log, "wb") as f:  # Dask's scratch folder goes to the build's temporary folder
        proc = build_process(out, *args, "--progress-seconds", "0", output=f)
        assert proc.wait(timeout=300) == 0, log.read_text()[-2000:]
    assert left_in_session(proc.pid) == []
    assert file_digests(out) == file_digests(sample_shards)
