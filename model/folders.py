"""What a folder holds, told by the files each command leaves in it: a shard set, a
pre-training run, a fine-tuning run, or a Hugging Face model directory (an export, or what
`save_pretrained` writes).

Each command writes into a folder of its own kind only: pre-training's last.pt inside a shard
set, fine-tuning's metrics.jsonl over a pre-training run's, or an export's tokenizer files over
a shard set's would each spoil the other folder without a word. The same names let a refusal
say what a wrong path is (`--init RUN` is a run folder, not a model directory) and what to pass
instead. The checks of a command's paths that need nothing of torch live here too: a URL where
only local folders do, and a compile folder whose path torch cannot hand to g++.
"""

from __future__ import annotations

import errno
import os

from model.config import flag_hint
from schemas.manifest import MANIFEST_NAME

SHARD_SET = "a shard set"
PRETRAINING_RUN = "a pre-training run"
FINETUNING_RUN = "a fine-tuning run"
MODEL_DIRECTORY = "a Hugging Face model directory"

# kind -> the files that only that kind holds, the most telling first. A `metrics.jsonl`,
# `vocab.txt`, `config.json` or `shards/` folder is no sign: other folders hold them too (a
# project's root may hold a config.json and its shards/), and refusing those would be wrong.
MARKERS: dict[str, tuple[str, ...]] = {
    SHARD_SET: (MANIFEST_NAME,),
    PRETRAINING_RUN: ("last.pt", "train_config.json", "eval.json", ".run.lock"),
    FINETUNING_RUN: ("model.pt", "best.pt", "best.json", "results.json"),
    MODEL_DIRECTORY: ("model.safetensors", "pytorch_model.bin"),
}


def folder_kind(path: str) -> tuple[str, str] | None:
    """(kind, the file that tells it) for a folder one of the commands made, else None."""
    if not os.path.isdir(path):
        return None
    for kind, names in MARKERS.items():
        for name in names:
            if os.path.lexists(os.path.join(path, name)):
                return kind, name
    return None


def run_folder_line(path: str, found: tuple[str, str] | None) -> str | None:
    """For a --ckpt that is a pre-training run folder (`found`, its `folder_kind`), the line
    that names the checkpoint to pass instead; else None."""
    if found and found[0] == PRETRAINING_RUN:
        return (
            f"--ckpt {path} is a pre-training run folder; pass its checkpoint, "
            f"{flag_hint('--ckpt', os.path.join(path, 'last.pt'))}"
        )
    return None


def check_own_kind(path: str, flag: str, own: str, hint: str) -> None:
    """Refuse, before any work, an output folder that holds another kind's files than `own`:
    writing there would mix this command's files with that folder's, or replace them."""
    found = folder_kind(path)
    if found is None or found[0] == own:
        return
    kind, name = found
    raise ValueError(
        f"{flag} {path} holds {kind} ({name}), not {own}; writing there would mix its files "
        f"with this command's or replace them: choose another {hint}"
    )


# command -> the flags that name local files or folders only (the shard set alone may be gs://)
LOCAL_ONLY: dict[str, tuple[str, ...]] = {
    "pretrain": ("run", "init", "shard_cache"),
    "finetune": ("data", "ckpt", "run"),
    "glue": ("data", "ckpt", "run"),
    "export": ("ckpt", "out"),
    "evaluate": ("ckpt", "out", "shard_cache"),
}


def check_local_paths(command: str, values: dict) -> None:
    """Refuse, before any work, a URL where a command reads or writes local folders only: the
    filesystem would take `gs://b/run` for a folder `gs:` here, and a run said to go to a bucket
    would stay on this machine."""
    for dest in LOCAL_ONLY.get(command, ()):
        given = values.get(dest)
        for path in given if isinstance(given, list) else [given]:  # a flag of several paths
            if path and "://" in path:
                flag = "--" + dest.replace("_", "-")
                raise ValueError(
                    f"{flag} {path}: a URL, but {flag} names a local file or folder; give a path "
                    "on this machine (copy from a bucket first, and results to it after)"
                )


def check_compile_folder(values: dict) -> None:
    """Refuse, before any work, `--compile` on the CPU where inductor's C++ would be compiled in
    a folder whose path holds whitespace: torch passes g++ that path unquoted (its precompiled
    header goes under TMPDIR), and the first step ends in a compile error of many lines."""
    if not values.get("compile") or not str(values.get("device", "cpu")).startswith("cpu"):
        return
    import tempfile

    for name, folder in (
        ("TMPDIR", tempfile.gettempdir()),
        ("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")),
    ):
        if any(c.isspace() for c in folder):
            raise ValueError(
                f"--compile on the CPU: torch's inductor cannot compile C++ under {name} "
                f"{folder!r}, whose path holds a space; set {name} to a folder without one, or "
                "leave out --compile"
            )


UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def unwritable_line(e: OSError, then: str = "") -> str:
    """What the filesystem refused, in one line: which path, why, and what to do; a full disk
    or quota with `then`, how to go on once there is space (`how_to_go_on`)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        if then:
            return f"{e.filename}: {e.strerror}; free some space there, then {then}"
        return f"{e.filename}: {e.strerror}; free some space or choose another folder"
    if e.errno == errno.EROFS:
        return f"{e.filename}: {e.strerror}; choose another folder or remount it writable"
    return f"{e.filename}: {e.strerror}; choose another folder or fix its rights"
