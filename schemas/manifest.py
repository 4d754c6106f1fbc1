"""`OUT/manifest.json`: the list of shards, the config and the run's counts.

It is written last and atomically: its presence means the dataset is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import BinaryIO

import numpy as np

from schemas.config import CONFIG_VERSION, type_name
from schemas.shard import SCHEMA_NAME, SCHEMA_VERSION, ShardColumns

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
# The config version of a manifest written before manifests recorded one: all such sets are of
# schema version 1, whose config is version 1.
UNRECORDED_CONFIG_VERSION = 1
SHARDS_DIR = "shards"  # the folder of a set that holds its shards
SHARD_NAME_PATTERN = re.compile(r"train-\d{5}-of-\d{5}\.arrow")  # the names `shard_name` gives
LOCK_NAME = ".bert-shards.lock"  # in a set's folder while a build writes it
# Every name a build (and `bert-shards vocab` or `punkt`) writes at the top of its OUT besides
# SHARDS_DIR; `punkt.json` is `bert-shards punkt`'s, which a build into the same OUT may read.
OUT_FILES = frozenset(
    {
        MANIFEST_NAME,
        "vocab.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "punkt.json",
        LOCK_NAME,
    }
)

# What a manifest may be. A real one is a few KB per hundred shards and four levels deep; these
# bounds keep a hostile or damaged one from exhausting memory, the stack or the validator's time.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_MANIFEST_DEPTH = 32  # nesting of JSON objects and arrays, the top level counting as 1
MAX_SHARDS = 100_000


def shard_name(index: int, total: int) -> str:
    """The file name of shard `index` of a set of `total`, inside `SHARDS_DIR`."""
    return f"train-{index:05d}-of-{total:05d}.arrow"


def shard_path_problem(rel: object, directory: str | None = None) -> str:
    """Why a manifest's shard path is not one a reader may open ("" when it is): it must be a
    relative path `shards/NAME` inside the set's `shards/` folder, with no `.` or `..` part, no
    backslash or NUL, and (when `directory` is given) must not resolve, through a symlink,
    outside `directory/shards/`. The one check every reader of shards calls."""
    if not isinstance(rel, str) or not rel:
        return f"path {rel!r} is not a non-empty string"
    if "\\" in rel or "\x00" in rel:
        return "path holds a backslash or NUL byte"
    if rel.startswith("/") or os.path.isabs(rel):
        return "path is absolute"
    parts = rel.split("/")
    if ".." in parts:
        return "path climbs out with '..'"
    if parts[0] != SHARDS_DIR or len(parts) < 2 or any(p in ("", ".") for p in parts):
        return f"path is not of the form {SHARDS_DIR}/NAME"
    if directory is not None and _links(directory, parts):  # one lstat per part below shards/
        folder = os.path.realpath(os.path.join(directory, SHARDS_DIR))
        real = os.path.realpath(os.path.join(directory, rel))
        if os.path.commonpath([folder, real]) != folder or real == folder:
            return f"path resolves to {real}, outside {SHARDS_DIR}/ (a symlink out of the set)"
    return ""


def _links(directory: str, parts: list[str]) -> bool:
    """Whether any of directory/shards/a, directory/shards/a/b, ... is a symlink."""
    path = os.path.join(directory, parts[0])
    for part in parts[1:]:
        path = os.path.join(path, part)
        if os.path.islink(path):
            return True
    return False


def shard_path(directory: str, index: int, rel: object) -> str:
    """`directory/rel` for the manifest's shard entry `index`, or ValueError (one line) when
    `shard_path_problem` finds the path unsafe."""
    problem = shard_path_problem(rel, directory)
    if problem:
        raise ValueError(
            f"{os.path.join(directory, MANIFEST_NAME)}: shard entry {index} ({rel!r}): "
            f"{problem}; shard paths must be relative and inside {SHARDS_DIR}/: rebuild the set"
        )
    return os.path.join(directory, rel)


def strict_json(text: str) -> object:
    """`json.loads`, refusing what JSON is not but Python's parser takes: NaN and Infinity,
    and an object that gives one key twice (the parser would keep the last silently). Raises
    JSONDecodeError, whose message says what and where."""

    def constant(name: str) -> float:
        at = _where(text, name)
        raise json.JSONDecodeError(f"{name} is not a JSON value", text, at)

    def pairs(items: list[tuple[str, object]]) -> dict:
        d: dict = {}
        for key, value in items:
            if key in d:
                at = _where(text, json.dumps(key))
                raise json.JSONDecodeError(f"key {key!r} given twice in one object", text, at)
            d[key] = value
        return d

    return json.loads(text, parse_constant=constant, object_pairs_hook=pairs)


def _where(text: str, token: str) -> int:
    """An offset of `token` in `text` for an error's line and column (its first occurrence:
    the parser does not say which it was reading)."""
    return max(text.find(token), 0)


def _depth_problem(value: object) -> str:
    """Iterative (no recursion): the JSON value nests no deeper than MAX_MANIFEST_DEPTH."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_MANIFEST_DEPTH:
                return f"nested deeper than {MAX_MANIFEST_DEPTH} levels"
            children = v.values() if isinstance(v, dict) else v
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return ""


