"""Beam's internals the build uses: every one resolves on the installed Beam, a missing one is
one line naming it and the supported version, and none is used outside
`pipeline.runners.beam_internals`' table."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
import tomllib

from pipeline.runners import beam_import, beam_internals
from pipeline.runners.beam_internals import (
    INTERNALS,
    SUPPORTED_BEAM,
    USED_ON_BEAMS_OBJECTS,
    MissingInternal,
    resolve,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"
TABLE_MODULE = PACKAGE / "runners" / "beam_internals.py"

# Beam's modules that are its runners' machinery, not its API: imported only by the table.
INTERNAL_MODULES = (
    "apache_beam.runners",
    "apache_beam.portability",
    "apache_beam.internal",
    "apache_beam.transforms.sideinputs",
)

# Private attributes the package reads on objects that are not Beam's: (module, attribute).
NOT_BEAMS = {
    ("pipeline/core/sentences.py", "_params"): "NLTK's PunktTokenizer",
    ("pipeline/core/punkt_fast.py", "_params"): "NLTK's PunktTokenizer",
    ("pipeline/core/punkt_fast.py", "_lang_vars"): "NLTK's PunktTokenizer",
    ("pipeline/core/punkt_fast.py", "_Token"): "NLTK's PunktTokenizer",
    ("pipeline/core/punkt_fast.py", "_rx"): "NLTK's compiled Punkt regexes",
    ("pipeline/core/punkt_fast.py", "_word_tokenizer_re"): "NLTK's PunktLanguageVars",
    ("pipeline/core/punkt_fast.py", "_RE_ELLIPSIS"): "NLTK's PunktToken",
    ("pipeline/core/punkt_fast.py", "_RE_NUMERIC"): "NLTK's PunktToken",
    ("pipeline/core/punkt_fast.py", "_RE_INITIAL"): "NLTK's PunktToken",
    ("pipeline/core/punkt_fast.py", "_ORTHO_LC"): "NLTK's punkt module",
    ("pipeline/core/punkt_fast.py", "_ORTHO_UC"): "NLTK's punkt module",
    ("pipeline/core/punkt_fast.py", "_ORTHO_MID_UC"): "NLTK's punkt module",
    ("pipeline/core/punkt_fast.py", "_ORTHO_BEG_LC"): "NLTK's punkt module",
    ("pipeline/core/instances.py", "_fields"): "a namedtuple's fields (its API)",
    ("pipeline/files/gcs.py", "_bucket_metadata_cache"): "google-cloud-storage's Client",
    ("pipeline/runners/local_workers.py", "_exit"): "os._exit (the standard library's API)",
    ("pipeline/runners/options.py", "_actions"): "argparse's parser",
    ("pipeline/runners/options.py", "_option_string_actions"): "argparse's parser",
    ("pipeline/shell/cli.py", "_actions"): "argparse's parser",
}


def all_entries() -> dict[str, tuple[str, str]]:
    return {**INTERNALS, **USED_ON_BEAMS_OBJECTS}


@pytest.mark.parametrize("name", sorted(all_entries()))
def test_every_internal_resolves_on_the_installed_beam(name):
    module, path = all_entries()[name]
    if module.startswith("apache_beam.runners.dask"):
        pytest.importorskip("distributed", reason="the dask extra is not installed")
    if name == "dataflow_api":  # None while `import_beam` has deferred Dataflow's client
        pytest.importorskip("google.cloud.dataflow", reason="the gcp extra is not installed")
        beam_import.load_deferred()
    assert resolve(module, path) is not None, f"{module}.{path}"


def test_the_supported_version_is_the_pin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"apache-beam=={SUPPORTED_BEAM}" in project["dependencies"]


def test_a_missing_name_is_one_line_naming_it_and_the_supported_version(monkeypatch):
    import apache_beam.runners.common as common

    monkeypatch.delattr(common, "_OutputHandler")
    monkeypatch.setattr("apache_beam.version.__version__", "9.9.9")
    with pytest.raises(MissingInternal) as caught:
        resolve(*INTERNALS["OutputHandler"])
    line = str(caught.value)
    assert line == (
        "error: the installed Beam (9.9.9) has no apache_beam.runners.common._OutputHandler, "
        "which the build's runners use; install the supported version: "
        f"pip install 'apache-beam=={SUPPORTED_BEAM}'"
    )
    assert isinstance(caught.value, SystemExit)


def test_a_missing_method_an_override_needs_stops_the_module(monkeypatch):
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    monkeypatch.delattr(fn_runner.FnApiRunner, "run_via_runner_api")
    with pytest.raises(MissingInternal, match=r"FnApiRunner\.run_via_runner_api, which"):
        beam_internals.require("run_via_runner_api")


def test_a_missing_beam_module_is_named_and_other_packages_are_left_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam.runners.dask.overrides", None)
    with pytest.raises(MissingInternal, match=r"no apache_beam\.runners\.dask\.overrides\._Res"):
        resolve(*INTERNALS["Reshuffle"])
    with pytest.raises(ModuleNotFoundError):  # dask itself missing: the extra's own message
        resolve("no_such_package_here", "x")
    with pytest.raises(AttributeError):
        _ = beam_internals.NotInTheTable


def test_beams_step_text_is_what_the_failure_line_strips():
    from pipeline.runners.failures import failure_line
    from pipeline.runners.run import make_pipeline, pipeline_options

    def refuse(x):
        raise ValueError(f"no good: {x}")

    with pytest.raises(Exception) as caught:
        with make_pipeline(pipeline_options([], "DirectRunner", 1)) as p:
            _ = p | beam.Create([7]) | "Check" >> beam.Map(refuse)
    assert re.search(f"no good: 7{beam_internals.STEP_SUFFIX}", str(caught.value))
    assert failure_line(caught.value) == "no good: 7"


def private_uses(path: Path) -> list[tuple[int, str]]:
    """(line, what) for each use in `path` of a private name or internal module of Beam's, and
    each private attribute read on anything but self or cls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if internal(a.name)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apache_beam"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if a.name.startswith("_") or internal(full):
                    found.append((node.lineno, full))
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append((node.lineno, f"._{node.attr.lstrip('_')}"))
    return found


