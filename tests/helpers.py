"""Helpers shared by several test files (fixtures live in conftest.py; test files import from
here, never from each other): the sample corpus and builds of it, the digests that say two sets
hold the same bytes, builds killed at a given file, the rows an export must hold, Google's vocab
layout, processes seen in /proc, read-only folders, signals sent after a call, a source file's
imports, corpora in other formats (an archive among them), and the order of the test files."""

from __future__ import annotations

import fcntl
import glob
import hashlib
import html
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from schemas.vocab import SPECIAL_TOKENS, Vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "sample")
SAMPLE_INPUT = f"books:{SAMPLE}/books,text:{SAMPLE}/text"
SAMPLE_TEXT = f"{SAMPLE}/text"
# what a build stopped by a signal says once OUT holds its resume record
INTERRUPTED = "interrupted; run the same command with --resume to continue"
BUILD_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def file_of(item) -> str:
    """A collected test's file, as its node id names it."""
    return item.nodeid.split("::", 1)[0]


def heavy_files_first(items: list) -> list:
    """The tests in the order `make test`'s processes take their files (pytest-xdist hands out
    whole files, `--dist loadfile --no-loadscope-reorder`, the next to whichever process is
    free): files with `slow` tests first, most first, then the rest, most tests first, ties in
    collection order, each file's tests in theirs. A run then ends on light files, not with one
    process alone on a heavy one (docs/benchmarks.md, "The test suite")."""
    slow, tests, first = Counter(), Counter(), {}
    for i, item in enumerate(items):
        path = file_of(item)
        first.setdefault(path, i)
        tests[path] += 1
        slow[path] += item.get_closest_marker("slow") is not None
    rank = {path: (-slow[path], -tests[path], first[path]) for path in first}
    return sorted(items, key=lambda item: rank[file_of(item)])


def write_parquet(path, records: list[dict], row_group_size: int = 4, field: str = "text") -> str:
    """Records (`id`, `text`) as a Parquet file as the Hub's text corpora hold them (the text in
    column `field`), a `url` column beside (not read), `row_group_size` rows a group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"id": [r["id"] for r in records], "url": ["https://example.org"] * len(records)}
    table = pa.table({**columns, field: [r["text"] for r in records]})
    pq.write_table(table, str(path), row_group_size=row_group_size)
    return str(path)


def write_other_formats(folder, texts: list[str], field: str = "text") -> str:
    """`texts` as WikiExtractor's output (a block each, the second half in a file of its
    `--json` layout), as an Arrow stream file (ids `aN`, the text in column `field`) and in the
    paragraphs format (a document each) in a `.tgz` under `folder`; the inputs."""
    import io
    import tarfile

    import pyarrow as pa

    os.makedirs(os.path.join(folder, "text"))
    block = '<doc id="{}" url="u" title="T">\nT\n\n{}\n</doc>\n'
    escaped, half = [html.escape(t, False) for t in texts], len(texts) // 2
    with open(os.path.join(folder, "text", "wiki_00"), "w", encoding="utf-8") as f:
        f.writelines(block.format(i, t) for i, t in enumerate(escaped[:half]))
    with open(os.path.join(folder, "text", "wiki_01"), "w", encoding="utf-8") as f:
        for i in range(half, len(texts)):  # its --json layout: a record a line
            f.write(json.dumps({"id": str(i), "url": "u", "title": "T", "text": escaped[i]}) + "\n")
    table = pa.table({"id": [f"a{i}" for i in range(len(texts))], field: texts})
    with pa.ipc.new_stream(os.path.join(folder, "rows.arrow"), table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    lines = ["\n".join(line for line in t.splitlines() if line.strip()) for t in texts]
    data = ("\n\n".join(lines) + "\n").encode()
    with tarfile.open(os.path.join(folder, "paragraphs.tgz"), "w:gz") as tar:
        member = tarfile.TarInfo("paragraphs.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    inputs = f"wikiextractor:{folder}/text,arrow:{folder}/rows.arrow"
    return f"{inputs},paragraphs:{folder}/paragraphs.tgz"


def build_shards(out: str, *extra: str, inputs: str = SAMPLE_INPUT) -> int:
    from pipeline.shell.cli import main

    workers = [] if "--dask-address" in extra else ["--workers", "1"]  # a cluster has its own
    return main(["build", "--input", inputs, "--out", out, *workers, *extra])


def build_in_a_process(out: str, *extra: str, inputs: str = SAMPLE_INPUT) -> None:
    """A build with 2 workers, as `bert-shards build` runs it: in a fresh process, which forks
    its workers. In a test process the build would not fork them (pytest-xdist's thread is
    running), and Beam would start two fresh interpreters instead, each importing it again."""
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs, "--out", out]
    cmd += ["--workers", "2", "--progress-seconds", "0", *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def build_process(
    out: str, *args: str, inputs: str = SAMPLE_INPUT, output=subprocess.PIPE
) -> subprocess.Popen:
    """`bert-shards build` of `inputs` into `out` with `args`, in a process group of its own (a
    kill takes Beam's workers too), its temporary folder next to `out` (a SIGKILL leaves Beam's
    behind, and the suite leaves none in /tmp), its output to a pipe or to `output`, a file (a
    process the build left running would hold a pipe open, and reading it would wait)."""
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs, "--out", out, *args]
    tmp = os.path.join(os.path.dirname(out), "tmp")
    os.makedirs(tmp, exist_ok=True)
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": tmp},
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_when(
    proc: subprocess.Popen, pattern: str, timeout: float = 120, sig: int = signal.SIGKILL
) -> bool:
    """Send `sig` (SIGKILL) to the build's whole process group once `pattern` matches a file;
    False when the build ended first."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if glob.glob(pattern):
            os.killpg(proc.pid, sig)
            proc.wait()
            return True
        time.sleep(0.05)
    proc.communicate()
    return False


