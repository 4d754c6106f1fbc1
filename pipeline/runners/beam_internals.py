"""Every part of Beam the build uses that Beam does not promise to keep: private names (a
leading underscore), its runner and portability modules, and the methods of Beam's classes the
runners here override. Each is in `INTERNALS`, imported here on first use and nowhere else in
the package (`from pipeline.runners.beam_internals import FnApiRunner`).

The build supports the Beam it pins, `apache-beam==2.77.0` (pyproject.toml). On another Beam a
name that has gone stops the command with one line naming it and the supported version.
docs/runners.md says what each use buys; tests/pipeline/test_beam_internals.py resolves the
table on the installed Beam and fails when a use outside it appears in `pipeline/`.
"""

from __future__ import annotations

import importlib
import operator
import sys
import threading
import types
import weakref

SUPPORTED_BEAM = "2.77.0"  # the pin in pyproject.toml

# our name -> (Beam module, the attribute path in it); who uses it, after each group
INTERNALS: dict[str, tuple[str, str]] = {
    # run.py: the local runner without the DirectRunner (which would try to download Prism)
    "FnApiRunner": ("apache_beam.runners.portability.fn_api_runner.fn_runner", "FnApiRunner"),
    "ExtendedProvisionInfo": (
        "apache_beam.runners.portability.fn_api_runner.fn_runner",
        "ExtendedProvisionInfo",
    ),
    "ProvisionInfo": ("apache_beam.portability.api", "beam_provision_api_pb2.ProvisionInfo"),
    "JobServiceHandle": ("apache_beam.runners.portability.portable_runner", "JobServiceHandle"),
    # local_workers.py: the FnApiRunner's worker processes forked from the driver
    "GrpcWorkerHandler": (
        "apache_beam.runners.portability.fn_api_runner.worker_handlers",
        "GrpcWorkerHandler",
    ),
    "register_environment": (
        "apache_beam.runners.portability.fn_api_runner.worker_handlers",
        "WorkerHandler.register_environment",
    ),
    "SUBPROCESS_SDK": ("apache_beam.portability.python_urns", "SUBPROCESS_SDK"),
    "ApiServiceDescriptor": ("apache_beam.portability.api", "endpoints_pb2.ApiServiceDescriptor"),
    "sdk_worker_main": ("apache_beam.runners.worker.sdk_worker_main", "main"),
    # dask_runner.py: Beam's Dask runner with its defects worked around
    "BeamDaskRunner": ("apache_beam.runners.dask.dask_runner", "DaskRunner"),
    "DaskOptions": ("apache_beam.runners.dask.dask_runner", "DaskOptions"),
    "dask_overrides": ("apache_beam.runners.dask.overrides", "dask_overrides"),
    "Reshuffle": ("apache_beam.runners.dask.overrides", "_Reshuffle"),
    "TRANSLATIONS": ("apache_beam.runners.dask.transform_evaluator", "TRANSLATIONS"),
    "Flatten": ("apache_beam.runners.dask.transform_evaluator", "Flatten"),
    "GroupByKey": ("apache_beam.runners.dask.transform_evaluator", "GroupByKey"),
    "NoOp": ("apache_beam.runners.dask.transform_evaluator", "NoOp"),
    "OneReceiver": ("apache_beam.runners.dask.transform_evaluator", "OneReceiver"),
    "get_windowed_value": ("apache_beam.runners.dask.transform_evaluator", "get_windowed_value"),
    "OutputHandler": ("apache_beam.runners.common", "_OutputHandler"),
    "DoFnSignature": ("apache_beam.runners.common", "DoFnSignature"),
    "DoFnContext": ("apache_beam.runners.common", "DoFnContext"),
    "SideInputMap": ("apache_beam.transforms.sideinputs", "SideInputMap"),
    "PipelineResult": ("apache_beam.runners.runner", "PipelineResult"),
    "PipelineState": ("apache_beam.runners.runner", "PipelineState"),  # also failures.py's cancel
    # options.py: every option Beam knows, to refuse the others
    "BeamArgumentParser": ("apache_beam.options.pipeline_options", "_BeamArgumentParser"),
    # run.py: the runner --runner names, made and its options checked before any work starts
    "create_runner": ("apache_beam.runners.runner", "create_runner"),
}

# The text Beam adds to an exception a step raised (`DoFnRunner._reraise_augmented` in
# apache_beam/runners/common.py): "ValueError: ... [while running 'Stage/Step']". From a worker
# process the driver gets only that text, inside the worker's traceback, in a RuntimeError.
STEP_SUFFIX = r" \[while running '[^']*'\]"

