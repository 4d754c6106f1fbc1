"""gs:// builds against the local GCS emulator (tests/gcs_emulator.py): the same bytes as a
local build (1 and 2 workers, --dedup, a multistream Wikipedia dump read in spans, a resume
after SIGKILL, a rebuild with another seed into an OUT that held a build), nothing left in
the build area, one build at a time, inputs named as on a local disk, and what a build costs
the store."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.gcs_emulator import upload_tree
from tests.helpers import (
    BUILD_FILES,
    ROOT,
    SAMPLE,
    build_in_a_process,
    build_shards,
    read,
    shard_set,
)

pytest.importorskip("gcp_storage_emulator")


def bucket_objects(gcs, out: str) -> list[str]:
    bucket, _, prefix = out[len("gs://") :].partition("/")
    return gcs.list_objects(bucket, prefix + "/")


@pytest.fixture(scope="module")
def gcs_input(gcs_emulator):
    """The sample corpus in a bucket of its own, as `books:` and `text:` inputs on gs://."""
    gcs_emulator.create_bucket("corpus")
    upload_tree(SAMPLE, "gs://corpus/sample")
    return "books:gs://corpus/sample/books,text:gs://corpus/sample/text/"


@pytest.fixture(scope="module")
def local_set(sample_shards):
    return shard_set(sample_shards)


@pytest.fixture(scope="module")
def one_worker(gcs_emulator, gcs_input):
    """A 1-worker build from gs:// into gs:// (the sample_shards settings), and its counts."""
    gcs_emulator.create_bucket("one")
    gcs_emulator.reset_stats()
    assert build_shards("gs://one/out", "--num-shards", "4", inputs=gcs_input) == 0
    return "gs://one/out", gcs_emulator.stats()


def test_gcs_build_is_the_local_build(one_worker, local_set, gcs_emulator):
    out, _ = one_worker
    assert shard_set(out) == local_set
    names = bucket_objects(gcs_emulator, out)
    assert not [n for n in names if "/.building/" in n or n.endswith(".lock")], names
    assert len(names) == 4 + 1 + len(BUILD_FILES)


def test_gcs_build_reads_little_and_asks_little(one_worker):
    """Bytes read at most 1.5x the bytes written; requests of whole files, never of buffers;
    one client (no bucket look-ups); shards copied once (no rename's copy and delete)."""
    _, stats = one_worker
    assert stats["bytes_down"] <= 1.5 * stats["bytes_up"], stats
    kinds = stats["by_kind"]
    assert "bucket-get" not in kinds, kinds
    assert kinds["copy"] == 4, kinds  # each shard once, build area -> shards/
    assert stats["requests"] < 100, stats


def test_a_resume_of_a_finished_set_on_gcs_is_refused_writing_nothing(
    one_worker, gcs_emulator, gcs_input
):
    """A finished set has nothing to resume (a job that ran on after its command was stopped
    can have finished it): on gs:// as locally, refused in one line before OUT is claimed, and
    not one object written, copied or deleted."""
    out, _ = one_worker
    gcs_emulator.reset_stats()
    with pytest.raises(SystemExit) as e:
        build_shards(out, "--num-shards", "4", "--resume", inputs=gcs_input)
    line = str(e.value.code)
    assert line.startswith(
        "error: --resume refused: OUT holds a finished build (manifest.json), so there is "
        "nothing to resume"
    ), line
    assert "bert-shards validate OUT" in line and "\n" not in line
    kinds = gcs_emulator.stats()["by_kind"]
    assert not {"upload", "insert", "copy", "delete", "batch", "patch"} & set(kinds), kinds


