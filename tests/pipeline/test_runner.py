"""The local runner: offline (no Prism download), every usable CPU, never multi_threading; and
a job that runs apart from the driver, cancelled when a signal stops the build."""

from __future__ import annotations

import signal

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState
from apache_beam.testing.util import assert_that, equal_to

from pipeline.runners.run import make_pipeline, pipeline_options
from schemas.interrupts import Interrupted
from tests.helpers import calls_to


def test_local_runs_use_multi_processing_on_every_usable_cpu(monkeypatch):
    """--workers 0: one worker per CPU the build may use (tests/pipeline/test_cpus.py), on the
    local runner and Dask's local cluster."""
    from pipeline.runners import run

    monkeypatch.setattr(run, "usable_cpus", lambda: 3)
    direct = pipeline_options([], "DirectRunner", 0).view_as(DirectOptions)
    assert direct.direct_num_workers == 3 and direct.direct_running_mode == "multi_processing"
    assert pipeline_options([], "DaskRunner", 0).view_as(DirectOptions).direct_num_workers == 3
    assert pipeline_options([], "DirectRunner", 2).view_as(DirectOptions).direct_num_workers == 2
    one = pipeline_options([], "DirectRunner", 1).view_as(DirectOptions)
    assert one.direct_running_mode == "in_memory"
    monkeypatch.setattr(run, "usable_cpus", lambda: 1)
    alone = pipeline_options([], "DirectRunner", 0).view_as(DirectOptions)
    assert (alone.direct_num_workers, alone.direct_running_mode) == (1, "in_memory")


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


class _Double(beam.DoFn):
    def process(self, x):
        yield 2 * x


def test_each_dofn_is_inspected_once_while_its_graph_is_built(monkeypatch):
    from apache_beam.transforms import userstate

    from pipeline.runners.beam_internals import memoize_dofn_specs

    inspected, asked = calls_to(monkeypatch, userstate, "get_dofn_specs"), []
    memoize_dofn_specs()
    memoized = userstate.get_dofn_specs

    def ask(dofn):  # what Beam calls, in front of the memo
        asked.append(dofn)
        return memoized(dofn)

    ask.memoized = True  # make_pipeline installs nothing over it
    monkeypatch.setattr(userstate, "get_dofn_specs", ask)
    double = _Double()
    p = make_pipeline(pipeline_options([], "DirectRunner", 1))
    with p:
        assert_that(p | beam.Create([1, 2]) | beam.ParDo(double), equal_to([2, 4]))
    assert asked.count(double) >= 3  # Beam asks again and again about the one DoFn
    assert inspected.count(double) == 1
    specs = memoized(double)
    specs[0].add("changed by a caller")
    assert memoized(double) == (set(), set())  # each caller gets its own sets


def test_a_functions_arguments_are_inspected_once_while_it_stays_the_same(monkeypatch):
    import functools

    from apache_beam.transforms import core

    from pipeline.runners.beam_internals import memoize_function_args

    inspected = calls_to(monkeypatch, core, "get_function_args_defaults")
    memoize_function_args()
    args_of = core.get_function_args_defaults

    def scale(x, factor=2, *rest, key=None):
        return x * factor

    assert args_of(scale) == (["x", "factor"], [2])
    got = args_of(scale)
    got[0].append("changed by a caller")
    assert args_of(scale) == (["x", "factor"], [2]) and len(inspected) == 1
    one, two = _Double(), _Double()  # methods bound to two objects: one answer, less `self`
    assert args_of(one.process) == args_of(two.process) == (["x"], [])
    assert len(inspected) == 2
    scale.__defaults__ = (3,)  # a changed function is inspected again
    assert args_of(scale) == (["x", "factor"], [3]) and len(inspected) == 3
    half = functools.partial(scale, factor=0.5)  # no plain function: every time, as before
    assert args_of(half) == args_of(half) == (["x"], [])
    assert len(inspected) == 5
    assert args_of(len) == (["obj"], []) and len(inspected) == 6
    assert core.get_function_arguments(one, "process") == (["x"], [])  # what DoFns ask
    assert len(inspected) == 6


def test_the_read_step_declares_the_type_beam_infers_and_is_not_traced(monkeypatch, tmp_path):
    """Beam infers an undeclared DoFn's output type by tracing `process` and what it calls
    through their bytecode as each graph is made; the read step declares what that finds."""
    import tempfile

    from apache_beam.typehints import trivial_inference, typehints

    # the graph is made, never run, so Beam keeps its temporary folder: under tmp_path
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    from pipeline.stages.read import ReadFile

    step = ReadFile("tmp", 1 << 20, False)
    assert beam.DoFn.infer_output_type(step, typehints.Any) == typehints.Any  # Beam's finding
    traced = calls_to(monkeypatch, trivial_inference, "infer_return_type")
    p = beam.Pipeline(runner=fn_runner.FnApiRunner())
    read = p | beam.Create([[("books", "a.txt")]]) | beam.ParDo(step)
    assert read.element_type == typehints.Any
    assert not [f for f in traced if getattr(f, "__func__", None) is ReadFile.process]


