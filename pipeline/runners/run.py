"""Choosing the runner: the local DirectRunner runs offline on every core; `DaskRunner` runs on
a Dask cluster (`pipeline.runners.dask_runner`); others pass through.

Beam 2.77's DirectRunner first tries the Prism runner, which it downloads; offline that fails
and falls back. Local runs therefore go straight to the FnApiRunner that the DirectRunner falls
back to, in `multi_processing` mode (never `multi_threading`, which lost grouped records in
repeated trials on this Beam version), whose worker processes are forked from the driver
where that is safe (`pipeline.runners.local_workers`).
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, nullcontext

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    TestOptions,
)

from pipeline.runners.cpus import usable_cpus
from pipeline.runners.failures import (
    WorkerLost,
    cancel_job,
    failure_line,
    interrupt_inside,
    shortened,
)

LOCAL_RUNNERS = {"directrunner", "direct", "fnapirunner", "local"}
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DASK_RUNNERS = {"daskrunner", "dask", DASK_RUNNER.lower()}


class BuildOptions(PipelineOptions):
    """Beam's options, each view made once: `view_as(cls)` returns the view it made before.

    Beam builds a view for each question it asks of the options while it constructs a graph
    (`TypeOptions` for every type check, `StandardOptions` for every applied transform), and
    each view parses the flags again with a parser holding every option Beam knows (the counts
    are in docs/benchmarks.md, "Graph construction"). A view holds nothing of its own: its
    values live in the options' shared `_all_options`, which a view made later would read and
    write alike, so one view per class answers every question the same. The views are not copied
    or pickled with the options (Beam deep-copies them into its Pipeline); a copy makes its own."""

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views", {})  # past __setattr__, which allows options
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


def pipeline_options(beam_args: list[str], runner: str, workers: int) -> PipelineOptions:
    options = BuildOptions(beam_args)
    runner = DASK_RUNNER if runner.lower() in DASK_RUNNERS else runner
    options.view_as(StandardOptions).runner = runner
    direct = options.view_as(DirectOptions)
    if runner.lower() in LOCAL_RUNNERS | DASK_RUNNERS:  # Dask's: its local cluster's, if started
        direct.direct_num_workers = workers or usable_cpus()
    if runner.lower() in LOCAL_RUNNERS:
        mode = "multi_processing" if direct.direct_num_workers > 1 else "in_memory"
        direct.direct_running_mode = mode
    return options


def runner_problem(
    options: PipelineOptions, cloud_check: Callable[[], str | None] | None = None
) -> str | None:
    """None when Beam can make the runner the options name and finds the options complete for
    it (Dataflow's project, region and temp_location, say); else one line saying what is wrong.
    Asked before any work starts: Beam itself finds out only as the graph is made, after the
    build has claimed its output folder. Where Beam's check would ask Google Cloud
    (`asks_google_cloud`), `cloud_check` is asked first, and its problem (no credentials, no
    network) is the answer: Beam would retry for minutes, saying nothing."""
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    if runner.lower() in LOCAL_RUNNERS | DASK_RUNNERS:
        return None
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

    from pipeline.runners.beam_import import load_deferred
    from pipeline.runners.beam_internals import create_runner

    load_deferred()
    try:
        made = create_runner(runner)
    except ImportError as e:  # the path names no module, or a runner Beam knows lacks its extra
        if isinstance(e, ModuleNotFoundError) and runner.startswith(f"{e.name}."):
            return unknown_runner(runner)
        return f"--runner {runner}: Beam cannot make it here ({e}); see docs/runners.md"
    except (ValueError, AttributeError):
        return unknown_runner(runner)
    endpoint = options.view_as(PortableOptions).job_endpoint
    if type(made).__name__ == "PortableRunner" and not endpoint:
        return (  # else Beam says so once the build has claimed OUT
            f"--runner {runner}: give --job_endpoint HOST:PORT, the job service of a running "
            "runner; see docs/runners.md"
        )
    if endpoint and any(c.__name__ == "PortableRunner" for c in type(made).__mro__):
        problem = job_service_problem(endpoint)  # else Beam waits for it with OUT claimed
        problem = problem or worker_pool_problem(options.view_as(PortableOptions))
        if problem:
            return f"--runner {runner}: {problem}"
    validator = PipelineOptionsValidator(options, made)
    if cloud_check is not None and asks_google_cloud(options, validator):
        problem = cloud_check()
        if problem:
            return f"--runner {runner}: its options are checked in Google Cloud, and {problem}"
    try:
        errors = validator.validate()
    except Exception as e:  # it may ask the cloud, say for a default bucket
        last = next((ln for ln in reversed(str(e).splitlines()) if ln.strip()), type(e).__name__)
        return f"--runner {runner}: Beam could not check its options: {shortened(last)}"
    if errors:
        said = "; ".join(e.strip().rstrip(".") for e in errors)
        return f"--runner {runner}: {said}; see docs/runners.md for what it needs"
    return None


PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy", "all_proxy")


def service_problem(flag: str, address: str, service: str, hint: str) -> str | None:
    """None when `address`, HOST:PORT or tcp://HOST:PORT, takes a TCP connection; None too for
    an address this does not check (another scheme, Beam's `embed`, no port) or where a proxy
    is named in the environment (a connection may go through it); else the line saying that
    nothing answered there, ending with `hint`. The runner would wait for the service, saying
    nothing or for half a minute, with the build's folder claimed."""
    from schemas.storage import check_reachable
    from schemas.storage_errors import Unreachable

    scheme, sep, rest = address.rpartition("://")
    _, colon, port = rest.rpartition(":")
    proxied = any(os.environ.get(v) or os.environ.get(v.upper()) for v in PROXY_VARIABLES)
    if (sep and scheme != "tcp") or not colon or not port.isdigit() or "/" in rest or proxied:
        return None
    try:
        check_reachable(f"http://{rest}", hint=hint)
    except Unreachable as e:
        return f"{flag} {address}: the {service} at {e}"
    return None


def job_service_problem(endpoint: str) -> str | None:
    """`service_problem` for a portable runner's job service."""
    hint = "start the runner's job service, or fix the address"
    return service_problem("--job_endpoint", endpoint, "job service", hint)


def worker_pool_problem(portable: PortableOptions) -> str | None:
    """`service_problem` for an external worker pool (`--environment_type EXTERNAL
    --environment_config HOST:PORT`): the job would fail as its first stage starts, with OUT
    claimed."""
    if (portable.environment_type or "").upper() != "EXTERNAL" or not portable.environment_config:
        return None
    hint = (
        "start the pool (python -m apache_beam.runners.worker.worker_pool_main --service_port "
        "PORT), or fix the address"
    )
    return service_problem("--environment_config", portable.environment_config, "worker pool", hint)


def dask_scheduler_problem(runner: str, address: str | None) -> str | None:
    """`service_problem` for the Dask cluster's scheduler (`--dask-address`) when the runner is
    Dask's (with another, the address is refused as unused); Dask's client would try to connect
    for 30 s after the build has claimed its folder."""
    if not address or runner.lower() not in DASK_RUNNERS:
        return None
    hint = "start the cluster's scheduler, or fix the address"
    return service_problem("--dask-address", address, "Dask scheduler", hint)


def asks_google_cloud(options: PipelineOptions, validator) -> bool:
    """Whether Beam's check of these options (`PipelineOptionsValidator.validate`) will call
    Google Cloud. On Dataflow it does twice over: when neither --temp_location nor
    --staging_location is a gs:// path and --project and --region are given, it looks up (or
    makes) the project's default bucket; and outside a dry run it asks whether a bucket given
    keeps deleted objects. Without credentials or network each call is retried for minutes."""
    if not validator.is_service_runner():
        return False
    gcp = options.view_as(GoogleCloudOptions)
    located = any(  # as Beam tells them: a gs:// path it accepts
        not validator.validate_gcs_path(gcp, name) for name in ("temp_location", "staging_location")
    )
    if not located:
        return bool(gcp.project and gcp.region and not gcp.dataflow_kms_key)
    return not options.view_as(TestOptions).dry_run


def unknown_runner(runner: str) -> str:
    names = ["DirectRunner", "DaskRunner"] + [
        p.rsplit(".", 1)[-1] for p in StandardOptions.ALL_KNOWN_RUNNERS
    ]
    close = "." not in runner and difflib.get_close_matches(runner, list(dict.fromkeys(names)), 1)
    if close and close[0] != runner:  # a known name that still failed is no typo
        hint = f"did you mean {close[0]}?"
    else:
        hint = "see docs/runners.md for the runners"
    return (
        f"--runner {runner}: not a runner Beam can make here (a name such as DirectRunner, "
        f"DaskRunner or DataflowRunner, or a runner class's full path); {hint}"
    )


def make_pipeline(options: PipelineOptions, workers=None) -> beam.Pipeline:
    """The graph's pipeline on the runner the options name; `workers`, a
    `pipeline.runners.local_workers.ForkedWorkers`, runs a local multi-process graph on its
    children."""
    from pipeline.runners.beam_internals import (
        memoize_dofn_specs,
        memoize_function_args,
        require,
    )

    memoize_dofn_specs()
    memoize_function_args()
    require("view_as")  # BuildOptions overrides it
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    if runner.lower() in DASK_RUNNERS:
        return beam.Pipeline(runner=dask_runner(), options=options)
    if runner.lower() not in LOCAL_RUNNERS:
        from pipeline.runners.beam_import import load_deferred

        load_deferred()
        return beam.Pipeline(options=options)
    from pipeline.runners.beam_internals import (
        ExtendedProvisionInfo,
        FnApiRunner,
        JobServiceHandle,
        ProvisionInfo,
    )

    # the options reach the workers as the DirectRunner would hand them to its FnApiRunner
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    info = ExtendedProvisionInfo(ProvisionInfo(pipeline_options=encoded))
    if workers is not None:
        from pipeline.runners.local_workers import LocalRunner

        return beam.Pipeline(runner=LocalRunner(workers, provision_info=info), options=options)
    return beam.Pipeline(runner=FnApiRunner(provision_info=info), options=options)


def forked_worker_count(options: PipelineOptions) -> int:
    """How many local worker processes the options ask for (0: none, the graph runs in the
    driver or on another runner)."""
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    direct = options.view_as(DirectOptions)
    if runner.lower() not in LOCAL_RUNNERS or direct.direct_running_mode != "multi_processing":
        return 0
    return direct.direct_num_workers


@contextmanager
def forked_workers(options: PipelineOptions):
    """The local worker processes, forked now (`pipeline.runners.local_workers`), or None (Beam
    starts its own); they are released and reaped when the block ends, killed when it fails."""
    count = forked_worker_count(options)
    if count:
        from pipeline.runners.local_workers import ForkedWorkers, fork_is_safe

        count = count if fork_is_safe() else 0
    if not count:
        yield None
        return
    pool = ForkedWorkers(count)
    try:
        with pool.watched():  # a worker killed raises WorkerLost here
            yield pool
        pool.close()  # inside the try: a signal that lands as it begins still reaps them
    except BaseException as e:
        pool.close(kill=True)
        if pool.lost and not isinstance(e, (KeyboardInterrupt, WorkerLost)):  # why it failed
            raise WorkerLost(*pool.lost[0]) from e
        raise


def steps_run_here(p: beam.Pipeline) -> bool:
    """Whether `p`'s steps run in this process (the local runner in memory) or in workers forked
    from it (`local_workers.LocalRunner`), which hold what this process held at the fork."""
    if getattr(p.runner, "workers_forked_here", False):
        return True
    runner = p.options.view_as(StandardOptions).runner or "DirectRunner"
    in_memory = p.options.view_as(DirectOptions).direct_running_mode != "multi_processing"
    return runner.lower() in LOCAL_RUNNERS and in_memory


def dask_runner():
    """Beam's Dask runner with its defects worked around, or a one-line refusal when the
    `dask` extra is not installed."""
    try:
        from pipeline.runners.dask_runner import DaskRunner
    except ImportError as e:
        raise SystemExit(
            f"error: --runner DaskRunner needs dask and distributed ({e}); install them with "
            "pip install -e '.[dask]'"
        ) from None
    return DaskRunner()


def run_pipeline(add_steps, options, verbose: bool, watch=None) -> None:
    """Run a graph; a failure inside it becomes one line (its own message, once), not the
    runner's tracebacks from every worker. Without `--verbose`, Beam's logs and its workers'
    stderr are not shown. `watch(stream)`, when given, is a context manager that runs beside
    the graph writing to the real stderr (the progress line)."""
    from pipeline.runners.beam_internals import quick_failure_poll, quick_sampler_stop

    quick_sampler_stop()  # before the workers fork, so that theirs stop quickly too
    quick_failure_poll()
    try:
        with (
            beam_logs_quiet(not verbose),
            quiet_stderr(not verbose) as stream,
            forked_workers(options) as workers,  # before any thread starts
            watch(stream) if watch else nullcontext(),
            submission_folder(options),
        ):
            p = make_pipeline(options, workers)
            try:
                with p:
                    add_steps(p)
            except BaseException as e:
                if interrupt_inside(e) is not None:
                    cancel_job(getattr(p, "result", None), stream)
                raise
            finally:  # Beam removes it only after a run, not when the graph was refused
                shutil.rmtree(p.local_tempdir, ignore_errors=True)
    except Exception as e:
        stopped = interrupt_inside(e)
        if stopped is not None:  # a signal that landed inside a step the runner wrapped
            raise stopped from None
        if verbose:
            raise
        raise SystemExit(f"error: {failure_line(e)}") from None


@contextmanager
def beam_logs_quiet(quiet: bool):
    """Beam's logs unshown while the block runs, when `quiet` (without --verbose)."""
    import logging

    beam_logger = logging.getLogger("apache_beam")
    level = beam_logger.level
    if quiet:
        beam_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        beam_logger.setLevel(level)


@contextmanager
def submission_folder(options: PipelineOptions):
    """A job for a runner other than the local one and Dask is submitted with files Beam stages
    for its workers (this package built as an sdist, the list of the submitting environment's
    packages, the pickled session), each set in a folder from `tempfile.mkdtemp` that Beam
    never removes. While such a job is submitted and run, Python's temporary folder is one of
    the build's own, removed when the run ends."""
    runner = (options.view_as(StandardOptions).runner or "DirectRunner").lower()
    if runner in LOCAL_RUNNERS or runner in DASK_RUNNERS:
        yield None
        return
    saved = tempfile.tempdir
    folder = tempfile.mkdtemp(prefix="bert-shards-submit-")
    tempfile.tempdir = folder
    try:
        yield folder
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def quiet_stderr(quiet: bool):
    """While the graph runs, file descriptor 2 goes to a discarded temporary file, so the local
    runner's worker processes (which inherit it) print nothing; yields a stream on the real
    stderr."""
    if not quiet:
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink, os.fdopen(os.dup(saved), "w", buffering=1) as real:
        os.dup2(sink.fileno(), 2)
        try:
            yield real
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
