"""A long build shows one progress line every few seconds and nothing of Beam's worker logs;
a failure on 2 workers is one line; --verbose shows the logs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from pipeline.files.fsio import write_marker
from pipeline.shell.progress import Snapshot, clock, line, vocab_seconds_expected
from tests.helpers import ROOT, SAMPLE, SAMPLE_INPUT

PROGRESS = re.compile(
    r"^\[\d+:\d\d\] (read|split|vocab|tokenize|instances) *, "
    r"read [\d.,]+/[\d.,]+ MB, [\d,]+ documents"
)
WORKER_NOISE = ("semi_persistent_directory", "Discarding unparseable args", "Traceback")


def build(out, *extra, inputs=SAMPLE_INPUT) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs, "--out", str(out)]
    return subprocess.run(
        cmd + ["--workers", "2", *extra], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_two_worker_build_prints_progress_and_no_worker_logs(tmp_path):
    # 50 copies of the sample's books (3.4 MB): the pipeline runs for seconds, so the line,
    # printed every second, shows; the sample alone runs for under a second.
    for k in range(50):
        shutil.copytree(f"{SAMPLE}/books", tmp_path / "in" / f"copy-{k:02d}")
    done = build(tmp_path / "out", "--progress-seconds", "1", inputs=f"books:{tmp_path}/in")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any(PROGRESS.match(ln) for ln in lines), done.stderr
    assert all(PROGRESS.match(ln) for ln in lines), done.stderr  # nothing else
    assert not any(noise in done.stderr for noise in WORKER_NOISE)
    assert "wrote 1 shard(s)" in done.stdout


@pytest.mark.slow
def test_a_failure_on_two_workers_is_one_line(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes(b"\x00\x01binary\x00" * 100)
    done = build(tmp_path / "out", "--progress-seconds", "0", inputs=f"books:{tmp_path}/in")
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "a.txt" in done.stderr and "--skip-bad-input (make: ARGS=--skip-bad-input)" in (
        done.stderr
    )


@pytest.mark.slow
def test_a_failure_of_vocab_on_two_workers_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "Fine words here."}\n{not json\n')
    cmd = [sys.executable, "-m", "pipeline", "vocab", "--format", "jsonl", "--input", str(bad)]
    done = subprocess.run(
        cmd + ["--out", str(tmp_path / "o"), "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: bad.jsonl:2: not JSON")


@pytest.mark.slow
def test_verbose_shows_the_logs(tmp_path):
    done = build(tmp_path / "out", "--progress-seconds", "0", "--verbose")
    assert done.returncode == 0
    assert any(noise in done.stderr for noise in WORKER_NOISE[:2]), done.stderr[-2000:]


def test_the_line_counts_what_the_workers_left(tmp_path):
    tmp, building = str(tmp_path / "tmp"), str(tmp_path)
    for name, size in (("a", 3_000_000), ("b", 1_000_000)):
        write_marker(f"{tmp}/progress/{name}.json", {"bytes": size, "documents": 10})
    for kind, names in (("documents", "ab"), ("sentences", "ab"), ("units", "a")):
        for name in names:
            write_marker(f"{tmp}/{kind}/{name}.arrow", {})
    write_marker(f"{tmp}/buckets.json", {"buckets": 4})
    write_marker(f"{building}/bucket-000001.arrow", {})
    snapshot = Snapshot(tmp, building, {})
    text = line(snapshot, 8_000_000, 2.0)
    assert text.startswith("[0:02] instances, read 4.0/8.0 MB, 20 documents")
    assert "split 2/2 chunks, tokenized 1/2" in text and "buckets 1/4" in text
    assert "2.00 MB/s read" in text and "ETA" in text
    assert clock(3725) == "1:02:05"


def test_the_line_names_the_vocab_stage_and_its_eta_counts_it(tmp_path):
    """All read and split, the vocab training: the line says so, and its ETA, which counted the
    vocab's expected time from the start, falls as the training goes on instead of climbing;
    the vocab's marker ends the stage."""
    tmp, building = str(tmp_path / "tmp"), str(tmp_path)
    size = 10_800_000  # 100,000 sentences' worth: 7 s of training expected
    expected = vocab_seconds_expected(size, 1_000_000)
    write_marker(f"{tmp}/progress/a.json", {"bytes": size // 2, "documents": 10})
    write_marker(f"{tmp}/documents/a.arrow", {})
    reading = Snapshot(tmp, building, {}, size, trains_vocab=True)
    assert reading.stage() == "read"
    with_vocab = eta_seconds(line(reading, size, 2.0, (0.0, expected)))
    assert with_vocab - eta_seconds(line(reading, size, 2.0)) == pytest.approx(expected, abs=1)
    write_marker(f"{tmp}/progress/a.json", {"bytes": size, "documents": 10})
    write_marker(f"{tmp}/sentences/a.arrow", {})
    training = Snapshot(tmp, building, {}, size, trains_vocab=True)
    assert training.stage() == "vocab"
    texts = [line(training, size, 10.0 + t, (t, expected)) for t in (0.0, 2.0, 4.0)]
    assert all(text[7:].startswith("vocab") for text in texts), texts
    etas = [eta_seconds(text) for text in texts]
    assert etas[0] > etas[1] > etas[2] > 0, texts
    assert Snapshot(tmp, building, {}, size).stage() == "split"  # a given vocab: no such stage
    write_marker(f"{tmp}/vocab.json", {"pieces": 100})
    assert Snapshot(tmp, building, {}, size, trains_vocab=True).stage() == "tokenize"


def eta_seconds(text: str) -> int:
    minutes, seconds = re.search(r"ETA (\d+):(\d\d)", text).groups()
    return int(minutes) * 60 + int(seconds)
