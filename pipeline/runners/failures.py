"""What a run that failed or was stopped says, and what it leaves behind: the one line for a
failed step (its own message, found in the runner's wrapped error), for a download the runner
could not make, the interrupt a runner's error wraps, and the cancel of a job that runs apart
from the driver when a signal stops it, and a worker process that died of a signal, or that the
runner lost without seeing it die (a portable job's pool worker, a task Dask gave up)."""

from __future__ import annotations

import re
import signal

from pipeline.runners.beam_internals import STEP_SUFFIX
from schemas.command_line import exception_chain
from schemas.storage_errors import StoreError

# a step's own error, as a worker's traceback ends: Python's, or one of this package's, whose
# qualified name Beam prints (`pipeline.core.buckets.RepeatedIdError: ...`)
OWN_ERROR = r"\b(?:pipeline|schemas)(?:\.\w+)*\.\w*(?:Error|NoCredentials)"
INPUT_ERROR = re.compile(
    rf"(?:ValueError|FileNotFoundError|{OWN_ERROR}): (.+?)(?:{STEP_SUFFIX})?$",
    re.M,
)
WHILE_RUNNING = re.compile(f"{STEP_SUFFIX}$")

# Signals a worker dies of that no one here sends it: the kernel's out-of-memory killer (or a
# user's `kill -9`), and a crash in native code.
LOST_TO = (signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL)
LOST = "a worker process"  # how `WorkerLost`'s line begins


# Beam's runner on a worker whose connection closed in the middle of a bundle: one it cannot
# see die (the portable job API's worker pool, on another machine), or one that ended without a
# signal
CLOSED = "Channel closed prematurely."
WENT_SILENT = (
    f"{LOST} of the job ended in the middle of its work (Beam: {CLOSED}): killed, as the "
    "kernel's out-of-memory killer kills when memory runs out (`dmesg` on its machine says; "
    "fewer workers per machine hold less), or crashed (its log says)"
)


# Dask's scheduler giving a task up (`distributed.KilledWorker`) once the workers that ran it
# died `distributed.scheduler.allowed-failures` + 1 times; the task's name holds its step's
# (`dask_runner.task_prefix`)
GAVE_UP = re.compile(
    r"Attempted to run task (.+?) on (\d+) different workers, but all those workers died"
)
TASK_STEP = re.compile(r"step_(\w+?)-[0-9a-f]{8,}")


def killed_worker_line(gave_up: re.Match) -> str:
    step = TASK_STEP.search(gave_up.group(1))
    which = f" of step {step.group(1)}" if step else ""
    return (
        f"{LOST} of the Dask cluster died running one task{which}, {gave_up.group(2)} "
        "time(s) in all (Dask gave it up: KilledWorker): killed, as the kernel's out-of-memory "
        "killer kills when memory runs out (`dmesg` on the workers' machines says; fewer "
        "workers or threads per machine hold less), or crashed (the workers' logs say)"
    )


class WorkerLost(RuntimeError):
    """A worker process died of a signal during the run (`LOST_TO`), which is why it failed."""

    def __init__(self, pid: int, signum: int):
        name = signal.Signals(signum).name
        why = (
            "which the kernel's out-of-memory killer sends when memory runs out (`dmesg` "
            "says; fewer --workers hold less)"
            if signum == signal.SIGKILL
            else "a crash in native code"
        )
        super().__init__(f"{LOST} (pid {pid}) was killed by {name}, {why}")


def cancel_job(result, stream) -> None:
    """A job that a runner's service runs apart from this process (Beam's portable job API,
    Dask, Dataflow), cancelled when a signal stops the build: left running, it would go on
    writing into OUT's build area after OUT's lock was released, under a resumed or new build.
    `result` is None where the graph ran in this process and its workers (the local runner),
    which stop with it, or a job that has ended (the signal came after). A cancel that fails is
    said on `stream`, since the job may still run."""
    from pipeline.runners.beam_internals import PipelineState

    if result is None:
        return
    try:
        if not PipelineState.is_terminal(result.state):
            result.cancel()
    except Exception as e:  # the stop goes on; the job's fate is said
        print(
            f"warning: the runner's job was not cancelled ({type(e).__name__}: {e}); it may "
            "still be running: cancel it with the runner's own tools before --resume",
            file=stream,
        )


def interrupt_inside(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or a signal raised as one) that a runner's own error
    wraps, when a step running in this process was interrupted; else None."""
    return next((x for x in exception_chain(e) if isinstance(x, KeyboardInterrupt)), None)


def failure_line(e: BaseException) -> str:
    """The message a build step raised, found in the runner's wrapped exception text; or what
    Beam could not download as the runner started (a job server's jar, Prism's binary)."""
    download = failed_download(e)
    if download:
        return download
    texts = []
    for x in exception_chain(e):
        if isinstance(x, (ValueError, FileNotFoundError, StoreError, WorkerLost)):  # in-process
            return WHILE_RUNNING.sub("", str(x).strip().splitlines()[-1])
        texts.append(str(x))
    found = [m.group(1) for t in texts for m in INPUT_ERROR.finditer(t)]
    if found:
        return found[-1]
    if any(CLOSED in t for t in texts):
        return WENT_SILENT
    killed = next((m for t in texts for m in [GAVE_UP.search(t)] if m), None)
    if killed:
        return killed_worker_line(killed)
    details = [m.group(1) for t in texts for m in GRPC_DETAILS.finditer(t)]  # a failed call
    lines = (ln for t in texts for ln in reversed(t.splitlines()) if any(c.isalnum() for c in ln))
    last = details[-1] if details else next(lines, "")
    return f"the build failed: {shortened(last)} (run again with --verbose for the traceback)"


def shortened(line: str, most: int = 300) -> str:
    """A line of at most about `most` characters: a longer one keeps its start and its end,
    where a failed command's line says how it ended (`returned non-zero exit status 125`)."""
    line = line.strip()
    if len(line) <= most:
        return line
    return f"{line[: most // 2]} ... {line[-(most // 2) :]}"


GRPC_DETAILS = re.compile(r'^\s*details = "(.*)"\s*$', re.M)  # gRPC's error, as it prints it


def failed_download(e: BaseException | None) -> str | None:
    """One line for a runner whose start needed a download that failed (Flink's and Spark's job
    server jars, Prism's binary, offline): Beam's last word on it is that it could not open the
    URL as a filesystem path, which hides the reason, urlopen's error before it."""
    from urllib.error import URLError

    chain = exception_chain(e)
    failed = next((x for x in chain if isinstance(x, URLError)), None)
    if failed is None:
        return None
    url = next((m.group(0).rstrip(":.,") for x in chain for m in URL.finditer(str(x))), None)
    return (
        f"Beam could not download {url or 'what the runner needs'} as the runner started "
        f"({failed.reason}); give the runner a local copy or a running job service (see "
        "docs/runners.md)"
    )


URL = re.compile(r"https?://\S+")
