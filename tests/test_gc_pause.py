"""A command imports its modules without the cyclic garbage collector, then runs with it back on
and what the imports made frozen; a caller in the same process gets the collector as it was."""

from __future__ import annotations

import gc
import os

import pytest

from schemas import gc_pause, quick_exit


@pytest.fixture
def collector():
    """The collector on and nothing frozen, before and after the test, whatever it left; what
    the test process itself froze (tests/conftest.py) is frozen again afterwards."""
    suite_froze = gc.get_freeze_count() > 0
    gc.unfreeze()
    assert gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable()
    if suite_froze:
        gc.freeze()


def test_pause_resume_restore(collector, monkeypatch):
    freezes, freeze = [], gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(freeze()))
    with gc_pause.paused() as resume:
        assert not gc.isenabled()
        resume()
        assert gc.isenabled() and gc.get_freeze_count() > 0 and len(freezes) == 1
        # once per pause (counted by the calls: the frozen count itself drops whenever another
        # thread frees a frozen object)
        resume()
        assert len(freezes) == 1
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_collector_the_caller_stopped_stays_stopped(collector):
    gc.disable()
    with gc_pause.paused() as resume:
        resume()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    assert not gc.isenabled()


def test_a_caller_that_froze_objects_keeps_them_frozen(collector):
    gc.freeze()
    with gc_pause.paused() as resume:
        resume()
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_restore_without_resume(collector):
    with gc_pause.paused():
        pass
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_restored_when_the_block_raises(collector):
    with pytest.raises(RuntimeError), gc_pause.paused() as resume:
        resume()
        raise RuntimeError("the command failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_command_imports_paused_runs_with_them_frozen_and_ends_restored(collector, monkeypatch):
    """`bert-shards build` imports Beam with the collector stopped, reaches the CLI with it
    running and the imports frozen, and `main` returns with it running and nothing frozen."""
    import pipeline.runners.beam_import
    import pipeline.shell.cli
    from pipeline.shell.entry import main

    imported, reached = [], []
    monkeypatch.setattr(
        pipeline.runners.beam_import, "import_beam", lambda: imported.append(gc.isenabled())
    )
    monkeypatch.setattr(
        pipeline.shell.cli,
        "main",
        lambda argv: reached.append((gc.isenabled(), gc.get_freeze_count() > 0)),
    )
    try:
        assert main(["build", "--help"]) == 0
    finally:
        quick_exit._RETURNED.pop(os.getpid(), None)  # this process is pytest's, not a command's
    assert imported == [False]
    assert reached == [(True, True)]
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_command_that_fails_on_import_restores_the_collector(collector, monkeypatch):
    import pipeline.runners.beam_import
    from pipeline.shell.entry import main

    def fail():
        raise ImportError("no Beam here")

    monkeypatch.setattr(pipeline.runners.beam_import, "import_beam", fail)
    with pytest.raises(ImportError):
        main(["build", "--help"])
    assert gc.isenabled() and gc.get_freeze_count() == 0