def finished_bucket_times(out: str) -> set[int]:
    """The modification times of the shards a killed build finished (each has its record)."""
    records = glob.glob(f"{out}/shards/.building/bucket-*.json")
    return {os.stat(p[: -len("json")] + "arrow").st_mtime_ns for p in records}


def shard_times(out: str) -> set[int]:
    """The modification times of a finished set's shards."""
    return {os.stat(p).st_mtime_ns for p in glob.glob(f"{out}/shards/*.arrow")}


def built_once(tmp_path_factory, name: str, make: Callable[[str], object]) -> str:
    """`make(path)` once for the whole run, its path returned: of make test's processes, the
    first to ask makes it, under a lock, in the folder their temporary folders share, and the
    others wait for it and read it. Read-only to its users, as a session fixture is."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # popen-gw0, popen-gw1, ... sit side by side in it
    path, done = root / f"once-{name}", root / f"once-{name}.done"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            make(str(path))
            done.touch()
    return str(path)


def file_digests(out: str) -> dict[str, str]:
    """sha256 of each shard and of vocab.txt, by path relative to `out`."""
    return {
        os.path.relpath(p, out): hashlib.sha256(open(p, "rb").read()).hexdigest()
        for p in sorted(glob.glob(f"{out}/shards/*.arrow")) + [f"{out}/vocab.txt"]
    }


def read(path: str) -> bytes:
    """A local or gs:// file's bytes."""
    from pipeline.files.fsio import read_bytes

    return read_bytes(path)


def shard_set(out: str) -> dict:
    """What decides a set's bytes, local or on gs://: its shards, vocab and tokenizer files, and
    the manifest without its `created` note (time, host, OUT)."""
    manifest = json.loads(read(f"{out}/manifest.json"))
    manifest.pop("created")
    files = {e["path"]: read(f"{out}/{e['path']}") for e in manifest["shards"]}
    files.update({name: read(f"{out}/{name}") for name in BUILD_FILES})
    return {"manifest": manifest, **files}


def expected_rows(out: str) -> list[dict]:
    """Every row of the set, in shard order, in the fixed-length layout of Google's BERT, as an
    export must hold it: from the Arrow shards through `to_pylist`, a plain loop per row, not
    through the export's code."""
    from schemas.reader import ShardSet

    ss = ShardSet.open(out)
    seq, preds = ss.shard_config.max_seq_length, ss.shard_config.max_predictions_per_seq
    rows = []
    for i in range(len(ss)):
        for r in ss.table(i).to_pylist():
            n, k, b = len(r["input_ids"]), len(r["masked_positions"]), r["segment_b_start"]
            rows.append(
                {
                    "ids": r["input_ids"],
                    "segment_b_start": b,
                    "positions": r["masked_positions"],
                    "labels": r["masked_labels"],
                    "nsp": int(r["is_random_next"]),
                    "input_ids": r["input_ids"] + [0] * (seq - n),
                    "input_mask": [1] * n + [0] * (seq - n),
                    "segment_ids": [0] * b + [1] * (n - b) + [0] * (seq - n),
                    "masked_lm_positions": r["masked_positions"] + [0] * (preds - k),
                    "masked_lm_ids": r["masked_labels"] + [0] * (preds - k),
                    "masked_lm_weights": [1.0] * k + [0.0] * (preds - k),
                }
            )
    return rows


def google_layout(vocab: Vocab) -> Vocab:
    """Google's released layout: [PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103, more [unusedN], then the pieces."""
    rest = [p for p in vocab.pieces if p not in SPECIAL_TOKENS]
    head = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return Vocab(tuple(head + [f"[unused{i}]" for i in range(99, 120)] + rest))


def children(pid: int) -> list[int]:
    """The pids of a process's children, from every thread of it ([] once it is gone)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return [
            int(c) for t in tasks for c in open(f"/proc/{pid}/task/{t}/children").read().split()
        ]
    except (FileNotFoundError, ProcessLookupError):
        return []


def session_members(sid: int) -> list[int]:
    """The live processes (not zombies) of session `sid`: what a command started in a session
    of its own left running."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(name))
    return found