@pytest.mark.slow
def test_two_workers_rebuild_another_seed_into_a_used_out(gcs_emulator, gcs_input, local_set):
    """A set built with another seed, then 2 workers with the default one and --overwrite:
    the default set's bytes, nothing of the first build left."""
    gcs_emulator.create_bucket("two")
    out = "gs://two/out"
    assert build_shards(out, "--num-shards", "4", "--seed", "7", inputs=gcs_input) == 0
    assert shard_set(out) != local_set
    build_in_a_process(out, "--num-shards", "4", "--overwrite", inputs=gcs_input)
    assert shard_set(out) == local_set
    assert not [n for n in bucket_objects(gcs_emulator, out) if "/.building/" in n]


def test_dedup_and_weighted_inputs_on_gcs_are_the_local_ones(gcs_emulator, gcs_input, tmp_path):
    """--dedup and --language-smoothing (the chunks' records carry each input's characters):
    the local bytes; the manifest names the inputs as given, so its weighting is compared by
    value."""
    gcs_emulator.create_bucket("dedup")
    local = str(tmp_path / "local")
    args = ("--num-shards", "4", "--dedup", "--language-smoothing", "0.7")
    assert build_shards(local, *args) == 0
    assert build_shards("gs://dedup/out", *args, inputs=gcs_input) == 0
    sets = [shard_set("gs://dedup/out"), shard_set(local)]
    for s in sets:
        weighting = s["manifest"]["counts"]["by_input"]
        s["manifest"]["counts"]["by_input"] = [weighting[k] for k in sorted(weighting)]
    assert sets[0] == sets[1] and len(sets[0]["manifest"]["counts"]["by_input"]) == 2


def test_a_multistream_wikipedia_dump_on_gcs_builds_the_local_bytes(
    gcs_emulator, tmp_path, monkeypatch
):
    """BERT's Wikipedia as a Dataflow build reads it: a `-multistream` dump in a bucket, its
    index found beside it, and the dump read in spans (a span per bz2 stream here), each from
    its own offset."""
    import pipeline.sources.wikipedia.spans as wiki_spans
    from tests.pipeline.wikidata import TABLE_MARKUP, gensim_xml, write_multistream

    local = tmp_path / "dumps"
    write_multistream(local, pages_per_stream=1)
    name = "enwiki-20240101-pages-articles-multistream"
    gcs_emulator.create_bucket("wiki")
    upload_tree(str(local), "gs://wiki/dumps")
    monkeypatch.setattr(wiki_spans, "SPAN_BYTES", 1)
    args = ("--vocab-size", "500", "--num-shards", "2")
    assert build_shards(str(tmp_path / "out"), *args, inputs=f"wikipedia:{local}") == 0
    gcs_emulator.reset_stats()
    assert build_shards("gs://wiki/out", *args, inputs="wikipedia:gs://wiki/dumps") == 0
    assert shard_set("gs://wiki/out") == shard_set(str(tmp_path / "out"))
    counts = json.loads(read("gs://wiki/out/manifest.json"))["counts"]["total"]
    assert counts["wiki_pages"] == gensim_xml(TABLE_MARKUP).count(b"<page>") > 1
    ranges = [
        path
        for method, path, status in gcs_emulator.request_log()
        if path.startswith("/download/") and status == 206 and f"{name}.xml.bz2" in path
    ]
    # a ranged read of the dump per span, and one of its head before the build
    assert len(ranges) == counts["wiki_pages"] + 1


def start_build(out: str, inputs: str, gcs, tmp: str) -> subprocess.Popen:
    """A build into `out` in a process of its own, returned once it has split a chunk. Its
    temporary folder is `tmp`: killed with SIGKILL, it leaves Beam's (empty) folder there."""
    code = (
        "import sys; from tests.helpers import build_shards; "
        f"sys.exit(build_shards({out!r}, '--num-shards', '4', inputs={inputs!r}))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": tmp},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not [n for n in bucket_objects(gcs, out) if "/tmp/sentences/" in n]:
        assert child.poll() is None and time.monotonic() < deadline, "the build ended first"
        time.sleep(0.02)
    return child


