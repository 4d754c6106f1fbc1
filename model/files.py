"""Text files the model package writes (configs, metrics, results, predictions): atomic, and
with the permissions any new file gets (0644 under the usual umask 022).

`schemas.manifest.atomic_write_text` writes through `tempfile.mkstemp`, and safetensors'
`save_file` through its own writer, and both create the file 0600 whatever the umask; a
`config.json` or `model.safetensors` that only its writer can read breaks sharing a run or an
export, so the mode is put back to what `open` would have given.
"""

from __future__ import annotations

import os

from schemas.manifest import atomic_write_text


def default_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0666 less the process umask."""
    umask = os.umask(0)  # the only way to read it is to set it
    os.umask(umask)
    return 0o666 & ~umask


def write_text(path: str, text: str) -> str:
    """Write `text` to `path` atomically (temporary file, fsync, rename); returns `path`."""
    atomic_write_text(path, text)
    os.chmod(path, default_mode())
    return path


def publish(tmp: str, path: str) -> str:
    """Rename a finished temporary file onto `path`, with the mode a new file gets."""
    os.chmod(tmp, default_mode())
    os.replace(tmp, path)
    return path