def internal(module: str) -> bool:
    return any(module == m or module.startswith(f"{m}.") for m in INTERNAL_MODULES)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_beams_internals_are_used_only_through_the_table():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == TABLE_MODULE:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for line, what in private_uses(path):
            if what.startswith("._") and (rel, what[1:]) in NOT_BEAMS:
                continue
            problems.append(f"{rel}:{line}: {what}")
    assert not problems, (
        "Beam internals used outside pipeline/runners/beam_internals.py (add each to its "
        "INTERNALS table and import it from there; a private name of another library goes in "
        "this test's NOT_BEAMS): " + "; ".join(problems)
    )


def test_every_name_in_the_table_is_used():
    code = "\n".join(p.read_text() for p in sorted(PACKAGE.rglob("*.py")) if p != TABLE_MODULE)
    unused = [name for name in INTERNALS if not re.search(rf"\b{name}\b", code)]
    assert not unused, f"in INTERNALS but used nowhere (remove them): {unused}"


@pytest.fixture
def beams_sampler(monkeypatch):
    """The bundle processor's `statesampler` module, its class restored after the test."""
    from apache_beam.runners.worker import bundle_processor

    module = bundle_processor.statesampler
    monkeypatch.setattr(module, "StateSampler", module.StateSampler)
    return module


def test_each_bundles_sampler_wakes_every_20_ms(beams_sampler):
    """A bundle's end joins its sampling thread, which sleeps up to its period between wakes:
    200 ms by Beam's default, 20 after `quick_sampler_stop` (docs/runners.md)."""
    from apache_beam.utils.counters import CounterFactory

    beam_internals.quick_sampler_stop()
    quick = beams_sampler.StateSampler
    beam_internals.quick_sampler_stop()  # once is enough
    assert beams_sampler.StateSampler is quick and quick.quick_stop
    assert quick("stage", CounterFactory()).sampling_period_ms == 20
    assert quick("stage", CounterFactory(), sampling_period_ms=7).sampling_period_ms == 7
    beam_default = quick.__bases__[0]("stage", CounterFactory()).sampling_period_ms
    assert beam_default == 200


def test_a_stranded_sampler_of_the_quick_class_is_stopped(beams_sampler):
    import threading

    from apache_beam.runners.worker import statesampler_fast
    from apache_beam.utils.counters import CounterFactory

    beam_internals.quick_sampler_stop()
    before = set(threading.enumerate())
    sampler = beams_sampler.StateSampler("stage", CounterFactory())
    statesampler_fast.StateSampler.start(sampler)  # as an interrupt leaves it
    (thread,) = set(threading.enumerate()) - before
    beam_internals.stop_stranded_samplers()
    assert sampler.finished and not thread.is_alive()