@pytest.mark.slow
def test_resume_after_sigkill(gcs_emulator, gcs_input, local_set, tmp_path):
    """Killed mid-build: no manifest, its lock left behind (this machine, process gone: taken
    over); `--resume` ends with the uninterrupted build's bytes and an empty build area."""
    gcs_emulator.create_bucket("resume")
    out = "gs://resume/out"
    child = start_build(out, gcs_input, gcs_emulator, str(tmp_path))
    child.send_signal(signal.SIGKILL)
    child.wait()
    names = bucket_objects(gcs_emulator, out)
    assert "out/manifest.json" not in names
    assert "out/.bert-shards.lock" in names
    assert build_shards(out, "--num-shards", "4", "--resume", inputs=gcs_input) == 0
    assert shard_set(out) == local_set
    assert not [n for n in bucket_objects(gcs_emulator, out) if "/.building/" in n]


def test_sigterm_releases_the_lock_object(gcs_emulator, gcs_input, tmp_path):
    """Stopped by SIGTERM, the build unwinds: exit 143, its lock object deleted, no manifest,
    the finished work kept for --resume."""
    gcs_emulator.create_bucket("term")
    out = "gs://term/out"
    child = start_build(out, gcs_input, gcs_emulator, str(tmp_path))
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 143, err[-2000:]
    names = bucket_objects(gcs_emulator, out)
    assert "out/.bert-shards.lock" not in names and "out/manifest.json" not in names
    assert [n for n in names if "/tmp/sentences/" in n]


def test_a_second_build_into_one_out_is_refused(gcs_emulator, gcs_bucket, capsys):
    """The lock of a build running elsewhere: refused at once, naming it; nothing written."""
    from pipeline.files.fsio import write_text

    out = f"gs://{gcs_bucket}/out"
    write_text(f"{out}/.bert-shards.lock", "build pid 4242 on another-host since 2026-12-01")
    with pytest.raises(SystemExit) as e:
        build_shards(out, "--num-shards", "4")
    message = str(e.value)
    assert "build pid 4242 on another-host" in message and "is building into it now" in message
    assert gcs_emulator.list_objects(gcs_bucket) == ["out/.bert-shards.lock"]


def test_foreign_objects_in_out_are_refused(gcs_emulator, gcs_bucket):
    from pipeline.files.fsio import write_text

    out = f"gs://{gcs_bucket}/out"
    write_text(f"{out}/notes.txt", "mine")
    write_text(f"{out}/shards/keep/x.bin", "mine too")
    with pytest.raises(SystemExit) as e:
        build_shards(out, "--num-shards", "4")
    assert "notes.txt" in str(e.value) and "shards/keep/" in str(e.value)
    assert gcs_emulator.list_objects(gcs_bucket) == ["out/notes.txt", "out/shards/keep/x.bin"]


@pytest.mark.parametrize(
    "pattern",
    [
        "books",
        "books/",
        "books/*",
        "books/**",
        "books/**/*.txt",
        "books/*/*.txt",
        "text/wiki-style.txt",
    ],
)
def test_inputs_name_the_same_files_as_on_a_local_disk(gcs_input, pattern):
    from pipeline.files.listing import InputSpec, expand_pattern

    local = expand_pattern(InputSpec("books", f"{SAMPLE}/{pattern}"))
    remote = expand_pattern(InputSpec("books", f"gs://corpus/sample/{pattern}"))
    assert [rel for *_, rel in remote] == [rel for *_, rel in local]
    assert local and all(p.startswith("gs://corpus/sample/") for _, p, _ in remote)
    if pattern.rstrip("/") == "books":
        assert len(remote) == 4  # the nested layout, at every depth


