"""The build on a Dask cluster (a scheduler and two single-threaded worker processes on
localhost, over TCP) writes the local runner's bytes, from and into a local disk or gs://
(the local GCS); and the Dask runner's defects that `pipeline.runners.dask_runner` works
around stay worked around."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip(
    "distributed", reason="the dask extra is not installed (pip install -e .[dask])"
)

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from pipeline.runners.dask_runner import GLIBC_TRIM, DaskRunner  # noqa: E402
from tests.helpers import (  # noqa: E402
    INTERRUPTED,
    SAMPLE,
    build_process,
    build_shards,
    file_digests,
    finished_bucket_times,
    kill_when,
    shard_set,
    shard_times,
    write_other_formats,
    write_parquet,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request) -> str:
    """The scheduler's address: a scheduler in this process and two worker processes, each
    one thread, which the driver reaches over TCP as it would a remote cluster's; all are
    stopped after the module. The workers are spawned with this process's `sys.path`, so
    they import this checkout's code and the DoFns defined here, as the driver does; and with
    the local GCS's environment where it is installed, as a cluster's workers are started
    with the credentials of the store they read and write (its test below)."""
    import dask
    from distributed import LocalCluster

    if importlib.util.find_spec("gcp_storage_emulator"):
        request.getfixturevalue("gcs_emulator")

    scratch = str(tmp_path_factory.mktemp("dask"))
    # Dask's own scratch folder (its locks) goes there too, not into the machine's /tmp; the
    # workers start as docs/runners.md tells a standing cluster's to (`GLIBC_TRIM`).
    with (
        dask.config.set({"temporary-directory": scratch, GLIBC_TRIM: None}),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=None,
            local_directory=scratch,
        ) as local,
    ):
        yield local.scheduler_address


def executed(address: str) -> dict[str, int]:
    """How many tasks each worker of the cluster has run so far, by its address."""
    from distributed import Client

    with Client(address) as client:
        return client.run(lambda dask_worker: dask_worker.state.executed_count)


def test_shards_on_dask_equal_the_local_runners(sample_shards, cluster, tmp_path):
    # `bert-shards build` as a user runs it, in a process of its own that ends with the quick
    # exit (`schemas.quick_exit`) once the build has returned: status 0, the output whole. INPUT
    # and OUT given relative to a folder that is not the workers' own: the workers are given
    # them absolute (before, they read nothing, and the build ended with no instances).
    shutil.copytree(SAMPLE, tmp_path / "corpus", ignore=shutil.ignore_patterns("finetune"))
    cmd = [sys.executable, "-m", "pipeline", "build", "--out", "dask", "--num-shards", "4"]
    cmd += ["--input", "books:corpus/books,text:corpus/text", "--progress-seconds", "0"]
    cmd += ["--runner", "DaskRunner", "--dask-address", cluster]
    before = executed(cluster)
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert file_digests(str(tmp_path / "dask")) == file_digests(sample_shards)
    after = executed(cluster)
    assert len(after) == 2 and all(after[w] > before[w] for w in after)  # both workers ran it


def test_a_workers_listing_unlike_the_commands_stops_the_build_in_one_line(
    cluster, tmp_path, monkeypatch
):
    """The cluster's workers list the input themselves before planning the reads; a listing
    that differs from the one the command made (here the command's digest of it replaced, as
    if a file had been removed in between) stops the build with the workers' line, instead of
    reading other files than the command listed, and checked, and recorded for --resume."""
    import pipeline.files.listing

    monkeypatch.setattr(pipeline.files.listing, "listing_digest", lambda specs: "0" * 64)
    args = ["--num-shards", "4", "--runner", "DaskRunner", "--dask-address", cluster]
    with pytest.raises(SystemExit) as e:
        build_shards(str(tmp_path / "out"), *args, "--progress-seconds", "0")
    assert str(e.value).startswith("error: the input changed after the command started (")
    assert "restore the input as it was and run the same command with --resume" in str(e.value)
    assert "\n" not in str(e.value)


def test_many_formats_and_spans_on_dask_equal_the_local_runners(cluster, tmp_path, monkeypatch):
    """--dedup's counts, Wikipedia's multistream path (index beside, dump read by span), text read
    by span, Parquet (seeking), Arrow's `--text-field`, WikiExtractor, CJK sentences, smoothing."""
    from tests.pipeline.wikidata import TABLE_MARKUP, gensim_xml, write_multistream

    copy, dumps, rows = tmp_path / "copy", tmp_path / "dumps", tmp_path / "rows"
    copy.mkdir()
    rows.mkdir()
    shutil.copy(f"{SAMPLE}/text/wiki-style.txt", copy / "again.txt")
    write_multistream(dumps, pages_per_stream=2)
    texts = [t for t in (copy / "again.txt").read_text().split("\n\n")[::-1] if t.strip()]
    texts.append("他说：“明天见。”然后走了。今天天气很好！")  # prose the flag cuts
    write_parquet(rows / "r.parquet", [dict(id=i, text=t) for i, t in enumerate(texts)], 2, "body")
    inputs = f"text:{SAMPLE}/text,text:{copy},wikipedia:{dumps},parquet:{rows},"
    inputs += write_other_formats(tmp_path / "other", texts, "body")
    local, on_dask = str(tmp_path / "local"), str(tmp_path / "dask")
    args = ["--num-shards", "4", "--dedup", "--text-field", "body", "--cjk-sentences"]
    args += ["--language-smoothing", "0.7"]
    monkeypatch.setattr("pipeline.sources.line_spans.LINE_SPAN_BYTES", 4000)  # both builds
    assert build_shards(local, *args, inputs=inputs) == 0
    dask_args = ["--runner", "DaskRunner", "--dask-address", cluster]
    assert build_shards(on_dask, *args, *dask_args, inputs=inputs) == 0
    assert file_digests(on_dask) == file_digests(local)
    counts = [json.load(open(f"{o}/manifest.json"))["counts"] for o in (local, on_dask)]
    assert counts[0] == counts[1]
    assert counts[0]["total"]["documents_dropped.duplicate"] > 0
    assert counts[0]["total"]["wiki_pages"] == gensim_xml(TABLE_MARKUP).count(b"<page>")
    assert counts[0]["by_source"]["parquet"]["documents_read"] == len(texts)
    assert counts[0]["by_source"]["wikiextractor"]["documents_read"] == len(texts)
    assert len(counts[0]["by_input"]) == 4  # those left a document by --dedup


