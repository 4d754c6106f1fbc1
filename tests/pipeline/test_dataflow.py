"""The Dataflow job, built offline and without credentials (Beam's `--dry_run`): the whole
build is in it, the package is staged for the workers, and nothing touched the inputs.

Building the job description needs Beam's Dataflow client (the `gcp` extra,
`apache-beam[gcp]`), as `make shards RUNNER=DataflowRunner` does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.build import BuildConfig, build
from pipeline.files.listing import InputSpec
from pipeline.runners.run import make_pipeline, pipeline_options, submission_folder
from pipeline.stages.dedup import DedupConfig

pytest.importorskip(
    "apache_beam.runners.dataflow.internal.apiclient",
    reason="needs the gcp extra (pip install 'apache-beam[gcp]==2.77.0'), as Dataflow runs do",
)

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "gs://example-bucket"
STAGES = [
    "ReadDocuments/PlanReads",
    "ReadDocuments/SpreadFiles",
    "ReadDocuments/Read",
    "Deduplicate/Render",
    "Deduplicate/Deduplicate/SmallestId",
    "Deduplicate/Deduplicate/Paragraphs/Join",
    "SplitSentences",
    "TrainVocab",
    "Tokenize",
    "CreateInstances",
    "Counts",
    "WriteShards",
]


@pytest.fixture(scope="module")
def submitted():
    """The job, the files Beam staged for it (found in the build's submission folder), and
    that folder, removed once the run has ended."""
    args = ["--project", "example-project", "--region", "europe-west4"]
    args += ["--temp_location", f"{BUCKET}/tmp", "--job_name", "bert-shards-test"]
    args += ["--setup_file", str(ROOT / "setup.py"), "--dry_run", "True"]
    cfg = BuildConfig(
        inputs=(
            InputSpec("wikipedia", f"{BUCKET}/dumps/enwiki-*-multistream.xml.bz2"),
            InputSpec("books", f"{BUCKET}/bookscorpus/"),
        ),
        out=f"{BUCKET}/shards",
        dedup=DedupConfig(),
    )
    options = pipeline_options(args, "DataflowRunner", 0)
    with submission_folder(options) as folder:
        p = make_pipeline(options)
        build(p, cfg)
        job = p.run().job
        staged = [name for _, _, names in os.walk(folder) for name in names]
    return job, staged, folder


@pytest.fixture(scope="module")
def job(submitted):
    return submitted[0]


@pytest.mark.slow
def test_beams_staged_files_go_into_a_folder_removed_after_the_run(submitted) -> None:
    """Beam leaves the folders it stages a job's files in; the build's own is gone."""
    _, staged, folder = submitted
    assert "pickled_main_session" in staged
    assert [n for n in staged if n.startswith("bert_shards-") and n.endswith(".tar.gz")]
    assert not os.path.exists(folder)


def transform_names(job) -> set[str]:
    return {t.unique_name for t in job.proto_pipeline.components.transforms.values()}


def test_the_job_holds_every_stage(job) -> None:
    names = transform_names(job)
    missing = [s for s in STAGES if not any(n == s or n.startswith(s + "/") for n in names)]
    assert not missing


def test_the_package_is_staged_for_the_workers(job) -> None:
    [env] = job.proto_pipeline.components.environments.values()
    assert env.urn == "beam:env:docker:v1"
    staged = b" ".join(d.role_payload for d in env.dependencies)
    assert b"workflow.tar.gz" in staged  # the sdist built from setup.py / pyproject.toml


def test_the_job_carries_the_cloud_options(job) -> None:
    options = job.options.get_all_options()
    assert options["project"] == "example-project" and options["region"] == "europe-west4"
    assert options["temp_location"].startswith(f"{BUCKET}/tmp")
    assert job.proto.name == "bert-shards-test"
    assert job.root_staging_location.startswith(f"{BUCKET}/")


def test_every_dofn_in_the_job_unpickles(job) -> None:
    """What workers receive: each step's DoFn, pickled at construction, loads back."""
    import apache_beam as beam
    from apache_beam.internal import pickler
    from apache_beam.portability import common_urns, python_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    ours = set()
    for t in job.proto_pipeline.components.transforms.values():
        if t.spec.urn != common_urns.primitives.PAR_DO.urn:
            continue
        payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
        if payload.do_fn.urn != python_urns.PICKLED_DOFN_INFO:
            continue  # a runner-native step
        fn = pickler.loads(payload.do_fn.payload)[0]
        assert isinstance(fn, beam.DoFn), t.unique_name
        if type(fn).__module__.startswith("pipeline."):
            ours.add(type(fn).__name__)
    assert {
        "ReadFile",
        "RenderChunk",
        "EmitKept",
        "RebuildDocument",
        "SplitChunk",
        "TokenizeChunk",
        "BuildBucket",
    } <= ours