def test_a_bucket_reads_only_its_slices(gcs_emulator, gcs_bucket, tmp_path):
    """A units file on gs://: a hash range costs two ranged requests (its slices' offsets, then
    their bytes), a small part of the file; the units are the mapped local file's."""
    import numpy as np

    from pipeline.core.instances import TokenizedDoc
    from pipeline.files.chunks import finished
    from pipeline.files.units import hash_range, read_units, write_units

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 999, (2000, 300)).astype(np.uint16)
    units = [
        (
            int(rng.integers(0, 2**64, dtype=np.uint64)),
            0,
            TokenizedDoc(f"d{i}", ids[i], np.array([0, 300]), "s"),
        )
        for i in range(2000)
    ]
    local = write_units(str(tmp_path / "u.arrow"), units)
    remote = write_units(f"gs://{gcs_bucket}/u.arrow", units)
    assert remote.slices > local.slices and finished(remote.path) == remote
    gcs_emulator.reset_stats()
    lo, hi = hash_range(3, 16)
    got = read_units(remote, lo, hi)
    stats = gcs_emulator.stats()
    assert stats["requests"] == 2
    assert stats["bytes_down"] < os.path.getsize(local.path) / 16 * 1.5  # 1/16 of the hashes
    want = read_units(local, lo, hi)
    assert len(want) > 50
    assert [(p, d.id, d.ids.tolist()) for p, d in got] == [
        (p, d.id, d.ids.tolist()) for p, d in want
    ]


def test_vocab_on_gcs_is_the_build_vocab(gcs_emulator, gcs_input, sample_shards):
    """`bert-shards vocab` into gs://: the vocab the build trained; no temporary area left."""
    from pipeline.shell.cli import main

    gcs_emulator.create_bucket("vocab")
    assert main(["vocab", "--input", gcs_input, "--out", "gs://vocab/v", "--workers", "1"]) == 0
    with open(os.path.join(sample_shards, "vocab.txt"), "rb") as f:
        assert read("gs://vocab/v/vocab.txt") == f.read()
    assert gcs_emulator.list_objects("vocab") == ["v/tokenizer.json", "v/vocab.txt"]
    # No lock object is left there, but the objects' metadata says a command of ours wrote
    # them: vocab again, and then a build with that vocab, go into the same OUT.
    again = ["--input", gcs_input, "--out", "gs://vocab/v", "--workers", "1"]
    assert main(["vocab", *again]) == 0
    with open(os.path.join(sample_shards, "vocab.txt"), "rb") as f:
        assert read("gs://vocab/v/vocab.txt") == f.read()
    build = [*again, "--vocab", "gs://vocab/v/vocab.txt", "--progress-seconds", "0"]
    assert main(["build", *build]) == 0
    manifest = json.loads(read("gs://vocab/v/manifest.json"))
    with open(os.path.join(sample_shards, "vocab.txt"), "rb") as f:
        vocab = f.read()
    assert read("gs://vocab/v/vocab.txt") == vocab
    assert manifest["vocab_sha256"] == hashlib.sha256(vocab).hexdigest()


def test_a_users_tokenizer_on_gcs_is_not_replaced_without_overwrite(gcs_emulator, gcs_input):
    """The same names uploaded by someone else (no metadata of ours): refused, as locally."""
    from pipeline.files.fsio import blob
    from pipeline.shell.cli import main

    gcs_emulator.create_bucket("theirs")
    for name in ("vocab.txt", "tokenizer.json"):
        blob(f"gs://theirs/t/{name}").upload_from_string(b"[PAD]\n")
    again = ["--input", gcs_input, "--out", "gs://theirs/t", "--workers", "1"]
    with pytest.raises(SystemExit, match="holds vocab.txt and tokenizer.json, which no bert-"):
        main(["vocab", *again])
    with pytest.raises(SystemExit, match=r"did not write \(tokenizer.json, vocab.txt\)"):
        main(["build", *again])
    assert read("gs://theirs/t/vocab.txt") == b"[PAD]\n"
    assert main(["vocab", *again, "--overwrite"]) == 0
    assert read("gs://theirs/t/vocab.txt") != b"[PAD]\n"


