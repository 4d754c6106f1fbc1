"""Export a validated shard set to the format another trainer reads: `export(out, dest, options)`.

In order, before anything is written: the format and its options are checked, DEST is checked
(a folder outside the set; empty, or `overwrite`), the set is opened (`ShardSet.open`) and
validated (`schemas.validate`); a set that fails any check is refused. Then each shard of the set
is read (memory-mapped) a block of rows at a time and handed to the format's writer, which
publishes its files atomically in DEST; the set's `vocab.txt` is copied beside them; last,
`export.json` lists every file written (rows, bytes, sha256), the source set and the fields.
Its presence means the export is complete. Memory is bounded by one block of rows (and, for MDS,
one MDS shard); the bytes are a function of the set and the options only.

OUT and DEST may each be a local folder or a `gs://bucket/prefix` (`schemas.storage`). A set in
an object store is validated there, then each shard is copied to a local scratch folder (its
sha256 checked against the manifest again, so the bytes exported are the ones validated),
memory-mapped and its copy removed; a gs:// DEST gets each file written in that scratch folder
and uploaded once, whole (`schemas.export.dest.RemoteDest`). Same set, same bytes, wherever
either side lives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import pyarrow as pa

from schemas import storage
from schemas.export.dest import Dest, RemoteDest, Written, open_dest
from schemas.export.hdf5 import HDF5Writer, h5py_module
from schemas.export.hdf5 import fields as hdf5_fields
from schemas.export.mds import (
    DEFAULT_SIZE_LIMIT,
    INDEX_NAME,
    MAX_SIZE_LIMIT,
    MDSWriter,
    max_sample_bytes,
)
from schemas.export.mds import encodings as mds_encodings
from schemas.export.rows import pad
from schemas.export.tfrecord import TFRecordWriter
from schemas.export.tfrecord import fields as tfrecord_fields
from schemas.manifest import MANIFEST_NAME
from schemas.reader import VOCAB_NAME, ShardSet
from schemas.shard import ShardColumns, read_shard

FORMATS = ("hdf5", "tfrecord", "mds")
SUMMARY_NAME = "export.json"
EXPORT_VERSION = 1
BLOCK_ROWS = 4096  # rows padded and written at a time (and an HDF5 chunk)
# The names each format's files take (and the temporary names `atomic_write` gives them while
# they are written, left behind only by a killed export); with `overwrite` these are the only
# files an export removes, whether or not the previous export.json lists them.
_TMP = r"(\.tmp-[A-Za-z0-9_]+)?"
OWN_NAMES = {
    "hdf5": re.compile(r"training-\d{5}-of-\d{5}\.hdf5" + _TMP),
    "tfrecord": re.compile(r"training-\d{5}-of-\d{5}\.tfrecord" + _TMP),
    "mds": re.compile(r"(shard\.\d{5}\.mds|" + re.escape(INDEX_NAME) + ")" + _TMP),
}


class ExportError(ValueError):
    """A refusal, one line: what, where, what to do."""


@dataclass(frozen=True)
class ExportOptions:
    format: str
    overwrite: bool = False  # replace the files an export writes in a non-empty DEST
    mds_size_limit: int = DEFAULT_SIZE_LIMIT  # bytes per MDS shard (MDSWriter's size_limit)
    block_rows: int = BLOCK_ROWS


@dataclass(frozen=True)
class Summary:
    """What `export.json` records."""

    format: str
    rows: int
    files: list[Written]  # the data files, in order
    index: Written | None  # MDS's index.json
    vocab: Written
    source: dict  # the set's manifest sha256, rows, shards, vocab sha256
    config: dict  # max_seq_length, max_predictions_per_seq
    fields: dict  # name -> type and shape, in the format's own terms
    export_version: int = EXPORT_VERSION

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def fields(fmt: str, seq: int, preds: int, id_dtype: str) -> dict[str, str]:
    """Each field of the format and its type, as the format's reader sees it."""
    if fmt == "tfrecord":
        return tfrecord_fields(seq, preds)
    if fmt == "hdf5":
        return hdf5_fields(seq, preds)
    return mds_encodings(id_dtype)


def export(
    out: str, dest: str, options: ExportOptions, progress: Callable[[str], None] | None = None
) -> Summary:
    """Export the set in `out` to `dest`; ExportError (one line) before anything is written
    when the options, DEST or the set are not fit. `progress`, when given, is called with a
    line after each file written."""
    check_options(options)
    for path in (out, dest):
        if storage.other_store(path):  # else taken for a folder "s3:"
            raise ExportError(
                f"{path}: export reads and writes local folders and gs:// URLs only; copy the "
                "set to one of them"
            )
    remote = storage.is_remote(out) or storage.is_remote(dest)
    scratch = tempfile.TemporaryDirectory(prefix="export-") if remote else nullcontext()
    with scratch as folder:
        return _export(out, dest, options, progress, folder)


