"""A command starts without the cyclic garbage collector; its graph runs with the collector back
on and what the start made frozen; a caller in the same process gets the collector as it was."""

from __future__ import annotations

import gc
import os

import pytest

from schemas import gc_pause, quick_exit


@pytest.fixture
def collector():
    """The collector on and nothing frozen, before and after the test, whatever it left."""
    assert gc.isenabled() and gc.get_freeze_count() == 0
    yield
    while gc_pause._paused:
        gc_pause.restore()
    gc.unfreeze()
    gc.enable()


def test_pause_resume_restore(collector):
    gc_pause.pause()
    assert not gc.isenabled()
    gc_pause.resume()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()
    gc_pause.resume()  # once per pause
    assert gc.get_freeze_count() == frozen
    gc_pause.restore()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_collector_the_caller_stopped_stays_stopped(collector):
    gc.disable()
    gc_pause.pause()
    gc_pause.resume()
    assert not gc.isenabled() and gc.get_freeze_count() == 0
    gc_pause.restore()
    assert not gc.isenabled()


def test_restore_without_resume_and_without_pause(collector):
    gc_pause.pause()
    gc_pause.restore()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc_pause.restore()  # nothing paused: nothing to undo
    gc_pause.resume()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_command_starts_paused_and_ends_restored(collector, monkeypatch):
    """`bert-shards build` reaches the CLI with the collector stopped; `main` returns with it
    running and nothing frozen."""
    import pipeline.shell.cli
    from pipeline.shell.entry import main

    seen = []
    monkeypatch.setattr(pipeline.shell.cli, "main", lambda argv: seen.append(gc.isenabled()))
    try:
        assert main(["build", "--help"]) == 0
    finally:
        quick_exit._RETURNED.pop(os.getpid(), None)  # this process is pytest's, not a command's
    assert seen == [False]
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_graph_runs_with_the_collector_on_and_the_start_frozen(collector, tmp_path):
    import apache_beam as beam

    from pipeline.runners.run import pipeline_options, run_pipeline

    seen = str(tmp_path / "seen")

    def look(x):  # the runner runs a copy of it: what it sees goes through a file
        with open(seen, "w") as f:
            f.write(f"{gc.isenabled()} {gc.get_freeze_count()}")
        return x

    gc_pause.pause()
    graph = lambda p: p | beam.Create([1]) | beam.Map(look)  # noqa: E731
    run_pipeline(graph, pipeline_options([], "DirectRunner", 1), verbose=False)
    with open(seen) as f:
        enabled, frozen = f.read().split()
    assert enabled == "True" and int(frozen) > 0
    gc_pause.restore()
    assert gc.isenabled() and gc.get_freeze_count() == 0