# Used here through the functions below, or overridden by the runners' subclasses: resolved
# by the test only (an override of a method Beam no longer calls would silently do nothing).
USED_ON_BEAMS_OBJECTS: dict[str, tuple[str, str]] = {
    "create_invoker": ("apache_beam.runners.common", "DoFnInvoker.create_invoker"),
    "view_options": ("apache_beam.pvalue", "AsSideInput._view_options"),
    "add_argparse_args": (
        "apache_beam.options.pipeline_options",
        "PipelineOptions._add_argparse_args",
    ),
    "run_via_runner_api": (
        "apache_beam.runners.portability.fn_api_runner.fn_runner",
        "FnApiRunner.run_via_runner_api",
    ),
    "start_worker": (
        "apache_beam.runners.portability.fn_api_runner.worker_handlers",
        "GrpcWorkerHandler.start_worker",
    ),
    "stop_worker": (
        "apache_beam.runners.portability.fn_api_runner.worker_handlers",
        "GrpcWorkerHandler.stop_worker",
    ),
    "logging_api_service_descriptor": (
        "apache_beam.runners.portability.fn_api_runner.worker_handlers",
        "GrpcWorkerHandler.logging_api_service_descriptor",
    ),
    "run_pipeline": ("apache_beam.runners.dask.dask_runner", "DaskRunner.run_pipeline"),
    "reraise_augmented": ("apache_beam.runners.common", "DoFnRunner._reraise_augmented"),
    "StateSampler": ("apache_beam.runners.worker.statesampler", "StateSampler"),
    # run.py: a bundle's end without waiting out the sampler's sleep (docs/runners.md)
    "statesampler": ("apache_beam.runners.worker.bundle_processor", "statesampler"),
    # run.py: a failed bundle noticed within 50 ms, not Beam's one-second poll (docs/runners.md)
    "data_channel": ("apache_beam.runners.worker.data_plane", "_GrpcDataChannel"),
    "receiving_queue": (
        "apache_beam.runners.worker.data_plane",
        "_GrpcDataChannel._receiving_queue",
    ),
    # run.py: graph construction without Beam's repeated introspection (docs/runners.md)
    "get_dofn_specs": ("apache_beam.transforms.userstate", "get_dofn_specs"),
    "view_as": ("apache_beam.options.pipeline_options", "PipelineOptions.view_as"),
    "get_function_args_defaults": ("apache_beam.transforms.core", "get_function_args_defaults"),
    # import_beam: the object stores' filesystems and Dataflow's client imported when used
    "filesystems": ("apache_beam.io.filesystems", "FileSystems"),
    "get_filesystem": ("apache_beam.io.filesystems", "FileSystems.get_filesystem"),
    "get_scheme": ("apache_beam.io.filesystems", "FileSystems.get_scheme"),
    "dataflow_api": ("apache_beam.runners.dataflow.dataflow_runner", "dataflow_api"),
    "http_error": ("apache_beam.utils.retry", "HttpError"),
}


class MissingInternal(SystemExit):
    """A name of Beam's the build uses is not in the installed Beam: one line, exit status 1."""


def installed_beam() -> str:
    from apache_beam.version import __version__

    return __version__


def missing(module: str, path: str) -> MissingInternal:
    return MissingInternal(
        f"error: the installed Beam ({installed_beam()}) has no {module}.{path}, which the "
        f"build's runners use; install the supported version: pip install "
        f"'apache-beam=={SUPPORTED_BEAM}'"
    )


def resolve(module: str, path: str):
    """`module`'s attribute `path` (dotted), or `MissingInternal` when this Beam lacks either.
    An import failing on a package other than Beam (dask, for the Dask runner) is raised as
    it is."""
    try:
        value = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "apache_beam":
            raise
        raise missing(module, path) from None
    for part in path.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise missing(module, path) from None
    return value


def __getattr__(name: str):
    """`from pipeline.runners.beam_internals import NAME`: resolved once, then kept."""
    if name not in INTERNALS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = resolve(*INTERNALS[name])
    globals()[name] = value
    return value


def require(*names: str) -> None:
    """Stop with `MissingInternal` unless this Beam has each of `USED_ON_BEAMS_OBJECTS[name]`
    (a module defining a subclass calls it for the methods it overrides)."""
    for name in names:
        resolve(*USED_ON_BEAMS_OBJECTS[name])


