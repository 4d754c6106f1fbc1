"""The one line a failed build prints, found in what the runner raised: in-process, a step's own
exception; from a worker process, the exception's last line inside Beam's wrapped text."""

from __future__ import annotations

import pytest

from pipeline.files.chunks import DamagedChunkError
from pipeline.runners.failures import LOST, failure_line

WORKER_TEXT = """Error processing instruction 7. Original traceback is
Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1501, in process
  File "/work/pipeline/files/chunks.py", line 210, in read_units
    raise DamagedChunkError(path, what)
{line} [while running 'CreateInstances/Bucket']
"""


def test_a_damaged_chunk_in_process_is_its_own_line():
    e = DamagedChunkError("/o/shards/.building/tmp/u-3.arrow", "record batch 2 at byte 96")
    wrapped = RuntimeError("the runner failed")
    wrapped.__cause__ = e
    assert failure_line(wrapped) == str(e)
    assert "\n" not in failure_line(wrapped)


def test_a_damaged_chunk_in_a_worker_is_found_in_beams_text():
    e = DamagedChunkError("/o/shards/.building/tmp/u-3.arrow", "record batch 2 at byte 96")
    text = WORKER_TEXT.format(line=f"pipeline.files.chunks.DamagedChunkError: {e}")
    assert failure_line(RuntimeError(text)) == str(e)


def test_an_unknown_failure_says_to_run_with_verbose():
    line = failure_line(RuntimeError(WORKER_TEXT.format(line="KeyError: 'x'")))
    assert line.startswith("the build failed: ") and "--verbose" in line


def test_a_failed_grpc_call_is_said_by_its_details():
    """As a portable job's runner reports a worker it could not reach: gRPC's error ends with a
    line of ">" alone, which said nothing."""
    text = (
        "Pipeline job-1 failed in state FAILED: Error running pipeline.\n"
        "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
        "\tstatus = StatusCode.UNAVAILABLE\n"
        '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: '
        'ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused"\n'
        '\tdebug_error_string = "UNAVAILABLE:failed to connect to all addresses"\n'
        ">"
    )
    assert failure_line(RuntimeError(text)) == (
        "the build failed: failed to connect to all addresses; last error: UNKNOWN: "
        "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused (run again "
        "with --verbose for the traceback)"
    )
    assert failure_line(RuntimeError("it broke\n>\n")).startswith("the build failed: it broke (")


def test_a_long_last_line_keeps_its_end():
    """As a docker environment the machine cannot start ends: the command is long, and how it
    ended is at the end of the line."""
    command = ["docker", "run", "-d", "--network=host", "apache/beam_python3.11_sdk:2.77.0"]
    command += [f"--endpoint_{i}=localhost:{30000 + i}" for i in range(12)]
    said = f"subprocess.CalledProcessError: Command '{command}' returned non-zero exit status 125."
    line = failure_line(RuntimeError(f"Pipeline failed.\n{said}"))
    assert line.startswith("the build failed: subprocess.CalledProcessError: Command '['docker'")
    kept = line.removeprefix("the build failed: ")
    kept = kept.removesuffix(" (run again with --verbose for the traceback)")
    assert len(said) > 300 and kept == f"{said[:150]} ... {said[-150:]}"
    assert kept.endswith("returned non-zero exit status 125.")


def test_a_download_that_failed_as_the_runner_started_names_the_url_and_the_reason(tmp_path):
    """Beam's own jar fetch (as Flink's and Spark's runners start), from a loopback port where
    nothing listens: its last word is that the URL is no filesystem path; the line says why."""
    from apache_beam.utils.subprocess_server import JavaJarServer

    url = "http://127.0.0.1:1/beam-runners-flink-job-server.jar"
    with pytest.raises(RuntimeError) as caught:  # what the runner's start raises into the build
        JavaJarServer.local_jar(url, str(tmp_path))
    line = failure_line(caught.value)
    assert line.startswith(f"Beam could not download {url} as the runner started (")
    assert "Connection refused" in line and line.endswith("(see docs/runners.md)")
    assert "\n" not in line


def test_an_error_of_a_subclass_in_a_worker_is_its_own_line():
    """A repeated id, raised in a forked worker as the class Beam names by its module: the
    line was the generic one, its middle (what to do) cut out to keep it short."""
    from pipeline.core.buckets import RepeatedIdError

    e = RepeatedIdError.of("jsonl:0", " (read from /d/de.jsonl, /d/fr.jsonl)")
    assert len(str(e)) > 300
    text = WORKER_TEXT.format(line=f"pipeline.core.buckets.RepeatedIdError: {e}")
    assert failure_line(RuntimeError(text)) == str(e)


def test_a_worker_whose_connection_closed_is_said_lost():
    """As the portable job API's runner reports a worker of its pool killed in the middle of a
    bundle (the driver cannot see it die): Beam's words alone said nothing of why or what next;
    the line begins as a lost worker's does, which the command ends with --resume."""
    text = (
        "Pipeline job-1 failed in state FAILED: Traceback (most recent call last):\n"
        '  File "apache_beam/runners/worker/data_plane.py", line 594, in input_elements\n'
        "    raise RuntimeError('Channel closed prematurely.')\n"
        "RuntimeError: Channel closed prematurely."
    )
    line = failure_line(RuntimeError(text))
    assert line.startswith(f"{LOST} of the job ended in the middle of its work (Beam: "), line
    assert "out-of-memory killer" in line and "\n" not in line


def test_a_task_dask_gave_up_is_said_as_its_workers_lost():
    """Dask's KilledWorker, as the driver's error carries it: its text was cut in the middle,
    the task's step among what was cut; the line names the step and begins as a lost
    worker's does, which the command ends with --resume."""
    text = (
        "Attempted to run task ('from_sequence-step_Tokenize_Encode-76fe962b944d58e7c861205f695e"
        "417b', 0) on 4 different workers, but all those workers died while running it. The "
        "last worker that attempt to run the task was tcp://127.0.0.1:37893. Inspecting worker "
        "logs is often a good next step to diagnose what went wrong. For more information see "
        "https://distributed.dask.org/en/stable/killed.html."
    )
    line = failure_line(RuntimeError(text))
    assert line.startswith(
        f"{LOST} of the Dask cluster died running one task of step Tokenize_Encode, 4 time(s) "
        "in all (Dask gave it up: KilledWorker): killed, as the kernel's out-of-memory killer"
    ), line
