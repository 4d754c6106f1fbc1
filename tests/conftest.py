"""Shared fixtures: a shard set built by the pipeline from the bundled sample corpus, synthetic
sets written by `schemas` alone, each exported (the sets that exports are read back from), and
a local GCS."""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import shutil
import sys

import pytest

from schemas import gc_pause
from tests.helpers import build_shards, built_once, expected_rows, heavy_files_first

# Inductor, for the tests that compile (`--compile` on the CPU), read before it is imported:
# its kernels are compiled without line tables (g++ -g1), which only a debugger or profiler of
# the kernels would read; the C++ it generates is the same, and g++ takes less per kernel
# (docs/benchmarks.md, "The test suite").
os.environ.setdefault("AOT_INDUCTOR_ENABLE_LINE_TABLES", "0")
# and it takes the vector instructions this CPU's flags name (/proc/cpuinfo) as usable instead
# of compiling and running a probe program for each: it picks the same instruction set and
# generates the same kernels, and g++ runs a few times less (docs/benchmarks.md, "The test
# suite"). Where the flags claim more than the compiler can build, a test that compiles fails.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


# In a process that runs tests, the cyclic garbage collector is stopped from here until the
# tests are collected, as `bert-shards` stops it while it imports (`schemas.gc_pause`):
# collecting imports torch, Beam and every test module, and rewrites each module's asserts, and
# full collections over what that leaves are a good part of a test process's collection
# (docs/benchmarks.md, "The test suite"). Then what exists is frozen and the collector runs
# again, for the tests; `pytest_unconfigure` restores it where the process goes on (a pytest
# run in one process; pytest-xdist's workers end).
_COLLECTING = contextlib.ExitStack()
_RESUME = []


def pytest_configure(config):
    """In a process that runs tests (not pytest-xdist's controller, which runs none): the
    collector paused (above), and Beam imported as `bert-shards` imports it, before any test
    module does: without the modules a local build does not use, which are imported when a
    path or runner asks for them, as in a command (`beam_import.import_beam`)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _RESUME.append(_COLLECTING.enter_context(gc_pause.paused()))
        from pipeline.runners.beam_import import import_beam

        import_beam()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    yield
    for resume in _RESUME:
        resume()


def pytest_collection_modifyitems(config, items):
    items[:] = heavy_files_first(items)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """In pytest-xdist's worker, once the session's fixtures are torn down: the garbage collected
    once, while pytest's hook for unraisable exceptions still records what a finalizer raises,
    and what survives frozen. pytest then collects twice more at its end (in
    `pytest_unconfigure` and its cleanup), as it always does; those walk only what was made
    since, instead of everything torch, Beam, Dask and the tests left alive, which took most
    of a second each (docs/benchmarks.md, "The test suite")."""
    if hasattr(session.config, "workerinput"):
        gc.collect()
        gc.freeze()


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):  # pytest-xdist's worker, not a pytest it started
        # it ends right after (`_end_a_test_process`): the collector is left as it is, its
        # frozen objects frozen (unfrozen, pytest's last collections would walk them again)
        atexit.register(_end_a_test_process)
    else:
        _COLLECTING.close()


def _end_a_test_process():
    """A test process (pytest-xdist's worker) has sent its reports, and pytest waits for it to
    end. It runs every other exit handler, as any exit does, and then ends without Python's
    teardown of its modules, as `bert-shards` ends (`schemas.quick_exit`): with torch, Beam and
    Dask loaded, that teardown takes longer than any of the suite's light files
    (docs/benchmarks.md, "The test suite")."""
    atexit.unregister(_end_a_test_process)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_in_pytests_folder(tmp_path_factory):
    """Every temporary file of the tests' processes and of the commands they start goes under
    this test process's pytest folder, which pytest prunes, not /tmp: a command a test stops
    with a signal can leave Beam's empty `beam-pipeline-temp*` folder (made when a pipeline is
    made, removed when it has run). Inductor's compiled kernels stay where they were cached
    (`/tmp/torchinductor_USER` unless set), so that a compiling test finds them warm."""
    import getpass
    import tempfile

    inductor = os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor)
    folder = str(tmp_path_factory.mktemp("tmp"))
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = folder, None
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


@pytest.fixture(scope="session")
def sample_shards(tmp_path_factory) -> str:
    """A finished shard set (4 shards) built from sample/ with default settings, once for all
    test processes; read-only: copy it (`copy_shards`) before changing anything."""

    def build(out: str) -> None:
        assert build_shards(out, "--num-shards", "4") == 0

    return built_once(tmp_path_factory, "sample", build)


@pytest.fixture(scope="session")
def synthetic_shards(tmp_path_factory) -> str:
    """A finished 4-shard synthetic set, about 3,000 rows; read-only (copy before changing)."""
    from schemas.synthetic import SyntheticConfig, write_synthetic_set

    cfg = SyntheticConfig(rows=3000, shards=4, seed=1)
    return built_once(tmp_path_factory, "synthetic", lambda out: write_synthetic_set(out, cfg))


@pytest.fixture(scope="session")
def wide_shards(tmp_path_factory) -> str:
    """A small synthetic set whose vocab needs uint32 ids (and 3-byte varints)."""
    from schemas.synthetic import SyntheticConfig, write_synthetic_set

    cfg = SyntheticConfig(rows=400, shards=2, vocab_size=70_000, seed=3)
    return built_once(tmp_path_factory, "wide", lambda out: write_synthetic_set(out, cfg))


@pytest.fixture(scope="module", params=["synthetic", "pipeline", "wide"])
def export_source(request) -> tuple[str, list[dict]]:
    """A set to export, and its rows as the exports must hold them (`expected_rows`)."""
    name = {"pipeline": "sample_shards", "synthetic": "synthetic_shards", "wide": "wide_shards"}
    out = request.getfixturevalue(name[request.param])
    return out, expected_rows(out)


@pytest.fixture
def copy_shards(sample_shards, tmp_path):
    def copy() -> str:
        dst = str(tmp_path / "copy")
        shutil.copytree(sample_shards, dst)
        return dst

    return copy


@pytest.fixture(scope="session")
def gcs_emulator():
    """A local GCS (tests/gcs_emulator.py) for the whole session, its environment set in this
    process, so Beam's filesystem, the storage client and every child process reach it alone."""
    from tests.gcs_emulator import GcsEmulator

    emulator = GcsEmulator().start()
    saved = {key: os.environ.get(key) for key in emulator.env}
    os.environ.update(emulator.env)
    yield emulator
    emulator.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def gcs_bucket(gcs_emulator, request) -> str:
    """A fresh, empty bucket for one test; returns its name. Counts are reset."""
    import hashlib

    name = "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    gcs_emulator.create_bucket(name)
    gcs_emulator.reset_stats()
    return name