def left_in_session(sid: int, timeout: float = 10) -> list[int]:
    """`session_members(sid)` once the session has emptied or `timeout` seconds have passed (a
    worker, or multiprocessing's resource tracker, may still be exiting as the command returns)."""
    deadline = time.monotonic() + timeout
    while session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return session_members(sid)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def signal_at_fork(cli: str) -> str:
    """A script (for `python -c`) that runs `main` of the module `cli` on its arguments and sends
    its own process SIGTERM from an at-fork hook while the command's handler is set: the signal
    lands inside the interpreter's at-fork hooks, where CPython drops what a handler raises."""
    return f"""
import os, signal, sys
from {cli} import main
from schemas.interrupts import active

def hook():
    if active():
        os.kill(os.getpid(), signal.SIGTERM)

os.register_at_fork(after_in_parent=hook)
sys.exit(main(sys.argv[1:]))
"""


def ctrl_c_at_fork(cli: str) -> str:
    """A script like `signal_at_fork`'s, whose first forked child sends SIGINT to the whole
    process group from its at-fork hook, as one Ctrl-C in a terminal that lands while the
    command forks: the parent and the new child both receive it (start the script in a session
    of its own)."""
    return f"""
import os, signal, sys
from {cli} import main
from schemas.interrupts import active

forks = 0

def forked():
    global forks
    forks += 1

def hook():
    if active() and not forks:
        os.killpg(0, signal.SIGINT)

os.register_at_fork(after_in_parent=forked, after_in_child=hook)
sys.exit(main(sys.argv[1:]))
"""


@contextmanager
def tmpfs(path, options: str, instead: str = "") -> Iterator[str]:
    """A tmpfs mounted at `path` (made here) with mount's `options` for the block; the test is
    skipped where none can be mounted (not root, no mount), naming what covers it `instead`."""
    import pytest

    os.makedirs(path, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.strip()}){instead and '; '}{instead}"
        )
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def read_only_folder(path):
    """An empty tmpfs mounted read-only at `path` for the block: no one writes in it, root too."""
    return tmpfs(path, "ro,size=64k")


def refusal(capsys, *argv: str, command: str = "build") -> str:
    """The one line `bert-shards COMMAND --input sample/text ARGV` is refused with."""
    import pytest

    from pipeline.shell.cli import main

    with pytest.raises(SystemExit) as e:
        main([command, "--input", SAMPLE_TEXT, *argv])
    assert e.value.code not in (0, None)
    message = str(e.value.code) if isinstance(e.value.code, str) else capsys.readouterr().err
    assert message.count("\n") <= 1, message  # one line: no usage block
    return message.strip()


def calls_to(monkeypatch, owner, name: str) -> list:
    """`owner.name` replaced by one that records each call's first argument, then calls it."""
    real, calls = getattr(owner, name), []

    def recorded(first, *args, **kwargs):
        calls.append(first)
        return real(first, *args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return calls


def signal_after(monkeypatch, owner, name: str, sig: int) -> None:
    """`owner.name` runs, then this process gets `sig`, which interrupts the wait after it."""
    real = getattr(owner, name)

    def then_signal(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), sig)
        time.sleep(10)  # the handler raises in here
        raise AssertionError(f"{sig} did not interrupt")

    monkeypatch.setattr(owner, name, then_signal)


def module_name(path, root: str = ROOT) -> str:
    """The dotted module name of a source file (a package's `__init__.py` names the package)."""
    parts = list(Path(path).relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path, name: str, names: bool = False) -> Iterator[tuple[str, int]]:
    """(module, line) of every import in a source file, at any depth (inside functions too),
    relative ones made absolute from `name`, the file's module. With `names`, `from A import B`
    also gives A.B, since B may be a module rather than a name in A."""
    import ast

    path = Path(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if names:
                yield from ((f"{base}.{a.name}", node.lineno) for a in node.names)
            yield base, node.lineno


DATAFLOW_BUCKET = "gs://example-bucket"


def dataflow_dry_run() -> tuple:
    """A whole build (a multistream dump and books, with --dedup) made a Dataflow job offline
    and without credentials (Beam's `--dry_run`): the job, the names of the files Beam staged
    for it (in the build's submission folder), and that folder, removed once the run ended."""
    from pipeline.build import BuildConfig, build
    from pipeline.files.listing import InputSpec
    from pipeline.runners.run import make_pipeline, pipeline_options, submission_folder
    from pipeline.stages.dedup import DedupConfig

    args = ["--project", "example-project", "--region", "europe-west4"]
    args += ["--temp_location", f"{DATAFLOW_BUCKET}/tmp", "--job_name", "bert-shards-test"]
    args += ["--setup_file", os.path.join(ROOT, "setup.py"), "--dry_run", "True"]
    cfg = BuildConfig(
        inputs=(
            InputSpec("wikipedia", f"{DATAFLOW_BUCKET}/dumps/enwiki-*-multistream.xml.bz2"),
            InputSpec("books", f"{DATAFLOW_BUCKET}/bookscorpus/"),
        ),
        out=f"{DATAFLOW_BUCKET}/shards",
        dedup=DedupConfig(),
    )
    options = pipeline_options(args, "DataflowRunner", 0)
    with submission_folder(options) as folder:
        p = make_pipeline(options)
        build(p, cfg)
        job = p.run().job
        staged = [name for _, _, names in os.walk(folder) for name in names]
    return job, staged, folder