def _export(
    out: str,
    dest: str,
    options: ExportOptions,
    progress: Callable[[str], None] | None,
    scratch: str | None,
) -> Summary:
    target = open_dest(dest, scratch)
    check_dest(target, out, options)
    shard_set = open_set(out)
    cfg = shard_set.shard_config
    if options.format == "mds":  # refused before validation reads every shard
        need = max_sample_bytes(cfg.max_seq_length, cfg.max_predictions_per_seq) + 64 * 1024
        if options.mds_size_limit < need:
            raise ExportError(
                f"--mds-size-limit {options.mds_size_limit} is below the largest sample of "
                f"this set plus the shard header ({need} bytes); give at least that"
            )
    check_valid(out)
    source = Source(shard_set, scratch)
    previous = replaceable(target, options)
    target.create()
    target.remove(SUMMARY_NAME)  # DEST without export.json: an export not finished
    for name in sorted(previous):  # before any new file: a failed export leaves no old+new mix
        target.remove(name)
    id_dtype = _id_dtype(source)
    files, index = _write(source, id_dtype, target, options, progress or (lambda line: None))
    vocab = _copy_vocab(shard_set, target)
    summary = Summary(
        format=options.format,
        rows=sum(f.rows for f in files),
        files=files,
        index=index,
        vocab=vocab,
        source=_source(shard_set),
        config={
            "max_seq_length": cfg.max_seq_length,
            "max_predictions_per_seq": cfg.max_predictions_per_seq,
        },
        fields=fields(options.format, cfg.max_seq_length, cfg.max_predictions_per_seq, id_dtype),
    )
    target.publish(SUMMARY_NAME, 0, lambda f: f.write(summary.to_json().encode("utf-8")))
    return summary


def check_options(options: ExportOptions) -> None:
    if options.format not in FORMATS:
        raise ExportError(
            f"--format {options.format!r} is not one of {', '.join(FORMATS)}; pick one of them"
        )
    if not 1 <= options.mds_size_limit <= MAX_SIZE_LIMIT:
        raise ExportError(
            f"--mds-size-limit {options.mds_size_limit} is not in [1, {MAX_SIZE_LIMIT}] "
            "(MDS offsets are uint32)"
        )
    if options.block_rows < 1:
        raise ExportError(f"block_rows {options.block_rows} is not >= 1")
    if options.format == "hdf5":
        try:
            h5py_module()
        except ImportError as e:
            raise ExportError(str(e)) from None


def _inside(dest: str, out: str) -> bool:
    """Whether `dest` is `out` or below it (two URLs compared by their names; a URL and a local
    path never overlap)."""
    if storage.is_remote(dest) or storage.is_remote(out):
        return (dest.rstrip("/") + "/").startswith(out.rstrip("/") + "/")
    real_dest, real_out = os.path.realpath(dest), os.path.realpath(out)
    return os.path.commonpath([real_dest, real_out]) == real_out


def check_dest(target: Dest | RemoteDest, out: str, options: ExportOptions) -> None:
    """DEST is a folder (or absent) outside the set, and empty unless `overwrite`."""
    problem = target.problem()
    if problem:
        raise ExportError(problem)
    if _inside(target.path, out):
        raise ExportError(
            f"{target.path} is inside the shard set {out}; export to a folder outside it"
        )
    names = target.names()
    if names and not options.overwrite:
        raise ExportError(
            f"{target.path} is not empty ({len(names)} entries); export into an empty or new "
            "folder, or give --overwrite to replace the files an export writes there"
        )


def replaceable(target: Dest | RemoteDest, options: ExportOptions) -> set[str]:
    """The data files in DEST an export removes before it writes (only with `overwrite`): those
    named as this format names its files, and those the previous export.json lists that are
    named as some format names its files. A name is the only test: a foreign or damaged
    export.json may list anything (a user's notes), and only an export's own names are ours."""
    if not options.overwrite:
        return set()
    names = set(target.names())
    own = {n for n in names if OWN_NAMES[options.format].fullmatch(n)}
    listed = {n for n in _listed(target) if any(p.fullmatch(n) for p in OWN_NAMES.values())}
    return (own | listed) & names


def _listed(target: Dest | RemoteDest) -> set[str]:
    """The plain names the previous export.json lists (none when it is absent or damaged)."""
    text = target.read_text(SUMMARY_NAME)
    if not text:
        return set()
    try:
        d = json.loads(text)
        entries = [*d.get("files", []), d.get("index"), d.get("vocab")]
        listed = {e["path"] for e in entries if isinstance(e, dict) and "path" in e}
    except (ValueError, TypeError, KeyError, AttributeError):
        return set()
    return {n for n in listed if isinstance(n, str) and "/" not in n}


def open_set(out: str) -> ShardSet:
    """The set, opened; ExportError when it cannot be, or its config is unusable."""
    try:
        shard_set = ShardSet.open(out)
        _ = shard_set.shard_config  # an unusable config is refused here, in one line
    except (OSError, ValueError) as e:
        raise ExportError(str(e)) from None
    return shard_set


