"""The run directory of pre-training: created (or re-entered on --resume) with the shards' vocab
and tokenizer and the run's train_config.json; later it holds metrics.jsonl, eval.json and the
checkpoint `last.pt`.

A checkpoint holds everything the rest of a run depends on (weights, optimizer, schedule, every
rank's RNG, the loader's position), written atomically, so that `--resume` reproduces an
uninterrupted run exactly and a run killed at any moment (SIGKILL included) continues from its
last checkpoint.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

import torch
import torch.distributed as dist

from model.config import TrainConfig, flag_hint
from model.run_lock import LOCK_NAME, RunLock
from model.run_shards import KEY as SHARD_SET_KEY
from model.run_shards import shard_set_entry
from model.safe_load import PickledCodeError, load_weights, save_weights
from model.training import Dist, Trainer
from schemas import storage
from schemas.manifest import atomic_write_text
from schemas.reader import ShardSet
from schemas.vocab import Vocab

CHECKPOINT = "last.pt"
METRICS = "metrics.jsonl"
EVAL = "eval.json"


def check_output_dir(path: str, flag: str, hint: str = "") -> None:
    """Refuse, before any work, an output directory that cannot be made: a file where it or a
    folder above it should be would otherwise end the command, after the work, in makedirs'
    traceback. `hint`: the flag as the refusal spells it (default: `flag_hint(flag, 'DIR')`)."""
    hint = hint or flag_hint(flag, "DIR")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a file, not a directory; choose another {hint}")
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(
            f"{flag} {path}: {above} is a file, not a directory, so nothing can be made under "
            f"it; choose another {hint}"
        )
    writes_in = path if os.path.isdir(path) else above
    if not os.access(writes_in, os.W_OK | os.X_OK):
        why, remedy = storage.unwritable(writes_in)
        where = why if writes_in == path else f"cannot be made: {above} {why}"
        raise ValueError(f"{flag} {path} {where}; choose another {hint} or {remedy}")


@contextmanager
def removed_unless_used(run: str) -> Iterator[None]:
    """A run directory this command makes, removed again (with the folders made above it) if
    the command ends while it holds nothing but its lock file: a refusal after `RunLock` made it
    (a batch that does not split over the ranks, an --init that does not fit) leaves nothing
    behind. Under torchrun rank 0 made it and removes it."""
    made = _first_missing(run) if os.environ.get("RANK", "0") == "0" else None
    try:
        yield
    except BaseException:
        if made:
            _remove_unused(os.path.abspath(run), made)
        raise


def _first_missing(path: str) -> str | None:
    """The outermost folder of `path` that does not exist yet (None: `path` exists)."""
    path, missing = os.path.abspath(path), None
    while not os.path.lexists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _remove_unused(run: str, made: str) -> None:
    """Remove `run` if all it holds is a lock file no other run holds, then the empty folders
    above it up to `made`. The lock is taken first, so a run that has just locked it keeps it."""
    try:
        if os.listdir(run) != [LOCK_NAME]:
            return
        with RunLock(run):
            os.unlink(os.path.join(run, LOCK_NAME))
            os.rmdir(run)
    except (OSError, ValueError):  # another run's now, or no longer ours to remove
        return
    folder = os.path.dirname(run)
    while folder.startswith(made):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def checkpoint_to_resume(cfg: TrainConfig) -> str | None:
    """The checkpoint `--resume` continues (None: none yet); a checkpoint already in the run
    directory without `--resume` is refused. Reads nothing, writes nothing."""
    path = os.path.join(cfg.run, CHECKPOINT)
    exists = os.path.exists(path)
    if exists and not cfg.resume:
        raise ValueError(
            f"{path} exists: pass {flag_hint('--resume')} to continue that run, or choose "
            f"another {flag_hint('--run', 'DIR')}"
        )
    return path if exists else None


def prepare_run(cfg: TrainConfig, shards: ShardSet, d: Dist, resumed: str | None) -> None:
    """Create the run directory and its files (rank 0), once the run is accepted: a resume is
    checked against its checkpoint (`check_resume`) first, so a refused one leaves the run's
    vocab, tokenizer and train_config.json as they were."""
    if not d.main:
        return
    checkpoint = os.path.join(cfg.run, CHECKPOINT)
    _populate(cfg, shards, checkpoint)
    if cfg.resume and not resumed:
        print(f"note: {checkpoint} does not exist yet; starting {cfg.run} from step 0")


def _populate(cfg: TrainConfig, shards: ShardSet, checkpoint: str) -> None:
    os.makedirs(cfg.run, exist_ok=True)
    run = glob.escape(cfg.run)  # left by a run killed while saving or keeping a checkpoint
    for stale in glob.glob(f"{run}/{CHECKPOINT}.tmp-*") + glob.glob(f"{run}/step-*.pt.tmp-*"):
        os.unlink(stale)
    for name in ("vocab.txt", "tokenizer.json"):
        src = storage.join(shards.directory, name)  # the set may be in an object store
        if storage.exists(src):
            storage.fetch(src, os.path.join(cfg.run, name))
    atomic_write_text(os.path.join(cfg.run, "train_config.json"), to_json(asdict(cfg)))


def trim_metrics(path: str, step: int) -> None:
    """Drop records after `step`: a killed run may have logged past its last checkpoint."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(lines))


