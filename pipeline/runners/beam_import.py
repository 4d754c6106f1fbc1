"""Beam's import, lighter: `import_beam` imports Beam without what a local build never uses,
and those parts come back when a path or a runner asks for them (docs/runners.md says what it
buys). Beam's objects it touches are in `beam_internals`' table, resolved from there.
"""

from __future__ import annotations

import importlib
import importlib.abc
import logging
import sys

from pipeline.runners.beam_internals import USED_ON_BEAMS_OBJECTS, require, resolve

# What `import apache_beam` brings that a local build does not use (what it costs:
# docs/runners.md), left out of Beam's import by `import_beam`:
# - BigQuery's sink, which `apache_beam/io/__init__.py` imports with Pub/Sub's and the
#   cross-language connectors in one `try` that takes an ImportError as "not installed";
# - the object stores' filesystems, each imported by `apache_beam/io/filesystems.py` in a `try`
#   of its own; `FileSystems.get_filesystem` imports one when a path of its scheme reaches it
#   (`filesystems_on_demand`), so gs:// works as before;
# - Dataflow's API client, which the Dataflow runner's module binds as `dataflow_api` (None when
#   it is missing);
# - apitools, the HTTP client of Google's older APIs (Dataflow's and BigQuery's), which Beam's
#   retry module imports in a `try` of its own only to tell apitools' HttpError apart (None
#   when it is missing); the local, Dask and portable runners and the GCS filesystem (on
#   google-cloud-storage) raise none;
# - MongoDB's client, whose `bson` `apache_beam/io/mongodbio.py` imports in a `try` that logs
#   a warning when it is missing: that module's logger is off while Beam imports.
# Before a runner other than the local and Dask ones is made, `load_deferred` imports the
# filesystems and binds the client and HttpError where Beam's own import would have.
SCHEME_FILESYSTEMS = {
    "gs": "apache_beam.io.gcp.gcsfilesystem",
    "s3": "apache_beam.io.aws.s3filesystem",
    "azfs": "apache_beam.io.azure.blobstoragefilesystem",
}
DATAFLOW_CLIENT = "google.cloud.dataflow"
APITOOLS = "apitools"
MONGODB_CLIENT = "bson"
SKIPPED_ON_IMPORT = (
    "apache_beam.io.gcp.bigquery",
    *SCHEME_FILESYSTEMS.values(),
    DATAFLOW_CLIENT,
    APITOOLS,
    MONGODB_CLIENT,
)
QUIET_ON_IMPORT = "apache_beam.io.mongodbio"  # its logger, which would say bson is missing
# What `load_deferred` binds: (the entry in `beam_internals`' table, the module it imports,
# the name it takes from that module, or None for the module itself)
DEFERRED_BINDINGS = (
    ("dataflow_api", DATAFLOW_CLIENT, None),
    ("http_error", "apitools.base.py.exceptions", "HttpError"),
)


class _SkippedOnImport(importlib.abc.MetaPathFinder):
    """On `sys.meta_path` while Beam is imported: `SKIPPED_ON_IMPORT` are not found."""

    def find_spec(self, name, path=None, target=None):
        if name in SKIPPED_ON_IMPORT:
            raise ModuleNotFoundError(f"{name} is not imported with Beam here", name=name)
        return None


def import_beam(module: str = "apache_beam") -> None:
    """Import Beam (`module`) without the connectors the build never uses (`SKIPPED_ON_IMPORT`);
    afterwards they import as usual when asked for.

    Every `bert-shards` command, `--help` included, starts with Beam's import, which takes
    less CPU this way (docs/runners.md). Without BigQuery's sink, a base install (Beam
    without its `gcp` extra) no longer prints `WARNING:root:apitools not found, and bigquery
    client libraries are not available despite the import not raising an ImportError.` first:
    that sink's client package logs it when `apitools` is missing. Call it before anything
    imports Beam: a process that has imported Beam keeps it as it is."""
    if module in sys.modules:
        return
    skipped = _SkippedOnImport()
    quiet = logging.getLogger(QUIET_ON_IMPORT)
    was_disabled, quiet.disabled = quiet.disabled, True
    sys.meta_path.insert(0, skipped)
    try:
        importlib.import_module(module)
    finally:
        sys.meta_path.remove(skipped)
        quiet.disabled = was_disabled
    if module == "apache_beam":
        filesystems_on_demand()


def load_filesystem(scheme: str | None) -> None:
    """Import the filesystem of `scheme` (gs, s3, azfs) that `import_beam` left out, if it is
    installed; Beam's `get_filesystem` then finds it, or says what to install."""
    module = SCHEME_FILESYSTEMS.get(scheme or "")
    if module is None or module in sys.modules:
        return
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:  # its extra is not installed: as Beam's own `try`
        pass
    except ImportError as e:  # as Beam's own `try`, which logs it and goes on
        import logging

        logging.getLogger(__name__).warning("Failed to import %s: %s", module, e)


def filesystems_on_demand() -> None:
    """Make `FileSystems.get_filesystem`, through which every Beam filesystem call of a path
    goes, import the filesystem of the path's scheme first (`load_filesystem`). Idempotent; it
    applies to this process and to the workers forked from it afterwards."""
    require("get_filesystem", "get_scheme")
    filesystems = resolve(*USED_ON_BEAMS_OBJECTS["filesystems"])
    real = filesystems.get_filesystem
    if getattr(real, "on_demand", False):
        return

    def get_filesystem(path):
        load_filesystem(filesystems.get_scheme(path))
        return real(path)

    get_filesystem.on_demand = True
    get_filesystem.__wrapped__ = real
    filesystems.get_filesystem = staticmethod(get_filesystem)


def load_deferred() -> None:
    """What `import_beam` left out that a runner other than the local and Dask ones may use:
    every object store's filesystem (Dataflow hands the names of the filesystems imported to its
    workers), Dataflow's API client and apitools' HttpError, each bound where Beam's import
    would have bound it. Call it before such a runner is made; idempotent."""
    for scheme in SCHEME_FILESYSTEMS:
        load_filesystem(scheme)
    for entry, module, attribute in DEFERRED_BINDINGS:
        owner, name = USED_ON_BEAMS_OBJECTS[entry]
        if resolve(owner, name) is not None:  # bound by Beam's import, or here before
            continue
        try:
            found = importlib.import_module(module)
        except ImportError:  # not installed: None, as Beam's own import leaves it
            continue
        setattr(sys.modules[owner], name, getattr(found, attribute) if attribute else found)
