"""One pre-training or fine-tuning run at a time in a run directory.

Two runs writing one `RUN` would both train, and the later writer would own `last.pt`, the
metrics and the config without a word. `RunLock` holds an exclusive `flock` on `RUN/.run.lock`
for the whole run (rank 0 only: under torchrun the ranks of one run share its directory): a
second run into the same directory is refused at once, naming the first (pid, host, start). The
kernel releases the lock when the process ends, however it ends, so a killed run never leaves a
stale lock behind; the empty file stays (it is the run's).
"""

from __future__ import annotations

import os
import platform
import time

from model.config import flag_hint
from schemas import file_lock

LOCK_NAME = ".run.lock"
# Fine-tuning's own lock file: `.run.lock` tells a pre-training run's folder (`model.folders`).
FINETUNE_LOCK_NAME = ".finetune.lock"


def holder(command: str = "pretrain") -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
    return f"{command} pid {os.getpid()} on {platform.node()} (since {started})"


class RunLock:
    """An exclusive lock on a run directory while a run trains into it: pre-training's, or with
    `command="finetune"` fine-tuning's (its own lock file)."""

    def __init__(self, run: str, take: bool = True, command: str = "pretrain", hint: str = ""):
        self.run, self.take = run, take  # take: False on ranks other than 0 (a no-op)
        self.command, self.hint = command, hint or flag_hint("--run", "DIR")  # the refusal's
        self.name = LOCK_NAME if command == "pretrain" else FINETUNE_LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        if not self.take:
            return self
        os.makedirs(self.run, exist_ok=True)
        try:
            fd = file_lock.take(os.path.join(self.run, self.name), holder(self.command))
        except file_lock.Held as held:
            raise ValueError(
                f"{self.run}: {held.holder or 'another run'} is training into it now; wait for it "
                f"to finish, or choose another {self.hint}"
            ) from None
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the flock
            self.fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