@dataclass(frozen=True)
class ShardEntry:
    path: str  # relative to the dataset directory, e.g. "shards/train-00000-of-00004.arrow"
    rows: int
    bytes: int
    sha256: str
    tokens: int  # sum of row lengths
    masked_tokens: int  # sum of masked positions
    random_next: int  # rows with is_random_next
    short_rows: int = 0  # rows whose target length was drawn short (short_seq_prob)
    # Rows whose is_random_next was not drawn with random_next_prob: a one-sentence chunk always
    # takes B from another document; a bucket holding one document never can.
    forced_random_next: int = 0
    forced_actual_next: int = 0

    @classmethod
    def describe(cls, path: str, data: bytes, columns: ShardColumns, **counts: int) -> ShardEntry:
        """The entry of a shard from its bytes and columns; `counts` are the figures only the
        writer knows (short_rows, forced_random_next, forced_actual_next)."""
        return cls(
            path=path,
            rows=columns.num_rows,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            tokens=int(len(columns.input_ids)),
            masked_tokens=int(len(columns.masked_positions)),
            random_next=int(np.count_nonzero(columns.is_random_next)),
            **{k: int(v) for k, v in counts.items()},
        )


@dataclass(frozen=True)
class Manifest:
    shards: tuple[ShardEntry, ...]
    config: dict
    vocab_sha256: str
    vocab_size: int
    special_ids: dict
    counts: dict = field(default_factory=dict)  # documents read/dropped by reason, sentences, ...
    schema_name: str = SCHEMA_NAME
    schema_version: int = SCHEMA_VERSION
    manifest_format: int = MANIFEST_FORMAT
    config_version: int = CONFIG_VERSION  # the version of `config`'s keys (`schemas.config`)
    created: dict = field(default_factory=dict)  # when and where; never inside shards

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_json(self) -> str:
        d = asdict(self)
        d["shards"] = [asdict(s) for s in self.shards]
        return json.dumps(d, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "manifest.json") -> Manifest:
        """Parse a manifest, refusing (ValueError, one line) one larger than MAX_MANIFEST_BYTES,
        nested deeper than MAX_MANIFEST_DEPTH or listing more than MAX_SHARDS shards."""
        if len(text) > MAX_MANIFEST_BYTES:
            raise ValueError(
                f"{where}: {len(text):,} characters, more than a manifest may hold "
                f"({MAX_MANIFEST_BYTES:,}); it is not one this package wrote: rebuild the set"
            )
        try:
            d = strict_json(text)
        except RecursionError:
            d = None
            problem = f"nested deeper than {MAX_MANIFEST_DEPTH} levels"
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{where}: not a valid manifest ({type(e).__name__}: {e}); rebuild the dataset "
                "with `make shards`"
            ) from None
        else:
            problem = _depth_problem(d)
        if problem:
            raise ValueError(f"{where}: not a valid manifest ({problem}); rebuild the set")
        shards = d.get("shards") if isinstance(d, dict) else None
        if isinstance(shards, list) and len(shards) > MAX_SHARDS:
            raise ValueError(
                f"{where}: lists {len(shards):,} shards, more than {MAX_SHARDS:,}; rebuild the "
                "set with fewer, larger shards (--num-shards)"
            )
        try:
            d["shards"] = tuple(ShardEntry(**s) for s in d["shards"])
            d.setdefault("config_version", UNRECORDED_CONFIG_VERSION)
            return cls(**d)
        except (KeyError, TypeError) as e:
            raise ValueError(
                f"{where}: not a valid manifest ({type(e).__name__}: {e}); rebuild the dataset "
                "with `make shards`"
            ) from None

    def write(self, directory: str) -> str:
        """Write atomically to a local directory: temporary file, fsync, rename."""
        return atomic_write_text(os.path.join(directory, MANIFEST_NAME), self.to_json())