def test_a_dofn_that_is_no_dictionary_key_is_inspected_every_time(monkeypatch):
    import dataclasses

    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms import userstate

    from pipeline.runners.beam_internals import memoize_dofn_specs

    bag = beam.DoFn.StateParam(userstate.BagStateSpec("s", VarIntCoder()))

    @dataclasses.dataclass
    class Unhashable(beam.DoFn):  # eq without hash: no dictionary key
        factor: int = 2

        def process(self, x, state=bag):
            yield x

    inspected = []
    real = userstate.get_dofn_specs
    monkeypatch.setattr(userstate, "get_dofn_specs", lambda d: inspected.append(d) or real(d))
    memoize_dofn_specs()
    fn = Unhashable()
    states, timers = userstate.get_dofn_specs(fn)
    assert [s.name for s in states] == ["s"] and timers == set()
    assert userstate.get_dofn_specs(fn) == (states, timers)
    assert len(inspected) == 2


def test_the_options_make_each_view_once_and_share_its_values():
    import copy
    import pickle

    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = pipeline_options(["--direct_num_workers", "3"], "DirectRunner", 2)
    assert options.view_as(DirectOptions) is options.view_as(DirectOptions)
    options.view_as(StandardOptions).streaming = True
    assert options.view_as(StandardOptions).streaming is True
    assert PipelineOptions.view_as(options, StandardOptions).streaming is True  # a fresh view
    assert options.get_all_options()["streaming"] is True
    assert options.view_as(DirectOptions).direct_num_workers == 2  # the workers asked for
    for made in (copy.deepcopy(options), pickle.loads(pickle.dumps(options))):
        assert "_views" not in made.__dict__  # a copy makes its own views
        assert made.get_all_options() == options.get_all_options()
        made.view_as(StandardOptions).streaming = False
        assert options.view_as(StandardOptions).streaming is True


PERIODS = """
import os, sys
import apache_beam as beam
from pipeline.runners.run import pipeline_options, run_pipeline

class Period(beam.DoFn):
    def process(self, x):
        from apache_beam.runners.worker import statesampler
        with open(os.path.join(sys.argv[1], f"{os.getpid()}-{x}"), "w") as f:
            f.write(str(statesampler.get_current_tracker().sampling_period_ms))
        yield x

graph = lambda p: p | beam.Create(range(4)) | beam.Reshuffle() | beam.ParDo(Period())
run_pipeline(graph, pipeline_options([], "DirectRunner", 2), verbose=False)
print(os.getpid())
"""


@pytest.mark.slow
def test_the_forked_workers_bundles_sample_every_20_ms(tmp_path):
    """`run_pipeline` gives each bundle's sampling thread a 20 ms period before the workers
    fork, so a bundle ends without waiting out Beam's 200 ms (docs/runners.md): read in the
    bundles of a 2-worker graph run as a user runs it, in a fresh process."""
    import subprocess
    import sys

    from tests.helpers import ROOT

    done = subprocess.run(
        [sys.executable, "-c", PERIODS, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert sorted(name.split("-")[1] for name in seen) == ["0", "1", "2", "3"]
    workers = {name.split("-")[0] for name in seen}
    assert done.stdout.strip() not in workers and len(workers) == 2  # the forked workers
    assert set(seen.values()) == {"20"}


class JobElsewhere(PipelineRunner):
    """A runner whose job runs apart from this process (as on Beam's portable job API, Dask or
    Dataflow): `run` returns at once, and the wait is where a signal lands."""

    cancels: list[str] = []
    cancel_fails = False
    state = PipelineState.RUNNING

    def run_pipeline(self, pipeline, options):
        runner = type(self)

        class Running(PipelineResult):
            def wait_until_finish(self, duration=None):
                raise Interrupted(signal.SIGTERM)

            def cancel(self):
                runner.cancels.append("cancel")
                if runner.cancel_fails:
                    raise ConnectionError("the job service is gone")

        return Running(runner.state)


@pytest.mark.parametrize("cancel_fails", [False, True])
def test_a_signal_cancels_a_job_that_runs_apart(monkeypatch, capfd, cancel_fails):
    from pipeline.runners.run import run_pipeline

    monkeypatch.setattr(JobElsewhere, "cancels", [])
    monkeypatch.setattr(JobElsewhere, "cancel_fails", cancel_fails)
    options = pipeline_options([], f"{__name__}.JobElsewhere", 0)
    with pytest.raises(Interrupted):
        run_pipeline(lambda p: p | beam.Create([1]), options, verbose=False)
    assert JobElsewhere.cancels == ["cancel"]
    # a job that had ended when the signal came is not cancelled, nor said to be running
    monkeypatch.setattr(JobElsewhere, "state", PipelineState.DONE)
    with pytest.raises(Interrupted):
        run_pipeline(lambda p: p | beam.Create([1]), options, verbose=False)
    assert JobElsewhere.cancels == ["cancel"]
    said = capfd.readouterr().err
    warning = (
        "warning: the runner's job was not cancelled (ConnectionError: the job service is "
        "gone); it may still be running: cancel it with the runner's own tools before --resume\n"
    )
    assert said == (warning if cancel_fails else "")
