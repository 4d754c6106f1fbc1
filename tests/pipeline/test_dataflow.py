"""The Dataflow job, built offline and without credentials (Beam's `--dry_run`): the whole
build is in it, the package is staged for the workers, and nothing touched the inputs.

Building the job description needs Beam's Dataflow client (the `gcp` extra,
`apache-beam[gcp]`), as `make shards RUNNER=DataflowRunner` does.
"""

from __future__ import annotations

import os

import pytest

from pipeline.runners.run import pipeline_options
from tests.helpers import DATAFLOW_BUCKET as BUCKET
from tests.helpers import dataflow_dry_run

pytest.importorskip(
    "apache_beam.runners.dataflow.internal.apiclient",
    reason="needs the gcp extra (pip install 'apache-beam[gcp]==2.77.0'), as Dataflow runs do",
)

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
    return dataflow_dry_run()


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


CLOUD_ARGS = ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west4"]


@pytest.mark.parametrize(
    "extra, asks",
    [
        ([], True),  # Beam looks up, or makes, the project's default bucket
        (["--temp_location", f"{BUCKET}/tmp"], True),  # and asks whether it keeps deleted objects
        (["--staging_location", f"{BUCKET}/staging"], True),
        (["--temp_location", f"{BUCKET}/tmp", "--dry_run", "True"], False),
        (["--dry_run", "True"], True),  # a dry run still looks the default bucket up
        (["--dataflow_kms_key", "k"], False),  # no default bucket with a key of one's own
        (["--temp_location", "gs://", "--dry_run", "True"], True),  # no path Beam accepts
    ],
)
def test_beams_check_of_dataflows_options_is_known_to_ask_google_cloud(extra, asks) -> None:
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

    from pipeline.runners.beam_internals import create_runner
    from pipeline.runners.run import asks_google_cloud

    options = pipeline_options([*CLOUD_ARGS[2:], *extra], "DataflowRunner", 0)
    validator = PipelineOptionsValidator(options, create_runner("DataflowRunner"))
    assert asks_google_cloud(options, validator) is asks
    without_project = pipeline_options(["--region", "europe-west4"], "DataflowRunner", 0)
    validator = PipelineOptionsValidator(without_project, create_runner("DataflowRunner"))
    assert not asks_google_cloud(without_project, validator)  # Beam names what is missing
    local = pipeline_options(CLOUD_ARGS[2:], "DirectRunner", 1)
    validator = PipelineOptionsValidator(local, create_runner("DirectRunner"))
    assert not asks_google_cloud(local, validator)


@pytest.mark.parametrize("extra", [[], ["--temp_location", f"{BUCKET}/tmp"]])
def test_dataflow_without_credentials_is_one_line_in_seconds(tmp_path, monkeypatch, extra):
    """Beam's check of the options would call Google Cloud without credentials, anonymously,
    and wait two minutes offline; the build names what is missing first."""
    from pipeline.files import gcs
    from pipeline.shell.cli import main

    monkeypatch.setattr(gcs, "_CLIENT", None)  # a client an earlier test made
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-key.json"))
    argv = ["build", "--input", f"text:{BUCKET}/in", "--out", f"{BUCKET}/out", *CLOUD_ARGS]
    with pytest.raises(SystemExit) as e:
        main([*argv, *extra])
    message = str(e.value.code)
    assert message.startswith(
        "error: --runner DataflowRunner: its options are checked in Google Cloud, and gs:// "
        "needs Google Cloud credentials (File "
    )
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "\n" not in message


def test_dataflow_without_network_is_one_line_in_seconds(monkeypatch):
    """No network: here, a store's address (as an emulator's, which the client reaches without
    credentials) where nothing listens."""
    from pipeline.files import gcs
    from pipeline.shell.cli import main
    from schemas import storage
    from tests.gcs_emulator import free_port

    monkeypatch.setattr(gcs, "_CLIENT", None)
    monkeypatch.setattr(storage, "CONNECT_PAUSE", 0.0)
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{address}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    argv = ["build", "--input", f"text:{BUCKET}/in", "--out", f"{BUCKET}/out", *CLOUD_ARGS]
    with pytest.raises(SystemExit) as e:
        main(argv)
    message = str(e.value.code)
    assert message.startswith(
        "error: --runner DataflowRunner: its options are checked in Google Cloud, and gs:// "
        f"cannot be reached: {address} took no connection"
    )
    assert "\n" not in message