@pytest.fixture
def beams_channel(monkeypatch):
    """Beam's data channel class, its `_receiving_queue` restored after the test."""
    from apache_beam.runners.worker import data_plane

    channel = data_plane._GrpcDataChannel
    monkeypatch.setattr(channel, "_receiving_queue", channel._receiving_queue)
    return channel


def test_a_failed_bundle_is_noticed_within_50_ms(beams_channel, monkeypatch):
    """The runner waits on a bundle's queue of elements a second at a time, asking between
    waits whether the bundle has failed: 50 ms at a time after `quick_failure_poll`
    (docs/runners.md); everything else the queue does is Beam's."""
    import queue

    beam_internals.quick_failure_poll()
    wrapped = beams_channel._receiving_queue
    beam_internals.quick_failure_poll()  # once is enough
    assert beams_channel._receiving_queue is wrapped and wrapped.quick_poll

    channel = beams_channel()
    received = channel._receiving_queue("bundle")
    assert isinstance(received, beam_internals.QuickPollQueue)
    received.put("element", 7)  # Beam's own queue behind it: put, sizes, get
    assert received.byte_size() == 7 and received.get(timeout=1) == "element"

    waits, asked = [], []

    class Recorder:
        def get(self, *, block=True, timeout=None):
            waits.append(timeout)
            raise queue.Empty

    quick = beam_internals.QuickPollQueue(Recorder())
    for timeout in (1, 5, None):
        with pytest.raises(queue.Empty):
            quick.get(timeout=timeout)
    assert waits == [beam_internals.FAILURE_POLL_SECONDS, 5, None] == [0.05, 5, None]

    def asking(self, *, block=True, timeout=None):
        asked.append(timeout)
        raise queue.Empty

    # Beam's reader of a bundle's outputs asks for the one second this shortens, then asks
    # whether the bundle has failed
    monkeypatch.setattr(beam_internals.QuickPollQueue, "get", asking)
    assert list(channel.input_elements("other", ["t"], abort_callback=lambda: True)) == []
    assert asked == [1]


# A base install (Beam without its `gcp` extra) has no apitools: blocked here, as it is missing
# there, in a fresh interpreter that then runs the CLI's entry point.
WITHOUT_APITOOLS = """
import io, logging, sys

class NoApitools:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "apitools":
            raise ImportError(f"no module named {name!r}")

sys.meta_path.insert(0, NoApitools())
from pipeline.shell.entry import main

try:
    main(["--help"])
except SystemExit as e:
    assert e.code == 0, e.code
print("root handlers:", logging.getLogger().handlers, file=sys.stderr)
# Beam's BigQuery sink, asked for now, still imports, and its client package logs the warning
seen = io.StringIO()
logging.getLogger().addHandler(logging.StreamHandler(seen))
import apache_beam.io.gcp.bigquery
print("asked for:", seen.getvalue().strip(), file=sys.stderr)
"""


def run_python(script: str) -> subprocess.CompletedProcess:
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    return ran


def test_a_base_install_prints_no_warning_of_beams():
    ran = run_python(WITHOUT_APITOOLS)
    assert ran.stdout.startswith("usage: bert-shards"), ran.stdout
    assert ran.stderr.splitlines() == [
        "root handlers: []",  # nothing was logged: no basicConfig handler either
        "asked for: apitools not found, and bigquery client libraries are not available "
        "despite the import not raising an ImportError.",
    ], ran.stderr


# The CLI's import of Beam in a fresh interpreter, then what a local build, gs:// and Dataflow
# need of it
SKIPPED = """
import sys
from pipeline.runners.beam_import import SKIPPED_ON_IMPORT, _SkippedOnImport, import_beam

def imported():
    names = (*SKIPPED_ON_IMPORT, "apache_beam.io.gcp.pubsub")
    return [name for name in names if name in sys.modules]

import_beam()
print(imported())
print(any(isinstance(f, _SkippedOnImport) for f in sys.meta_path))
import apache_beam as beam
from pipeline.runners.run import make_pipeline, pipeline_options
with make_pipeline(pipeline_options([], "DirectRunner", 1)) as p:
    _ = p | beam.Create(["/tmp/a", "gs://bucket/object"]) | beam.Map(len)
print(imported())
from apache_beam.io.filesystems import FileSystems
gcs = FileSystems.get_filesystem("gs://bucket/object")
print(type(gcs).__name__, FileSystems.join("gs://b", "o"))
print(imported())
from apache_beam.runners.dataflow import dataflow_runner
print(dataflow_runner.dataflow_api)
from tests.helpers import dataflow_dry_run
transforms = dataflow_dry_run()[0].proto_pipeline.components.transforms.values()
print(any(t.unique_name == "WriteShards" for t in transforms))
print(dataflow_runner.dataflow_api is sys.modules["google.cloud.dataflow"])
from apache_beam.utils import retry
from apitools.base.py.exceptions import HttpError
print(retry.HttpError is HttpError)
from apache_beam.io.gcp.bigquery import WriteToBigQuery
print(WriteToBigQuery.__name__)
"""