def to_json(obj) -> str:
    """Indented, key-sorted JSON with a final newline (the run directory's .json files)."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


CHECKPOINT_FORMAT = 1


def save_checkpoint(path: str, state: dict) -> None:
    """Written whole or not at all, Ctrl-C or not (`save_weights`)."""
    save_weights(path, state)


def rng_states(d: Dist) -> list[dict]:
    """Every rank's torch generator state (dropout), gathered on all ranks."""
    state = {"cpu": torch.get_rng_state()}
    if d.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(d.device)
    if d.world == 1:
        return [state]
    states: list = [None] * d.world
    dist.all_gather_object(states, state)
    return states


def checkpoint_state(
    trainer: Trainer, shards: ShardSet, step: int, position: int, rng: list[dict]
) -> dict:
    return {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "loader_position": position,
        "model_config": asdict(trainer.model_cfg),
        "train_config": asdict(trainer.cfg),
        "vocab": {
            "size": len(shards.vocab),
            "sha256": shards.manifest.vocab_sha256,
            "special_ids": shards.vocab.special_ids.to_dict(),
        },
        "shard_config": dict(shards.config),
        **shard_set_entry(shards),  # its manifest's digest: a resume keeps the set
        "model": trainer.raw.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        **({"scaler": trainer.scaler.state_dict()} if trainer.scaler else {}),  # fp16
        "rng": rng,
        "world_size": trainer.d.world,
    }


def write_checkpoint(
    path: str, trainer: Trainer, shards: ShardSet, step: int, position: int
) -> None:
    """Called on every rank (gathering the RNG states is a collective); rank 0 writes."""
    rng = rng_states(trainer.d)
    if trainer.d.main:
        save_checkpoint(path, checkpoint_state(trainer, shards, step, position, rng))


def kept_checkpoint(run: str, step: int) -> str:
    """Where `--keep-every` keeps the checkpoint of `step`."""
    return os.path.join(run, f"step-{step:08d}.pt")


def keep_checkpoint(run: str, step: int) -> str:
    """The checkpoint just written (RUN/last.pt) kept as RUN/step-NNNNNNNN.pt: a hard link
    where the filesystem has them (no byte copied: last.pt is only ever replaced by a rename,
    never written in place), else a copy; made under a temporary name and renamed into place."""
    kept = kept_checkpoint(run, step)
    tmp = f"{kept}.tmp-{os.getpid()}"
    try:
        os.link(os.path.join(run, CHECKPOINT), tmp)
    except OSError:
        shutil.copyfile(os.path.join(run, CHECKPOINT), tmp)
    os.replace(tmp, kept)
    return kept


# What to do when a checkpoint cannot be read, by who reads it: a resume, or a --ckpt.
RESUME_ADVICE = (
    "its run cannot go on from it: put back an intact copy, or move it away and start over "
    f"(the run restarts at step 0), or choose another {flag_hint('--run', 'DIR')}"
)
CKPT_ADVICE = (
    f"copy it again from where it was written, or pass another {flag_hint('--ckpt', 'PATH')}"
)


