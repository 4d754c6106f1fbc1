"""Local worker processes forked from the driver, ready before the graph runs.

Beam's local runner starts each worker of its `multi_processing` mode as a fresh interpreter
once the graph is submitted; every one imports Beam, pyarrow, NLTK and the tokenizer again
(what that costs: docs/runners.md) while the first stage waits. Here the driver forks its
workers right after it has imported all of that and before the runner starts any thread: they
begin with every module loaded and share the driver's memory pages for them. Each child waits
on a pipe until the runner asks for a worker, then runs Beam's own worker loop
(`sdk_worker_main`) with the addresses and options Beam would have passed to a fresh
interpreter.

The runner is Beam's FnApiRunner; only the worker environment it would start as subprocesses
is swapped for these children (`LocalRunner.run_via_runner_api`). A child ends when the runner
closes its control channel, or at once when the driver ends without having used it (its pipe
reads end of file), so none outlives the driver.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager

from google.protobuf import json_format, text_format

from pipeline.runners import beam_internals
from pipeline.runners.beam_internals import (
    SUBPROCESS_SDK,
    ApiServiceDescriptor,
    FnApiRunner,
    GrpcWorkerHandler,
    register_environment,
    sdk_worker_main,  # Beam's worker loop, imported here, before the fork
)
from pipeline.runners.failures import LOST_TO, WorkerLost
from schemas.interrupts import release_in_child, signals_held

# overridden below: were one gone, its override would silently never run
beam_internals.require(
    "run_via_runner_api", "start_worker", "stop_worker", "logging_api_service_descriptor"
)

FORKED_URN = "bert-shards:env:forked_python:v1"
STOP_SECONDS = 30.0  # after the run: how long a worker may take to end before it is killed
GRPC_THREADS = ("grpc", "event_engine", "lifeguard")  # gRPC's native threads, by name

_POOLS: dict[str, ForkedWorkers] = {}


class ForkedWorkers:
    """`count` children forked now, each waiting for one worker's addresses."""

    def __init__(self, count: int):
        self.key = f"{os.getpid()}-{id(self)}"
        self.waiting: deque[tuple[int, int]] = deque()  # (pid, write end of its pipe)
        self.started: list[int | subprocess.Popen] = []
        self.lost: list[tuple[int, int]] = []  # (pid, signal) of workers that died of one
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            with signals_held() as mask:
                for _ in range(count):
                    self.waiting.append(self._fork(mask))
                _POOLS[self.key] = self
        except BaseException:  # a signal held during the forks arrives as the block ends
            self.close(kill=True)
            raise

    def _fork(self, mask: set[signal.Signals]) -> tuple[int, int]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            # A terminal's Ctrl-C reaches the whole process group, these children too: they leave
            # it to the driver, which stops them as it unwinds, and end at SIGTERM.
            release_in_child(mask, sigint=signal.SIG_IGN, sigterm=signal.SIG_DFL)
            os.close(write)
            for _, earlier in self.waiting:  # so each sibling sees end of file when unused
                os.close(earlier)
            _serve(read)
        os.close(read)
        return pid, write

    def start(self, environ: dict[str, str]) -> None:
        """Hand one waiting child a worker's environment; a fresh interpreter, as Beam would
        start, once all children are taken (forking now, beside the runner's threads, is not
        safe)."""
        if not self.waiting:
            cmd = [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"]
            with signals_held():
                self.started.append(subprocess.Popen(cmd, env={**os.environ, **environ}))
            return
        pid, write = self.waiting[0]
        self.started.append(pid)  # first: reaped by close() whatever interrupts from here on
        self.waiting.popleft()
        with os.fdopen(write, "wb") as pipe:
            pipe.write(json.dumps(environ).encode())

    def close(self, kill: bool = False) -> None:
        """Release unused children, wait for the others to end (killing any still running
        after `STOP_SECONDS`, or at once with `kill`: the run failed), forget the pool."""
        _POOLS.pop(self.key, None)
        try:
            self._release_waiting()
            deadline = time.monotonic() + (0.0 if kill else STOP_SECONDS)
            for child in self.started:
                died = _reap(child, deadline)
                if died in LOST_TO:
                    self.lost.append((getattr(child, "pid", child), died))
        except BaseException:  # a signal while waiting for them: none may outlive this process
            self._release_waiting()  # those a signal left waiting, too
            for child in self.started:
                _reap(child, 0.0)
            raise
        finally:
            self.started.clear()

    @contextmanager
    def watched(self):
        """While the run goes on, a worker that dies of a signal (`LOST_TO`: the kernel's
        out-of-memory killer, a crash) raises `WorkerLost` in the driver as it dies. Beam's
        runner notices a lost worker only through a request to it still pending: one lost
        between two requests left the run waiting for its answer for ever."""

        def on_child(signum, frame) -> None:
            for child in self.started:
                pid = getattr(child, "pid", child)
                try:  # looked at, not reaped (WNOWAIT): `close` reaps it
                    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    continue
                killed = info is not None and info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                if killed and info.si_status in LOST_TO:
                    raise WorkerLost(pid, info.si_status)

        previous = signal.signal(signal.SIGCHLD, on_child)
        try:
            yield
        finally:
            signal.signal(signal.SIGCHLD, previous)

    def _release_waiting(self) -> None:
        """Close the pipes of the children still waiting (each reads end of file and ends) and
        move them to `started`, to be reaped; each is in `started` before its pipe closes."""
        while self.waiting:
            pid, write = self.waiting[0]
            self.started.append(pid)
            self.waiting.popleft()
            os.close(write)


def fork_is_safe() -> bool:
    """Whether this process may fork workers: on Linux, with no thread that a child would
    miss holding a lock (any Python thread beside this one, or gRPC's, which a graph run
    before in this process leaves behind). Otherwise Beam starts fresh interpreters."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return False
    try:
        tasks = os.listdir("/proc/self/task")
        names = []
        for task in tasks:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
    except OSError:
        return False
    return not any(n.startswith(GRPC_THREADS) for n in names)


def _reap(child: int | subprocess.Popen, deadline: float) -> int | None:
    """Wait for a child to end, killing it once `deadline` has passed; the signal it had died
    of before that, if any."""
    if isinstance(child, subprocess.Popen):
        if child.poll() is not None:
            return -child.returncode if child.returncode < 0 else None
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return None
    try:
        while (ended := os.waitpid(child, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                return None
            time.sleep(0.01)
    except ChildProcessError:  # reaped already
        return None
    return os.WTERMSIG(ended[1]) if os.WIFSIGNALED(ended[1]) else None


def _serve(read: int) -> None:
    """In a child: wait for a worker's environment, run Beam's worker loop, exit."""
    code = 1
    try:
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        if not data:  # the driver ended or did not need this worker
            code = 0
        else:
            os.environ.update(json.loads(data))
            sdk_worker_main([])
            code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@register_environment(FORKED_URN, bytes)
class ForkedWorkerHandler(GrpcWorkerHandler):
    """Beam's handle on one worker: hands the worker's addresses to a forked child."""

    def __init__(self, payload: bytes, state, provision_info, grpc_server):
        super().__init__(state, provision_info, grpc_server)
        self._pool = _POOLS[payload.decode()]

    def start_worker(self) -> None:
        options = self.provision_info.provision_info.pipeline_options
        control = ApiServiceDescriptor(url=self.control_address)
        self._pool.start(
            {
                "CONTROL_API_SERVICE_DESCRIPTOR": text_format.MessageToString(control),
                "LOGGING_API_SERVICE_DESCRIPTOR": text_format.MessageToString(
                    self.logging_api_service_descriptor()
                ),
                "PIPELINE_OPTIONS": json_format.MessageToJson(options),
                "WORKER_ID": self.worker_id,
            }
        )

    def stop_worker(self) -> None:
        pass  # the child ends when its control channel closes; the pool reaps it


class LocalRunner(FnApiRunner):
    """Beam's FnApiRunner whose `multi_processing` workers are the pool's forked children."""

    workers_forked_here = True  # `run.steps_run_here`

    def __init__(self, pool: ForkedWorkers, provision_info):
        super().__init__(provision_info=provision_info)
        self._pool_key = pool.key

    def run_via_runner_api(self, pipeline_proto, options):
        for env in pipeline_proto.components.environments.values():
            if env.urn == SUBPROCESS_SDK:
                env.urn, env.payload = FORKED_URN, self._pool_key.encode()
        return super().run_via_runner_api(pipeline_proto, options)