def read_manifest(directory: str) -> Manifest:
    text, path = read_manifest_text(directory)
    return Manifest.from_json(text, where=path)


def missing_manifest(directory: str, path: str, names: list[str]) -> str:
    """Why a folder without a manifest is no set, and what to do: build into it when it is
    empty or a build's (unfinished), else give a finished build's folder, since a build refuses
    an OUT that holds other files (a run folder's `last.pt`, say)."""
    others = sorted(set(names) - OUT_FILES - {SHARDS_DIR})
    if not others:
        return (
            f"{path} does not exist: {directory} is not a finished shard set (the manifest is "
            f"written last); run `make shards OUT={shlex.quote(directory)}` first"
        )
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (
        f"{path} does not exist, and {directory} holds files no build writes ({shown}): it is "
        "no shard set; give the folder a finished build wrote (its --out)"
    )


def read_manifest_text(directory: str) -> tuple[str, str]:
    """The text of a local set's manifest and its path, with `read_manifest`'s refusals."""
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.exists(path):
        names = os.listdir(directory) if os.path.isdir(directory) else []
        raise FileNotFoundError(missing_manifest(directory, path, names))
    size = os.path.getsize(path)
    if size > MAX_MANIFEST_BYTES:
        raise ValueError(
            f"{path}: {size:,} bytes, more than a manifest may hold ({MAX_MANIFEST_BYTES:,}); "
            "it is not one this package wrote: rebuild the set"
        )
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e}); rebuild the set") from None
    return text, path


def new_file_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0666 less the process umask (0644 under
    the usual 022)."""
    umask = os.umask(0)  # the only way to read it is to set it
    os.umask(umask)
    return 0o666 & ~umask


# A written file of at least this many bytes leaves the page cache once it is on disk (`settle`).
SETTLE_BYTES = 1 << 20


def settle(f: BinaryIO, sync_small: bool = False) -> bool:
    """Settle a local file just written: one of `SETTLE_BYTES` or more is fsynced and dropped
    from the page cache (`posix_fadvise(DONTNEED)`, where the OS has it and the filesystem takes
    the advice), and whether it was dropped is returned; a smaller one is flushed from Python's
    buffer, and fsynced only when `sync_small` (an fsync costs a disk flush).

    What is written here (shards and their chunk files, exports, checkpoints) is written once
    and read at most once more, so its cached pages only hold memory; on a machine that hands
    freed memory back to its host (a sandbox, a ballooned VM), each page the cache takes afresh
    also costs kernel time in the writer, while dropped pages are reused for the next file
    (docs/design.md, "How it is fast")."""
    f.flush()
    large = os.fstat(f.fileno()).st_size >= SETTLE_BYTES
    if large or sync_small:
        os.fsync(f.fileno())
    if not large or not hasattr(os, "posix_fadvise"):
        return False
    try:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:  # advice a filesystem may decline; the file is on disk either way
        return False
    return True


def atomic_write(path: str, write: Callable[[BinaryIO], object]) -> str:
    """Publish `path` atomically: `write(f)` fills a temporary file beside it (`NAME.tmp-*`),
    which is fsynced (and, when large, dropped from the page cache: `settle`) and renamed onto
    `path`; on any error it is removed. The file gets the mode a new file gets under the umask,
    not mkstemp's 0600, so a manifest, config or checkpoint stays readable by whoever shares the
    directory. A write's `OSError` (a full disk), which names no file, is raised naming `path`.
    Returns `path`."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f"{os.path.basename(path)}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            settle(f, sync_small=True)
            os.fchmod(f.fileno(), new_file_mode())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, path) from None  # a write's error names no file
        raise
    return path