@pytest.fixture(scope="module")
def gcs_sample(cluster, request) -> str:
    """The sample corpus in a bucket of the local GCS, as `books:` and `text:` inputs."""
    pytest.importorskip("gcp_storage_emulator")
    from tests.gcs_emulator import upload_tree

    request.getfixturevalue("gcs_emulator").create_bucket("dask")
    upload_tree(SAMPLE, "gs://dask/sample")
    return "books:gs://dask/sample/books,text:gs://dask/sample/text/"


def test_a_build_from_and_into_gcs_on_dask_is_the_local_build(
    sample_shards, cluster, gcs_sample, request
):
    """A cluster of other hosts shares no disk: its workers read the input from an object
    store and write the shards there. From gs:// into gs:// (the local GCS, which the workers
    reach as the driver does), the local runner's bytes, and the build area gone; the store
    asked as little as by the local runner's build (as `test_gcs_build.py` checks it)."""
    gcs_emulator = request.getfixturevalue("gcs_emulator")  # installed: gcs_sample said so
    args = ["--num-shards", "4", "--runner", "DaskRunner", "--dask-address", cluster]
    before = executed(cluster)
    gcs_emulator.reset_stats()
    assert build_shards("gs://dask/out", *args, "--progress-seconds", "0", inputs=gcs_sample) == 0
    stats = gcs_emulator.stats()
    assert stats["bytes_down"] <= 1.5 * stats["bytes_up"], stats
    assert "bucket-get" not in stats["by_kind"] and stats["by_kind"]["copy"] == 4, stats
    assert stats["requests"] < 100, stats
    after = executed(cluster)
    assert len(after) == 2 and all(after[w] > before[w] for w in after)  # both workers ran it
    assert shard_set("gs://dask/out") == shard_set(sample_shards)
    names = gcs_emulator.list_objects("dask", "out/")
    assert not [n for n in names if "/.building/" in n or n.endswith(".lock")], names


