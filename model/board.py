"""TensorBoard event files of a run's metrics (`--tensorboard`), written beside metrics.jsonl.

Every record the run logs becomes scalars at its step: a record's own figures under `train/`
(`train/loss`, `train/lr`, ...), a nested record's under its key (`held_out/mlm_loss` for
pre-training's periodic evaluation, `dev/accuracy` for fine-tuning's). Figures that are None
(an MLM-only run's NSP accuracy) or not numbers are left out.

A run that goes on from step s (a resumed run's checkpoint, or 0) writes a purge mark first:
TensorBoard then drops the earlier files' events after step s, as `trim_metrics` drops
metrics.jsonl's records logged after the checkpoint, so each step shows once.

The writer is torch's `SummaryWriter`, which needs the `tensorboard` package (the
`bert-shards[tensorboard]` extra); without it, `--tensorboard` is refused before the run starts.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import threading

FOLDER = "tensorboard"  # RUN/tensorboard/events.out.tfevents.*
MISSING = (
    "--tensorboard writes TensorBoard's event files, which needs the tensorboard package: "
    "pip install tensorboard (or the bert-shards[tensorboard] extra), or drop --tensorboard"
)


def check_available() -> None:
    """Refuse `--tensorboard` in one line when the writer cannot be imported."""
    _writer_class()


def _writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch says "TensorBoard logging requires TensorBoard ..."
        raise ValueError(MISSING) from None
    return SummaryWriter


def scalars(record: dict) -> list[tuple[str, float]]:
    """(tag, value) for every number of a metrics record but its step."""
    out = []
    for key, value in record.items():
        if isinstance(value, dict):
            out += [(f"{key}/{k}", v) for k, v in value.items() if _number(v)]
        elif key != "step" and _number(value):
            out.append((f"train/{key}", value))
    return out


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Board:
    """The event writer of one run: `write(record)` adds its scalars at `record["step"]` and
    flushes, so a killed run keeps what it logged, as metrics.jsonl does.

    tensorboard writes from a thread of its own, and raises what that thread met (a full
    disk) at the next write or flush, naming no file: it is raised here naming the events'
    folder, for the command's one line, and the thread's own traceback is not printed."""

    def __init__(self, run: str, done: int):
        """`done`: the steps the run has behind it (its checkpoint's; 0 for a new run)."""
        _quiet_writer_threads()
        self.folder, self.failed = os.path.join(run, FOLDER), False
        self.writer = _writer_class()(self.folder, purge_step=done + 1)

    def write(self, record: dict) -> None:
        with self._named():
            for tag, value in scalars(record):
                self.writer.add_scalar(tag, value, record["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.failed:  # said already; closing would raise the same again
            return
        with self._named():
            self.writer.close()

    @contextlib.contextmanager
    def _named(self):
        try:
            yield
        except OSError as e:
            self.failed = True
            raise OSError(e.errno, e.strerror, e.filename or self.folder) from None


def _quiet_writer_threads() -> None:
    """Leave the traceback of tensorboard's writer thread unprinted: what it met is raised
    again in the training thread, which says it in one line."""
    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args) -> None:
        if type(args.thread).__name__ != "_AsyncWriterThread":
            previous(args)

    hook.quiets_tensorboard = True
    threading.excepthook = hook