def test_a_lock_of_this_machine_is_taken_over_only_when_its_process_is_gone(gcs_bucket):
    """As a local flock: a live holder on this machine refuses; a dead one's lock is taken."""
    import platform

    from pipeline.files.fsio import exists, read_text, write_text
    from pipeline.shell.outdir import OutputError, OutputLock

    out = f"gs://{gcs_bucket}/out"
    lock = f"{out}/.bert-shards.lock"
    write_text(lock, f"build pid {os.getpid()} on {platform.node()} since then")
    with pytest.raises(OutputError, match=f"build pid {os.getpid()} on"):
        OutputLock(out).__enter__()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    write_text(lock, f"build pid {dead} on {platform.node()} since then")
    with OutputLock(out):
        assert read_text(lock).startswith(f"build pid {os.getpid()} on ")
    assert not exists(lock)


@pytest.mark.parametrize("command", ["build", "vocab", "punkt"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_bucket_that_does_not_exist_is_one_line(gcs_emulator, command, overwrite):
    """Said before any work, with --overwrite too, not as the storage client's 404 traceback."""
    from pipeline.shell.cli import main

    out = "gs://no-such-bucket/out"
    args = [command, "--input", f"text:{SAMPLE}/text", "--out", out, "--workers", "1"]
    with pytest.raises(SystemExit) as e:
        main([*args, *overwrite])
    assert str(e.value.code) == (
        f"error: --out {out}: there is no bucket no-such-bucket; create it (gcloud storage "
        "buckets create gs://no-such-bucket) or choose another OUT"
    )


def test_a_wrong_format_on_gcs_is_refused_after_one_small_read(gcs_emulator, tmp_path):
    """The first file's head alone is read (not the 8 MiB of a build's reads), and nothing is
    written."""
    from pipeline.shell.cli import main
    from pipeline.sources.head import HEAD_BYTES

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "prose.txt").write_bytes(read(f"{SAMPLE}/text/wiki-style.txt") * 20)
    gcs_emulator.create_bucket("wrong-format")
    upload_tree(str(tmp_path / "corpus"), "gs://wrong-format/corpus")
    gcs_emulator.reset_stats()
    args = ["--input", "wikipedia:gs://wrong-format/corpus", "--out", "gs://wrong-format/out"]
    with pytest.raises(SystemExit) as e:
        main(["build", *args, "--workers", "1"])
    assert str(e.value.code).startswith("error: prose.txt: not a MediaWiki XML export")
    assert gcs_emulator.list_objects("wrong-format") == ["corpus/prose.txt"]
    assert os.path.getsize(tmp_path / "corpus" / "prose.txt") > 4 * HEAD_BYTES
    assert gcs_emulator.stats()["bytes_down"] < 2 * HEAD_BYTES  # the head, and the listing


def test_hidden_names_are_left_out_on_gcs_as_on_a_local_disk(gcs_emulator, gcs_bucket, tmp_path):
    """Objects whose names below the input have a part that begins with '.' are left out, and
    read where the pattern spells the dot, as the same files on a local disk."""
    from pipeline.files.listing import HIDDEN, InputSpec, expand_pattern
    from schemas import storage

    names = ("a.txt", "sub/b.txt", ".DS_Store", ".git/HEAD", "sub/.c.txt", ".notes/d.txt")
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"The file {name}.\n")
        storage.upload(str(tmp_path / name), f"gs://{gcs_bucket}/in/{name}")
    for rel in ("", "/", "/**", "/sub", "/.notes/*", "/.*", "/sub/.c.txt"):
        local, remote = (
            InputSpec("text", f"{tmp_path}{rel}"),
            InputSpec("text", f"gs://{gcs_bucket}/in{rel}"),
        )
        assert [r for *_, r in expand_pattern(remote)] == [r for *_, r in expand_pattern(local)]
        assert HIDDEN[remote] == HIDDEN[local], rel
    assert HIDDEN[InputSpec("text", f"gs://{gcs_bucket}/in")] == [
        ".DS_Store",
        ".git/HEAD",
        ".notes/d.txt",
        "sub/.c.txt",
    ]