def check_valid(out: str) -> None:
    """ExportError unless the set passes every check of `schemas.validate`."""
    from schemas.validate.run import validate

    report = validate(out)
    if not report.ok:
        failed = [c.key for c in report.checks if not c.passed]
        raise ExportError(
            f"{out} fails validation ({', '.join(failed)}); nothing was exported: see "
            f"`bert-schemas validate {out}` and rebuild the set"
        )


class Source:
    """The set's shards as tables, one at a time: a local shard memory-mapped where it is; a
    shard in an object store copied to the scratch folder, its sha256 checked against the
    manifest, memory-mapped and its copy unlinked at once (the mapping keeps the bytes until
    the table is dropped), so memory and scratch space hold one shard."""

    def __init__(self, shard_set: ShardSet, scratch: str | None):
        self.shard_set = shard_set
        self.scratch = scratch
        self._current: tuple[int, pa.Table] | None = None

    def __len__(self) -> int:
        return len(self.shard_set)

    def table(self, i: int) -> pa.Table:
        if not self.shard_set.is_remote:
            return self.shard_set.table(i)
        if self._current is not None and self._current[0] == i:
            return self._current[1]
        self._current = None  # the previous shard's mapping goes before the next is copied
        entry = self.shard_set.manifest.shards[i]
        url = self.shard_set.paths[i]
        local = os.path.join(self.scratch, f"shard-{i:05d}.arrow")
        try:
            sha256 = storage.fetch(url, local)
            if sha256 != entry.sha256:
                raise ExportError(
                    f"{url}: sha256 {sha256[:12]}... is not the manifest's {entry.sha256[:12]}... "
                    "(the shard changed after validation); nothing more was exported: run the "
                    "export again once the set is no longer being written"
                )
            table = read_shard(local)
        finally:
            if os.path.exists(local):
                os.unlink(local)
        self._current = (i, table)
        return table


def blocks(table: pa.Table, block_rows: int) -> Iterator[ShardColumns]:
    """A shard's rows, `block_rows` at a time."""
    for start in range(0, table.num_rows, block_rows):
        yield ShardColumns.from_table(table.slice(start, block_rows))


def _write(
    source: Source,
    id_dtype: str,
    target: Dest | RemoteDest,
    options: ExportOptions,
    progress: Callable[[str], None],
) -> tuple[list[Written], Written | None]:
    cfg = source.shard_set.shard_config
    seq, preds = cfg.max_seq_length, cfg.max_predictions_per_seq
    total = len(source)
    if options.format == "mds":
        writer = MDSWriter(target, id_dtype, options.mds_size_limit)
        for i in range(total):
            for columns in blocks(source.table(i), options.block_rows):
                writer.add(columns)
            progress(f"read shard {i + 1}/{total}, {len(writer.written)} MDS shard(s) written")
        return writer.finish()
    if options.format == "hdf5":
        per_shard = HDF5Writer(seq, preds, options.block_rows)
    else:
        per_shard = TFRecordWriter()
    files = []
    for i in range(total):
        table = source.table(i)
        padded = (pad(c, seq, preds) for c in blocks(table, options.block_rows))
        name = per_shard.file_name(i, total)

        def write(f, table=table, padded=padded) -> None:
            per_shard.write_shard(f, table.num_rows, padded)

        files.append(target.publish(name, table.num_rows, write))
        progress(f"wrote {name} ({i + 1}/{total}, {table.num_rows:,} rows)")
    return files, None


def _copy_vocab(shard_set: ShardSet, target: Dest | RemoteDest) -> Written:
    data = storage.read_bytes(storage.join(shard_set.directory, VOCAB_NAME))
    return target.publish(VOCAB_NAME, 0, lambda g: g.write(data))


def _source(shard_set: ShardSet) -> dict:
    manifest = storage.read_bytes(storage.join(shard_set.directory, MANIFEST_NAME))
    manifest_sha256 = hashlib.sha256(manifest).hexdigest()
    return {
        "manifest_sha256": manifest_sha256,
        "rows": shard_set.num_rows,
        "shards": len(shard_set),
        "vocab_sha256": shard_set.manifest.vocab_sha256,
    }


def _id_dtype(source: Source) -> str:
    """The value type of the set's ids (uint16 or uint32), from its first shard's schema."""
    if not len(source):
        return "uint16"
    ids = source.table(0).schema.field("input_ids").type.value_type
    return "uint32" if ids == pa.uint32() else "uint16"


def timed_export(
    out: str, dest: str, options: ExportOptions, progress: Callable[[str], None] | None = None
) -> tuple[Summary, float, float]:
    """`export` with its wall and CPU seconds (for the command's last line)."""
    wall, cpu = time.perf_counter(), time.process_time()
    summary = export(out, dest, options, progress)
    return summary, time.perf_counter() - wall, time.process_time() - cpu