def atomic_write_text(path: str, text: str) -> str:
    """`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_bytes(path: str, data: bytes) -> str:
    """`atomic_write` of bytes."""
    return atomic_write(path, lambda f: f.write(data))


# The counts of a shard entry: each an integer >= 0, true and false refused (a bool is an int
# in Python, never in a manifest this package writes).
ENTRY_COUNTS = (
    "rows",
    "bytes",
    "tokens",
    "masked_tokens",
    "random_next",
    "short_rows",
    "forced_random_next",
    "forced_actual_next",
)
SPECIAL_ID_KEYS = ("pad", "unk", "cls", "sep", "mask")


def form_problems(d: object) -> list[str]:
    """Why a parsed manifest.json is not of the form this package writes, one line per field
    ([] when it is): every field present with its type (integers are integers, not floats or
    booleans), counts >= 0, a known manifest_format. Lenient readers take a hand-edited
    `rows: 755.0` or `unk: true`; the validator must not."""
    if not isinstance(d, dict):
        return [f"is {type_name(d)}, not an object"]
    problems = []
    fmt = d.get("manifest_format")
    if not _int(fmt) or fmt != MANIFEST_FORMAT:
        what = "is unknown" if _int(fmt) else f"is {type_name(fmt)}, not an integer"
        problems.append(f"manifest_format {fmt!r} {what}; this code reads format {MANIFEST_FORMAT}")
    for key in ("schema_name", "vocab_sha256"):
        if not isinstance(d.get(key), str):
            problems.append(f"{key} is {type_name(d.get(key))}, not a string")
    for key in ("vocab_size", "schema_version", "config_version"):
        if key in d or key != "config_version":  # config_version: absent in early manifests
            problems += _count_problem(key, d.get(key))
    for key in ("config", "special_ids", "counts", "created"):
        if (
            not isinstance(d.get(key, {}), dict)
            or key in ("config", "special_ids")
            and key not in d
        ):
            problems.append(f"{key} is {type_name(d.get(key))}, not an object")
    specials = d.get("special_ids")
    if isinstance(specials, dict):
        problems += [
            p for k in SPECIAL_ID_KEYS for p in _count_problem(f"special_ids.{k}", specials.get(k))
        ]
    shards = d.get("shards")
    if not isinstance(shards, list):
        return problems + [f"shards is {type_name(shards)}, not a list"]
    for i, entry in enumerate(shards):
        problems += [f"shard entry {i}: {p}" for p in entry_problems(entry)]
    return problems


def entry_problems(e: object) -> list[str]:
    """Why one shard entry is not of the form this package writes ([] when it is)."""
    if not isinstance(e, dict):
        return [f"is {type_name(e)}, not an object"]
    problems = [p for key in ENTRY_COUNTS for p in _count_problem(key, e.get(key), key in e)]
    for key in ("path", "sha256"):
        if not isinstance(e.get(key), str):
            problems.append(f"{key} is {type_name(e.get(key))}, not a string")
    if problems:
        return problems
    rows = e["rows"]
    if e["short_rows"] > rows:
        problems.append(f"short_rows {e['short_rows']:,} exceeds its {rows:,} rows")
    if e["forced_random_next"] + e["forced_actual_next"] > rows:
        problems.append(
            f"forced labels ({e['forced_random_next']:,} random, {e['forced_actual_next']:,} "
            f"actual) exceed its {rows:,} rows"
        )
    return problems


def _count_problem(key: str, value: object, present: bool = True) -> list[str]:
    if not present:
        return [f"{key} is missing"]
    if not _int(value):
        return [f"{key} {value!r} is {type_name(value)}, not an integer"]
    if value < 0:
        return [f"{key} {value:,} is negative"]
    return []


def _int(v: object) -> bool:
    return type(v) is int