def _credentials_gone(missing: str | None) -> None:
    """On a worker: its credentials replaced by a key file that does not exist (`missing`),
    and its storage client forgotten; with None, the credentials given back."""
    from pipeline.files import gcs

    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"):
        held, given = ("SAVED_" + name, name) if missing is None else (name, "SAVED_" + name)
        os.environ[given] = os.environ.pop(held)
    if missing is not None:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = missing
    gcs._CLIENT = None


def test_workers_without_credentials_are_named_in_the_line(cluster, gcs_sample, tmp_path):
    """The driver checks the store with its own credentials before any work; a cluster whose
    workers were started without any fails in one line that names the worker and says what
    to give it."""
    from distributed import Client

    with Client(cluster) as client:
        client.run(_credentials_gone, str(tmp_path / "no-key.json"))
        try:
            with pytest.raises(SystemExit) as e:
                out, runner = str(tmp_path / "out"), ("--runner", "DaskRunner")
                build_shards(out, *runner, "--dask-address", cluster, inputs=gcs_sample)
        finally:
            client.run(_credentials_gone, None)
        workers = client.scheduler_info()["workers"]
    line = str(e.value.code)
    said = re.fullmatch(
        r"error: gs:// needs Google Cloud credentials on the Dask worker (\S+) \(File \S+ was "
        r"not found\): the driver has them, but the cluster's workers need their own; run .*",
        line,
    )
    assert said and said[1] in workers, line
    assert "GOOGLE_APPLICATION_CREDENTIALS" in line and "\n" not in line