def create_invoker(*args, **kwargs):
    """Beam's DoFn invoker (`DoFnInvoker.create_invoker`), which runs a DoFn's methods."""
    return resolve(*USED_ON_BEAMS_OBJECTS["create_invoker"])(*args, **kwargs)


def view_options(side_input) -> dict:
    """What a runner needs to read a side input (`AsSideInput._view_options`, "intended for
    internal use by runner implementations"): its window mapping and coder, its default."""
    require("view_options")
    return side_input._view_options()


def add_argparse_args(options_class, parser) -> None:
    """The options a `PipelineOptions` class registers, added to `parser`."""
    require("add_argparse_args")
    options_class._add_argparse_args(parser)


def stop_stranded_samplers() -> None:
    """End the sampling thread of a bundle that an interrupt cut short. Beam's
    `StateSampler.start` starts its thread (not a daemon) before it sets `started`, and
    `process_bundle`'s cleanup stops the sampler only when `started` is set: a SIGINT or SIGTERM
    raised between the two leaves the thread running, and the interpreter waits for it at exit
    forever (docs/runners.md has the reproduction). Called once an interrupt has unwound the
    build, in the thread that ran it; without Beam imported it does nothing."""
    if "apache_beam.runners.worker.statesampler" not in sys.modules:
        return
    sampler = resolve(*USED_ON_BEAMS_OBJECTS["StateSampler"])
    if getattr(sampler, "quick_stop", False):  # `quick_sampler_stop`'s subclass: its base
        sampler = sampler.__bases__[0]
    for thread in threading.enumerate():
        owner = getattr(getattr(thread, "_target", None), "__self__", None)
        if isinstance(owner, sampler) and not owner.finished:
            owner.stop()  # sets `finished`, which ends the thread's loop, and joins it


def memoize_dofn_specs() -> None:
    """Make Beam's `userstate.get_dofn_specs` remember its answer for each DoFn instance.

    Beam asks it again and again while it builds, checks and translates a graph (about eight times
    per ParDo: `is_stateful_dofn`, `validate_stateful_dofn`, `to_runner_api_parameter`, the
    runner's DoFnSignature), and each time it wraps every method of the DoFn and takes its
    `inspect.signature` (docs/benchmarks.md, "Graph construction", has the counts). The answer
    depends only on the DoFn's methods, which Beam never changes once the DoFn is made. A DoFn
    that cannot be a weak dictionary key (unhashable, or without weak references) is inspected
    every time, as before; an error Beam raises is raised every time. Callers get fresh sets, so
    none can change another's. Idempotent; it applies to this process and to the worker
    processes forked from it afterwards."""
    require("get_dofn_specs")
    from apache_beam.transforms import userstate

    real = userstate.get_dofn_specs
    if getattr(real, "memoized", False):
        return
    found: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get_dofn_specs(dofn):
        try:
            specs = found.get(dofn)
        except TypeError:  # unhashable, or no weak reference to it
            return real(dofn)
        if specs is None:
            specs = found[dofn] = real(dofn)
        return set(specs[0]), set(specs[1])

    get_dofn_specs.memoized = True
    get_dofn_specs.__wrapped__ = real
    get_dofn_specs.__doc__ = real.__doc__
    userstate.get_dofn_specs = get_dofn_specs


def _signature_inputs(fn) -> tuple:
    """What `inspect.signature` of a plain function reads besides its identity."""
    return (
        fn.__code__,
        fn.__defaults__,
        fn.__kwdefaults__,
        getattr(fn, "__wrapped__", None),
        getattr(fn, "__signature__", None),
    )


