"""Beam's Dask runner (2.77), with the defects that break this build worked around.

`apache_beam.runners.dask.dask_runner.DaskRunner` translates a graph into Dask bags, but in
this version (each checked with a three-step pipeline on two worker processes):
1. a ParDo's outputs go into one list made when the graph is built, so a task that runs again
   in a worker process (side inputs make tasks run again) returns its earlier outputs too:
   a singleton side input then holds the same value twice;
2. the outputs of a multi-output ParDo (`with_outputs`) all land in one bag that every
   consumer reads, main and tagged mixed, and outputs from `finish_bundle` are dropped;
3. a side input is the producer's whole graph, computed again inside every task that reads
   it, nested as deep as side inputs go (a vocab would be trained once per reader);
4. `Reshuffle` is dropped, so everything after a `Create` of a few items stays in one
   partition and runs on one worker;
5. only the last transform's bag is computed: a branch that does not lead to it never runs.
`DaskRunner` here keeps Beam's translations of Create, GroupByKey (its input first merged into
fewer partitions: `Translate.coalesced`) and Flatten, and replaces the rest: a ParDo makes its
output list per bundle and routes tagged outputs by tag; a side input is computed once, before
its readers, with every bag made so far, and all of them are kept in the cluster (so no step
runs twice; with `--dedup` that holds the documents in the workers' memory, as the local runner
does), and a step's inputs are taken from those kept bags, not from the graphs that made them
(`Translate.visit_transform`); `Reshuffle` cuts its elements into pieces, each a task the
scheduler hands to a free worker (and can run again when a worker is lost); every leaf of the
graph is computed.

Each ParDo's tasks are named after its step (`step_<label>`), not all `run_bundle`: Dask
estimates a task's duration from those of earlier tasks of the same name prefix, for where it
places tasks and which it moves to an idle worker, and its dashboard shows the steps by name.

Without `--dask_client_address` (the build's `--dask-address`), a local cluster of
`--workers` single-threaded processes is started and closed around the run, its workers with
glibc's own memory settings, not the ones Dask's nanny sets (`GLIBC_TRIM`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys

from apache_beam import DoFn, ParDo, TaggedOutput
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.pipeline import PipelineVisitor
from apache_beam.pvalue import PBegin

from pipeline.runners import beam_internals
from pipeline.runners.beam_internals import (
    TRANSLATIONS,
    BeamDaskRunner,
    DaskOptions,
    DoFnContext,
    DoFnSignature,
    Flatten,
    GroupByKey,
    NoOp,
    OneReceiver,
    OutputHandler,
    PipelineResult,
    PipelineState,
    Reshuffle,
    SideInputMap,
    dask_overrides,
    get_windowed_value,
)
from pipeline.runners.cpus import usable_cpus

beam_internals.require("run_pipeline")  # overridden below

BEAM_PATH = "apache_beam.runners.dask.dask_runner.DaskRunner"
# A reshuffled bag's pieces per worker thread: enough that a worker that finishes early has
# another piece to take (Dask moves queued tasks to idle workers), few, because every piece is
# a task in each later step and in each shuffle of the counts after it.
PARTITIONS_PER_THREAD = 4
# Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536, so that a long-lived
# worker hands freed memory back to the system. Set, it also stops glibc from raising its
# thresholds for large blocks: every array of a bucket's columns is then mapped afresh and
# faulted in page by page, and the bucket step took markedly more CPU than in the local
# runner's workers (docs/benchmarks.md, "glibc's trim threshold on Dask"). The local
# cluster's workers run without it (a MALLOC_TRIM_THRESHOLD_ in the build's environment is
# still inherited); docs/runners.md gives the same setting for a standing cluster's workers.
GLIBC_TRIM = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"


def trim_threshold() -> str | None:
    """Run in a Dask worker: the glibc trim threshold its environment sets, if any."""
    return os.environ.get("MALLOC_TRIM_THRESHOLD_")


def note_trimming_workers(client) -> None:
    """One line on stderr when a standing cluster's workers run with a glibc trim threshold
    (Dask's nanny sets one unless told otherwise): the build runs, at a cost it can avoid."""
    settings = client.run(trim_threshold)
    values = sorted({value for value in settings.values() if value is not None})
    if values:
        print(
            f"note: {sum(v is not None for v in settings.values())} of the cluster's "
            f"{len(settings)} Dask workers run with MALLOC_TRIM_THRESHOLD_={', '.join(values)}, "
            "as Dask's nanny starts them by default: glibc then maps each large array afresh "
            "and the build takes more CPU; docs/runners.md ('The workers' memory settings') "
            "gives the config file to start them with",
            file=sys.stderr,
        )


def worker_config() -> dict:
    """The Dask configuration, as a config file nests it, under which a nanny starts its
    workers without the trim threshold (docs/runners.md, for `dask worker` on a cluster)."""
    config: dict = {}
    *path, last = GLIBC_TRIM.split(".")
    node = config
    for key in path:
        node = node.setdefault(key, {})
    node[last] = None
    return config


def run_bundle(items, fn, args, kwargs, window_fn, label, side_inputs, tagged: bool) -> list:
    """One partition through a DoFn, with receivers of its own; (tag, value) pairs when the
    ParDo has tagged outputs, else values."""
    receivers = OneReceiver()
    handler = OutputHandler(
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = beam_internals.create_invoker(
        DoFnSignature(fn),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=list(args),
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(get_windowed_value(item, window_fn))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    out = [
        (r.tag, r.value.value) if isinstance(r, TaggedOutput) else (None, r.value)
        for r in receivers.values
    ]
    return out if tagged else [value for _, value in out]


def task_prefix(label: str) -> str:
    """A step's task name prefix: its label in letters, digits and underscores (Dask reads a
    name's prefix up to the first hyphen followed by the hash)."""
    return "step_" + re.sub(r"[^0-9A-Za-z]+", "_", label).strip("_")


def has_tag(tag, pair) -> bool:
    return pair[0] == tag


def untag(pair):
    return pair[1]


@dataclasses.dataclass
class Materialized:
    """A side input's values, computed once; iterated as Beam's side-input map expects."""

    values: list
    window_fn: object

    def __iter__(self):
        for value in self.values:
            yield get_windowed_value(value, self.window_fn)


class Translate(PipelineVisitor):
    """Beam graph -> Dask bags, one per PCollection (see the module docstring)."""

    def __init__(self, client, bag_kwargs: dict, spread: int):
        self.client = client
        self.bag_kwargs = bag_kwargs
        self.spread = spread
        self.bags: dict = {}  # PCollection -> bag
        self.side_values: dict = {}  # PCollection -> its values, when read as a side input
        self.persisted: set = set()  # PCollections whose bags are kept in the cluster
        self.consumed: set = set()
        self.sinks: list = []  # bags of transforms without outputs

    def visit_transform(self, node) -> None:
        transform = node.transform
        # Side inputs and Reshuffle compute bags now, after keeping every bag made so far in
        # the cluster: the inputs are read after that, so that this step's graph starts from the
        # kept results. Read before, they were the graphs that made those results, submitted
        # again at the end, fused otherwise, under other names: every step before a side input's
        # reader ran twice, and two runs of one step could race on the files it writes.
        side = [self.side_input(si) for si in node.side_inputs]
        if isinstance(transform, Reshuffle):
            self.persist_all()
        inputs = [self.bags[pc] for pc in node.inputs if not isinstance(pc, PBegin)]
        self.consumed.update(pc for pc in node.inputs if not isinstance(pc, PBegin))
        if type(transform) is ParDo:
            out = self.par_do(node, inputs[0], side)
        elif isinstance(transform, Reshuffle):
            out = self.reshuffle(inputs[0])
            self.persisted.update(node.outputs.values())  # already in the workers' memory
        else:
            op = TRANSLATIONS.get(type(transform), NoOp)(node, bag_kwargs=self.bag_kwargs)
            many = len(inputs) != 1 or isinstance(op, Flatten)
            if isinstance(op, GroupByKey):
                inputs = [self.coalesced(inputs[0])]
            out = op.apply(input_bag=(inputs if many else inputs[0]) if inputs else None)
        if not node.outputs:
            self.sinks.append(out)
        for pc in node.outputs.values():
            self.bags[pc] = self.by_tag(node, pc, out)

    def par_do(self, node, bag, side):
        transform = node.transform
        main_input = next(iter(node.main_inputs.values()))
        window_fn = getattr(getattr(main_input, "windowing", None), "windowfn", None)
        args, kwargs = transform.raw_side_inputs
        tagged = bool(transform.output_tags)
        run = functools.partial(
            run_bundle,
            fn=transform.fn,
            args=args,
            kwargs=kwargs,
            window_fn=window_fn,
            label=transform.label,
            side_inputs=side or None,
            tagged=tagged,
        )
        return bag.map_partitions(run, token=task_prefix(node.full_label))

    def reshuffle(self, bag):
        """The bag's elements (kept in the cluster: `visit_transform`), computed and cut into
        `spread` pieces (`PARTITIONS_PER_THREAD` per worker thread, or `--dask_npartitions`),
        each a task of its own in the graph, which the scheduler hands to every worker at once.
        The elements this build reshuffles are small: file groups, chunk files' names, bucket
        numbers. (Dask's `repartition` of the bag cut pieces that all depended on one task, and
        ran them on the worker that held it while the others idled: `tests/pipeline/
        test_dask.py`. Scattered to the workers, the pieces were data the cluster could not
        make again: a worker lost during the build, a spot machine taken back, ended it,
        `tests/pipeline/test_dask_standing.py`.)"""
        import dask.bag

        values = self.client.compute(bag).result()
        size = max(1, -(-len(values) // self.spread))  # at most `spread` pieces, none empty
        return dask.bag.from_sequence(values, partition_size=size)

    def coalesced(self, bag):
        """A GroupByKey's input in at most `spread` partitions, neighbours merged. Dask's task
        shuffle makes a task for every pair of input and output partitions, and a Flatten of
        several steps' outputs adds their partitions up: the build's counts, a few small
        records, were shuffled in hundreds of tiny tasks, each a cost to the scheduler and the
        workers (docs/benchmarks.md, "fewer shuffle tasks on Dask")."""
        return bag.repartition(npartitions=self.spread) if bag.npartitions > self.spread else bag

    @staticmethod
    def by_tag(node, pc, out):
        """The bag of output `pc`: a ParDo with tagged outputs made (tag, value) pairs."""
        tags = getattr(node.transform, "output_tags", None)
        if type(node.transform) is not ParDo or not tags:
            return out
        tag = pc.tag if pc.tag in tags else None
        return out.filter(functools.partial(has_tag, tag)).map(untag)

    def side_input(self, si) -> SideInputMap:
        pc = si.pvalue
        if pc not in self.side_values:
            self.persist_all()
            self.side_values[pc] = self.client.compute(self.bags[pc]).result()
        view = beam_internals.view_options(si)
        values = Materialized(self.side_values[pc], view["window_mapping_fn"])
        return SideInputMap(type(si), view, values)

    def persist_all(self) -> None:
        """Keep every bag made so far in the cluster, so that no step runs twice: a later
        computation starts from these results. (A step run again would write its chunk files
        again, and batching by `BatchElements` need not cut the same batches twice.)"""
        pending = [pc for pc in self.bags if pc not in self.persisted]
        if not pending:
            return
        kept = self.client.persist([self.bags[pc] for pc in pending])
        for pc, bag in zip(pending, kept, strict=True):
            self.bags[pc] = bag
        self.persisted.update(pending)

    def leaves(self) -> list:
        return self.sinks + [bag for pc, bag in self.bags.items() if pc not in self.consumed]


def take_bag_kwargs(dask_options: dict) -> dict:
    """The options that shape Dask bags (`--dask_npartitions`, `--dask_partition_size`), taken
    out of those given to the client."""
    kept = {k: dask_options.pop(k, None) for k in ("npartitions", "partition_size")}
    return {k: v for k, v in kept.items() if v}


class DaskRunner(BeamDaskRunner):
    """Runs a graph on a Dask cluster (an address, or a local one); blocks until it is done."""

    def run_pipeline(self, pipeline, options):
        import dask
        import distributed

        kwargs = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = take_bag_kwargs(kwargs)
        cluster = None
        if not kwargs.get("address") and not kwargs.get("scheduler_file"):
            workers = options.view_as(DirectOptions).direct_num_workers or usable_cpus()
            with dask.config.set({GLIBC_TRIM: None}):
                cluster = distributed.LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
                )
            kwargs["address"] = cluster
        client = distributed.Client(**kwargs)
        try:
            if cluster is None:
                note_trimming_workers(client)
            threads = sum(client.nthreads().values()) or 1
            spread = bag_kwargs.get("npartitions") or PARTITIONS_PER_THREAD * threads
            pipeline.replace_all(dask_overrides())
            translate = Translate(client, bag_kwargs, spread)
            pipeline.visit(translate)
            unique = {bag.name: bag for bag in translate.leaves()}
            leaves = dask.optimize(*unique.values())
            client.gather(client.compute(list(leaves)))
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
        return DoneResult(PipelineState.DONE)


class DoneResult(PipelineResult):
    """The result of a run that has already finished when `run` returns."""

    def wait_until_finish(self, duration=None):
        return self.state

    def metrics(self):
        raise NotImplementedError("Beam's Dask runner does not collect metrics")