def tasks_held(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_build_killed_on_dask_resumes_on_dask_to_the_same_bytes(
    sample_shards, cluster, tmp_path, sig
):
    """`--resume` on Dask: a build whose driver is killed once a bucket's shard is finished
    (SIGKILL, its workers' tasks left to the cluster; or SIGTERM, which it ends in one line,
    its job cancelled), started again with --resume on the same cluster, takes that shard as
    it is (the same file, by its modification time) and ends with the local runner's bytes.
    Either way the cluster is left holding none of the build's tasks."""
    from distributed import Client

    out = str(tmp_path / "out")
    dask_args = ["--num-shards", "4", "--runner", "DaskRunner", "--dask-address", cluster]
    driver = build_process(out, *dask_args, "--progress-seconds", "0")
    pattern = f"{out}/shards/.building/bucket-*.json"
    assert kill_when(driver, pattern, sig=sig), "no bucket was killed"
    if sig == signal.SIGTERM:
        said = driver.stdout.read().decode().strip().splitlines()
        assert driver.returncode == 143 and said[-1] == INTERRUPTED, said
    with Client(cluster) as client:
        deadline = time.monotonic() + 10
        while (left := client.run_on_scheduler(tasks_held)) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert left == 0
    assert not os.path.exists(f"{out}/manifest.json")
    kept = finished_bucket_times(out)
    assert build_shards(out, *dask_args, "--resume", "--progress-seconds", "0") == 0
    assert file_digests(out) == file_digests(sample_shards)
    assert not os.path.exists(f"{out}/shards/.building")
    assert kept and kept <= shard_times(out)  # the finished shards moved into place, not rebuilt


def set_trim_threshold(value: str | None) -> None:
    """Run in a Dask worker: what its environment says of glibc's trim threshold."""
    if value is None:
        os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    else:
        os.environ["MALLOC_TRIM_THRESHOLD_"] = value


def test_workers_started_with_dasks_trim_threshold_are_noted(cluster, capsys):
    # A standing cluster whose nannies set Dask's default: the build says so in one line and
    # runs; the suite's cluster is started without it, and there the build says nothing.
    def run() -> str:
        options = PipelineOptions([f"--dask_client_address={cluster}"])
        with beam.Pipeline(runner=DaskRunner(), options=options) as p:
            _ = p | beam.Create([1, 2]) | beam.Map(lambda x: x)
        return capsys.readouterr().err

    from distributed import Client

    assert "MALLOC_TRIM_THRESHOLD_" not in run()
    with Client(cluster) as client:
        client.run(set_trim_threshold, "65536")
        try:
            said = run()
        finally:
            client.run(set_trim_threshold, None)
    assert said.startswith("note: 2 of the cluster's 2 Dask workers run with "), said
    assert "MALLOC_TRIM_THRESHOLD_=65536" in said and said.count("\n") == 1, said
    assert "docs/runners.md ('The workers' memory settings')" in said


def test_punkt_on_dask_learns_the_local_runners_parameters(cluster, tmp_path):
    """`bert-shards punkt`, the third command, on the module's cluster: the same punkt.json."""
    from pipeline.shell.cli import main

    books = f"books:{SAMPLE}/books"
    local, on_dask = str(tmp_path / "local"), str(tmp_path / "dask")
    assert main(["punkt", "--input", books, "--out", local, "--workers", "1"]) == 0
    dask_args = ["--runner", "DaskRunner", "--dask-address", cluster]
    assert main(["punkt", "--input", books, "--out", on_dask, *dask_args]) == 0
    with open(f"{local}/punkt.json") as a, open(f"{on_dask}/punkt.json") as b:
        learned = a.read()
        assert learned == b.read()
    assert json.loads(learned)["abbrev_types"] and json.loads(learned)["ortho_context"]


class EvenOdd(beam.DoFn):
    """Main and tagged outputs, and an output from finish_bundle."""

    def process(self, x):
        yield x if x % 2 == 0 else beam.pvalue.TaggedOutput("odd", x)

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        yield beam.pvalue.TaggedOutput("odd", GlobalWindows.windowed_value(101))


def test_tagged_outputs_and_side_inputs_read_twice_are_carried(cluster, tmp_path):
    # Beam's own Dask runner mixes "even" and "odd" and drops 101, and a side input read
    # by two steps makes the second see its values twice.
    seen = tmp_path / "seen.json"
    options = PipelineOptions([f"--dask_client_address={cluster}"])
    with beam.Pipeline(runner=DaskRunner(), options=options) as p:
        split = p | beam.Create(range(6)) | beam.ParDo(EvenOdd()).with_outputs("odd", main="even")
        evens = split.even | "Evens" >> beam.combiners.ToList()
        odds = split.odd | "Odds" >> beam.combiners.ToList()
        first = (
            p
            | "Once" >> beam.Create([None])
            | "First" >> beam.Map(lambda _, e: sorted(e), beam.pvalue.AsSingleton(evens))
        )
        _ = first | "Second" >> beam.Map(
            lambda f, e, o: seen.write_text(json.dumps([f, sorted(e), sorted(o)])),
            beam.pvalue.AsSingleton(evens),
            beam.pvalue.AsSingleton(odds),
        )
    assert json.loads(seen.read_text()) == [[0, 2, 4], [0, 2, 4], [1, 3, 5, 101]]


def test_a_group_by_key_after_a_flatten_shuffles_in_few_tasks(cluster, tmp_path):
    # Dask's task shuffle makes a task for each pair of input and output partitions, and a
    # Flatten adds its inputs' partitions up, as the build's counts do: this graph, four
    # reshuffled collections of 8 pieces each, grouped, ran over 500 tasks. The input is now
    # merged into 8 partitions first (4 per worker thread), and the groups are the same.
    options = PipelineOptions([f"--dask_client_address={cluster}"])
    before = sum(executed(cluster).values())
    with beam.Pipeline(runner=DaskRunner(), options=options) as p:
        parts = [
            p
            | f"Create{i}" >> beam.Create([(k % 3, k) for k in range(10 * i, 10 * i + 10)])
            | f"Spread{i}" >> beam.Reshuffle()
            for i in range(4)
        ]
        _ = (
            parts
            | beam.Flatten()
            | beam.GroupByKey()
            | beam.MapTuple(lambda k, vs: (tmp_path / str(k)).write_text(json.dumps(sorted(vs))))
        )
    ran = sum(executed(cluster).values()) - before
    groups = {int(f.name): json.loads(f.read_text()) for f in tmp_path.iterdir()}
    assert groups == {k: [v for v in range(40) if v % 3 == k] for k in range(3)}
    assert ran < 300, ran


class Bundles(beam.DoFn):
    """Writes one file per bundle, naming its elements and the process that ran it: how the
    runner cut a collection, and where the pieces went. Each element takes a tenth of a second,
    so that a worker left idle while the other works would show."""

    def __init__(self, folder: str):
        self.folder = folder

    def start_bundle(self):
        self.seen = []

    def process(self, x):
        time.sleep(0.1)
        self.seen.append(x)

    def finish_bundle(self):
        import uuid

        with open(os.path.join(self.folder, uuid.uuid4().hex), "w") as f:
            json.dump({"pid": os.getpid(), "seen": sorted(self.seen)}, f)


def _written(folder) -> list:
    return [json.loads(p.read_text()) for p in folder.iterdir()]


def test_a_side_input_runs_once_reshuffle_spreads_and_every_branch_runs(cluster, tmp_path):
    # Beam's own Dask runner computes a side input's producer again inside every task that
    # reads it, drops Reshuffle (one partition) and computes only the last transform's branch.
    # A step before one with a side input runs once over its elements, and a Reshuffle's
    # pieces run on both workers.
    folders = ("calls", "bundles", "leaves", "marks")
    calls, bundles, leaves, marks = (tmp_path / name for name in folders)
    for folder in (calls, bundles, leaves, marks):
        folder.mkdir()

    def mark(x):  # one file per call: a step run twice over its elements would show
        import uuid

        (marks / uuid.uuid4().hex).write_text(str(x))
        return x

    def produce(x):
        (calls / str(x)).write_text("")  # a second call for x would find the file there
        assert len(list(calls.iterdir())) <= 4
        return x

    options = PipelineOptions([f"--dask_client_address={cluster}"])
    with beam.Pipeline(runner=DaskRunner(), options=options) as p:
        side = p | "Side" >> beam.Create(range(4)) | "Produce" >> beam.Map(produce)
        readers = p | "Readers" >> beam.Create(range(3)) | "Spread" >> beam.Reshuffle()
        read = readers | "Read" >> beam.Map(lambda x, s: x + sum(s), beam.pvalue.AsList(side))
        _ = read | "Again" >> beam.Map(lambda x, s: x, beam.pvalue.AsList(side))
        _ = (
            p
            | "Many" >> beam.Create(range(16))
            | beam.Reshuffle()
            | beam.ParDo(Bundles(str(bundles)))
        )
        _ = read | "Leaf" >> beam.Map(lambda x: (leaves / f"read-{x}").write_text(""))
        one = p | "One" >> beam.Create([0])
        _ = (  # a step whose output is read by one with a side input, computed first
            p
            | "Once" >> beam.Create(range(8))
            | "S1" >> beam.Reshuffle()
            | "Mark" >> beam.Map(mark)
            | "Last" >> beam.Map(lambda x, s: x + s, beam.pvalue.AsSingleton(one))
        )
        _ = (
            p
            | "Other" >> beam.Create(["x"])
            | "Branch" >> beam.Map(lambda x: (leaves / "branch").write_text(""))
        )
        _ = (  # nothing to reshuffle (an input format with no files): nothing runs after it
            p
            | "Nothing" >> beam.Create([])
            | "S2" >> beam.Reshuffle()
            | "Never" >> beam.Map(lambda x: (leaves / "never").write_text(""))
        )
    assert sorted(int(c.name) for c in calls.iterdir()) == [0, 1, 2, 3]  # each once
    cut = _written(bundles)
    assert sorted(x for part in cut for x in part["seen"]) == list(range(16)), cut
    assert len({part["pid"] for part in cut}) == 2, cut  # both workers ran bundles of it
    assert sorted(c.name for c in leaves.iterdir()) == ["branch", "read-6", "read-7", "read-8"]
    assert sorted(int(m.read_text()) for m in marks.iterdir()) == list(range(8))  # each once
