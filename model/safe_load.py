"""Reading a torch file (a checkpoint, a `pytorch_model.bin`) without ever running its code, and
writing one (`save_weights`) so that neither a crash nor Ctrl-C leaves half of it.

`load_weights` is the one call to `torch.load` in the package, always with `weights_only=True`:
plain tensors, numbers, strings and containers of them are read; a pickle that holds anything
else (a class, a function such as `os.system`) is refused before any of it runs. torch says so
in several lines that end with the advice to retry with `weights_only=False`, which would run
that code; here the refusal is one line naming the file, and the way out is a safetensors file,
which holds tensors and nothing that can run.
"""

from __future__ import annotations

import pickle
import re
import warnings
import zipfile

import torch

from schemas.interrupts import signals_held
from schemas.manifest import atomic_write

CONVERT_HINT = (
    "save the weights as safetensors where they were made (save_pretrained(..., "
    "safe_serialization=True), or safetensors.torch.save_file) and pass that"
)


class PickledCodeError(ValueError):
    """A torch file holds pickled code or objects beyond plain tensors; nothing of it ran."""


def save_weights(path: str, state: dict) -> None:
    """`torch.save` published atomically (a temporary file beside `path`, fsync, rename), with
    Ctrl-C and SIGTERM held until it is written: raised inside `torch.save`, an interrupt
    became its writer's own error (`RuntimeError: ... unexpected pos`), a traceback. So does a
    write the disk refuses (full, or failing): the `OSError` it met is raised instead, naming
    `path` (the file object's own error names no file), for the command's one line."""
    with signals_held():
        try:
            atomic_write(path, lambda f: torch.save(state, f))
        except (OSError, RuntimeError) as e:
            met = e if isinstance(e, OSError) else e.__context__
            if not isinstance(met, OSError):
                raise
            raise OSError(met.errno, met.strerror, met.filename or path) from None


def load_weights(path: str, map_location: str | torch.device | None = "cpu", mmap: bool = False):
    """`torch.load(path, weights_only=True)`; a pickle beyond plain tensors raises
    `PickledCodeError` in one line. Other failures (a missing, truncated or damaged file) are
    torch's own, for the caller to word. With `mmap`, the tensors are mapped from the file and
    read only where used (a checkpoint's optimizer state, never, when its model is all that is
    wanted); a file in torch's legacy format, which cannot be mapped, is read whole."""
    mmap = mmap and zipfile.is_zipfile(path)
    with warnings.catch_warnings():  # torch warns about pickle protocols it may not read
        warnings.filterwarnings("ignore", module=r"torch\._weights_only_unpickler")
        try:
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
        except pickle.UnpicklingError as e:
            raise PickledCodeError(refusal(path, str(e))) from None


def refusal(path: str, torch_message: str) -> str:
    """The one line for a pickle that is not plain weights, naming what torch found in it."""
    found = re.search(r"GLOBAL (\S+)", torch_message)
    if found:
        what = f"pickled code (it names {found.group(1)})"
    else:
        opcode = re.search(r"Unsupported operand (\d+)", torch_message)
        detail = f" (pickle opcode {opcode.group(1)})" if opcode else ""
        what = f"a pickle that is not plain tensors{detail}, so possibly code"
    return f"{path}: holds {what}, which is never loaded; {CONVERT_HINT}"