def load_checkpoint(
    path: str,
    advice: str = CKPT_ADVICE,
    flag: str = "--ckpt",
    finetuned: bool = False,
    mmap: bool = False,
) -> dict:
    """A pre-training checkpoint of this package (or, with `finetuned`, a fine-tuning one too:
    `is_finetuned` tells them apart); anything else is refused in one line that says what the
    file is (empty, damaged, a fine-tuning checkpoint) and what to do (`advice` for a file that
    cannot be read; `flag` names where the right checkpoint goes). `mmap`: see `load_weights`
    (for a reader of the model alone, not of the optimizer's state)."""
    try:
        ckpt = load_weights(path, mmap=mmap)
    except PickledCodeError:
        raise
    except Exception as e:  # torch raises several types for a damaged file
        raise ValueError(f"{path}: {_unreadable(path, e)}; {advice}") from None
    if isinstance(ckpt, dict) and is_finetuned(ckpt):
        if finetuned:
            return ckpt
        raise ValueError(_finetuned_refusal(path, ckpt, flag))
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path}: not a pre-training checkpoint of this package (format "
            f"{CHECKPOINT_FORMAT}); pass the last.pt that `bert-model pretrain` writes"
        )
    return ckpt


def checked_vocab(ckpt_path: str, ckpt: dict, vocab_path: str) -> Vocab:
    """The vocab.txt beside a checkpoint, refused unless it is the one the checkpoint was
    trained with (its size, and its sha256 where recorded): another vocab gives every id
    another piece, and an export or fine-tuning would carry that on without a sign."""
    if not os.path.exists(vocab_path):
        raise FileNotFoundError(
            f"{vocab_path} does not exist: the vocab.txt that pre-training copies beside its "
            f"checkpoint is needed; copy it there{_vocab_source(ckpt)}"
        )
    vocab, was = Vocab.load(vocab_path), ckpt["vocab"]
    if len(vocab) != was["size"]:
        raise ValueError(
            f"{vocab_path} has {len(vocab)} pieces but the checkpoint was trained with "
            f"{was['size']}; put the run's own vocab.txt beside the checkpoint{_vocab_source(ckpt)}"
        )
    if was.get("sha256") and vocab.sha256 != was["sha256"]:
        raise ValueError(
            f"{vocab_path} is not the vocab the checkpoint was trained with (sha256 "
            f"{vocab.sha256[:12]}, the checkpoint's {was['sha256'][:12]}, both {len(vocab)} "
            f"pieces); put the run's own vocab.txt beside the checkpoint{_vocab_source(ckpt)}"
        )
    return vocab


def _vocab_source(ckpt: dict) -> str:
    """Where the run's own vocab.txt is, if the checkpoint says: its shard set's."""
    directory = (ckpt.get(SHARD_SET_KEY) or {}).get("directory")
    return f" (the shard set's: {storage.join(directory, 'vocab.txt')})" if directory else ""


def _unreadable(path: str, error: Exception) -> str:
    """What a file torch cannot read is: torch's own words (several lines on a zip archive's
    internals, for one) name no file and no next step."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not head:
        return "the file is empty, not a checkpoint"
    if head == b"PK\x03\x04":  # torch.save's zip archive, cut short or damaged
        return "damaged or truncated (torch cannot read its zip archive)"
    return f"not a file torch.save writes ({type(error).__name__}), or a damaged one"


def is_finetuned(ckpt: dict) -> bool:
    """A fine-tuning run's model.pt or best.pt (`model.finetune.loop`): its config and labels."""
    config = ckpt.get("config")
    return "labels" in ckpt and isinstance(config, dict) and "task" in config


def _finetuned_refusal(path: str, ckpt: dict, flag: str) -> str:
    task, started = ckpt["config"]["task"], ckpt["config"].get("ckpt", "")
    said = (
        f"{path}: a fine-tuning checkpoint of this package (--task {task}"
        f"{', fine-tuned from ' + started if started else ''}), not a pre-training checkpoint"
    )
    if started and flag:
        return f"{said}; pass the checkpoint it was fine-tuned from, {flag_hint(flag, started)}"
    return f"{said}; pass a pre-training checkpoint (RUN/last.pt)"