def memoize_function_args() -> None:
    """Make Beam's `core.get_function_args_defaults` remember its answer for each plain function
    and for the methods bound to one.

    Beam asks for the argument names and defaults of every method of every DoFn when it checks
    a DoFn's state (`userstate.get_dofn_specs`, once per DoFn here), and again for each method
    a bundle runs, in every bundle (`MethodWrapper`); each answer takes an `inspect.signature`.
    The answer is a function of the function's code, defaults, `__wrapped__` and
    `__signature__`: a remembered one is used only while those are the same objects. A method
    bound to an object has its function's answer less the first argument, whatever the object.
    Any other callable (a builtin, a `functools.partial`, an object with `__call__`) is
    inspected every time, as before. Callers get fresh lists. Idempotent; it applies to this
    process and to the worker processes forked from it afterwards."""
    require("get_function_args_defaults")
    from apache_beam.transforms import core

    real = core.get_function_args_defaults
    if getattr(real, "memoized", False):
        return
    found = (weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary())  # plain, bound

    def get_function_args_defaults(f):
        bound = type(f) is types.MethodType
        fn = f.__func__ if bound else f
        if type(fn) is not types.FunctionType:
            return real(f)
        inputs = _signature_inputs(fn)
        held = found[bound].get(fn)
        if held is None or not all(map(operator.is_, held[0], inputs)):
            held = found[bound][fn] = (inputs, real(f))
        args, defaults = held[1]
        return list(args), list(defaults)

    get_function_args_defaults.memoized = True
    get_function_args_defaults.__wrapped__ = real
    get_function_args_defaults.__doc__ = real.__doc__
    core.get_function_args_defaults = get_function_args_defaults


# The period of the sampling thread each bundle starts (Beam's default is 200 ms): the bundle's
# end waits for the thread's next wake-up, which 20 ms bounds; waking 50 times a second to add
# elapsed time to a counter costs a worker next to nothing.
SAMPLING_PERIOD_MS = 20


def quick_sampler_stop() -> None:
    """Make the state sampler of every bundle wake every SAMPLING_PERIOD_MS, not 200 ms.

    Each bundle Beam's SDK worker runs starts a `StateSampler` thread that sleeps between
    samples, its sleep growing to `sampling_period_ms` (200 ms by default, and the bundle
    processor passes none); the bundle's end stops it and joins the thread, so every bundle of
    a second or more waits up to 200 ms (docs/runners.md has the reproduction and what it
    measured), after its last element: in each stage of a build, on every worker, serially.
    Replaces, in the module the bundle processor takes it from, the class with a subclass whose
    default period is SAMPLING_PERIOD_MS. Idempotent; it applies to this process and to the
    worker processes forked from it afterwards (Beam's own SDK workers keep Beam's period)."""
    statesampler = resolve(*USED_ON_BEAMS_OBJECTS["statesampler"])
    base = statesampler.StateSampler
    if getattr(base, "quick_stop", False):
        return

    class StateSampler(base):
        quick_stop = True

        def __init__(self, prefix, counter_factory, sampling_period_ms=SAMPLING_PERIOD_MS):
            super().__init__(prefix, counter_factory, sampling_period_ms=sampling_period_ms)

    StateSampler.__doc__ = base.__doc__
    statesampler.StateSampler = StateSampler


# How long a reader of a bundle's elements waits on an empty queue before it checks again
# whether the bundle has failed (Beam waits a second): waking 20 times a second while a bundle
# runs costs next to nothing.
FAILURE_POLL_SECONDS = 0.05


class QuickPollQueue:
    """Beam's queue of a bundle's elements (a `ByteLimitedQueue`, an extension type), seen
    through this: its one-second waits are FAILURE_POLL_SECONDS, all else is the queue's."""

    def __init__(self, received):
        self.received = received

    def get(self, *, block=True, timeout=None):
        wait = FAILURE_POLL_SECONDS if timeout == 1 else timeout
        return self.received.get(block=block, timeout=wait)

    def __getattr__(self, name):
        return getattr(self.received, name)


def quick_failure_poll() -> None:
    """Make a failed bundle's error reach the runner within FAILURE_POLL_SECONDS, not a second.

    The runner reads a bundle's outputs from a queue per bundle
    (`_GrpcDataChannel.input_elements`), waiting on it a second at a time and asking between
    waits whether the bundle has failed; a failed bundle sends no more elements, so its error
    waited up to a second after the workers had ended it (docs/runners.md has the
    reproduction). Wraps `_receiving_queue`, which hands those queues out, so that each is
    seen through a `QuickPollQueue`. Idempotent; it applies to this process and to the worker
    processes forked from it afterwards (where the same waits, for a bundle's inputs, poll
    sooner too)."""
    channel = resolve(*USED_ON_BEAMS_OBJECTS["data_channel"])
    require("receiving_queue")
    real = channel._receiving_queue
    if getattr(real, "quick_poll", False):
        return

    def _receiving_queue(self, instruction_id):
        received = real(self, instruction_id)
        return None if received is None else QuickPollQueue(received)

    _receiving_queue.quick_poll = True
    _receiving_queue.__wrapped__ = real
    channel._receiving_queue = _receiving_queue
