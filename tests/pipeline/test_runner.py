"""The local runner: offline (no Prism download), every core, never multi_threading."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from pipeline.runners.run import make_pipeline, pipeline_options


def test_local_runs_use_multi_processing_on_every_core(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    direct = pipeline_options([], "DirectRunner", 0).view_as(DirectOptions)
    assert direct.direct_num_workers == 3 and direct.direct_running_mode == "multi_processing"
    one = pipeline_options([], "DirectRunner", 1).view_as(DirectOptions)
    assert one.direct_running_mode == "in_memory"


def test_local_runs_never_start_prism(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the Prism runner (a download) was started")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse)
    p = make_pipeline(pipeline_options([], "DirectRunner", 1))
    assert isinstance(p.runner, fn_runner.FnApiRunner)
    with p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 2), equal_to([2, 4]))


def test_a_graph_refused_while_built_leaves_no_temporary_folder(monkeypatch, tmp_path):
    import tempfile

    import pytest

    from pipeline.runners.run import run_pipeline

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def refuse(p):
        raise ValueError("no input matches x*")

    with pytest.raises(SystemExit, match="^error: no input matches x\\*$"):
        run_pipeline(refuse, pipeline_options([], "DirectRunner", 1), verbose=False)
    assert list(tmp_path.iterdir()) == []