def test_the_cli_imports_beam_without_what_no_command_uses():
    """Beam's BigQuery and Pub/Sub connectors, the object stores' filesystems, Dataflow's
    client, apitools and MongoDB's client are not imported, nor by a local graph, and nothing
    is logged; gs:// is Beam's GCS filesystem when a path asks for it, a Dataflow job builds
    with the client and apitools' HttpError bound where Beam binds them, and the connectors
    import when asked for."""
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    gcs = "apache_beam.io.gcp.gcsfilesystem"
    ran = run_python(SKIPPED)
    assert ran.stdout.splitlines() == [
        "[]",
        "False",  # the finder is gone once Beam is imported
        "[]",  # a local graph ran without them
        "GCSFileSystem gs://b/o",
        f"['{gcs}']",  # gs:// asked for its filesystem, and only that
        "None",  # Dataflow's client is not bound ...
        "True",
        "True",  # ... until a Dataflow graph is made
        "True",  # and apitools' HttpError with it, where Beam's retry module looks for it
        "WriteToBigQuery",
    ]
    assert "bson" not in ran.stderr, ran.stderr  # Beam's "Could not find a compatible bson"


def test_filesystems_on_demand_wraps_once_and_leaves_other_schemes_to_beam():
    from apache_beam.io.filesystems import FileSystems

    beam_import.filesystems_on_demand()
    wrapped = FileSystems.get_filesystem
    beam_import.filesystems_on_demand()  # again: the same wrapper, not a second one
    assert FileSystems.get_filesystem is wrapped and wrapped.on_demand
    assert not getattr(wrapped.__wrapped__, "on_demand", False)
    assert type(FileSystems.get_filesystem("/tmp/x")).__name__ == "LocalFileSystem"
    with pytest.raises(ValueError, match="Unable to get filesystem"):
        FileSystems.get_filesystem("nosuchscheme://bucket/object")


def test_a_filesystem_missing_or_broken_is_left_to_beam_as_its_own_import_does(
    tmp_path, monkeypatch, caplog
):
    (tmp_path / "broken_store_fs.py").write_text("raise ImportError('its client is too old')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    schemes = {"absent": "no_such_store_fs", "broken": "broken_store_fs"}
    monkeypatch.setattr(beam_import, "SCHEME_FILESYSTEMS", schemes)
    for name in schemes.values():
        monkeypatch.delitem(sys.modules, name, raising=False)
    with caplog.at_level("WARNING"):
        beam_import.load_filesystem("absent")  # not installed: nothing said, as Beam does
        assert caplog.messages == []
        beam_import.load_filesystem("broken")
    assert caplog.messages == ["Failed to import broken_store_fs: its client is too old"]
    beam_import.load_filesystem(None)  # a local path has no scheme
    beam_import.load_filesystem("file")


def test_import_beam_skips_only_for_its_import(tmp_path, monkeypatch):
    (tmp_path / "skipped_one.py").write_text("VALUE = 1\n")
    (tmp_path / "wraps.py").write_text(
        "try:\n    import skipped_one\nexcept ImportError:\n    skipped_one = None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("wraps", "skipped_one"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(beam_import, "SKIPPED_ON_IMPORT", ("skipped_one",))
    finders = list(sys.meta_path)

    beam_import.import_beam("wraps")
    assert sys.modules["wraps"].skipped_one is None and "skipped_one" not in sys.modules
    assert sys.meta_path == finders
    import skipped_one  # noqa: PLC0415  (as usual, once Beam is imported)

    assert skipped_one.VALUE == 1
    beam_import.import_beam("wraps")  # imported already: nothing runs again
    assert sys.modules["wraps"].skipped_one is None
