"""The stage profile runs the build's own functions, stage by stage, and makes the same rows."""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest

from bench.reference.sides import slice_files
from bench.stage_profile import STAGES, Clock, render, stage_seconds
from pipeline.core.config import VocabConfig
from pipeline.core.tokenize import train_vocab
from tests.helpers import SAMPLE


def test_clock_sums_each_stage():
    clock = Clock()
    for _ in range(3):
        with clock("work"):
            sum(range(20_000))
    assert clock.seconds["work"] > 0 and set(clock.seconds) == {"work"}


def test_stages_of_the_sample_make_its_shards(tmp_path):
    for copy in ("copy-0", "copy-1"):  # one file name in two folders: two documents each
        shutil.copytree(f"{SAMPLE}/text", tmp_path / "in" / copy)
    files, size = slice_files(str(tmp_path / "in"), 1.0)
    assert len(files) == 2 and size == sum(os.path.getsize(f) for f in files) > 0
    lines = [x.strip() for f in files for x in open(f, encoding="utf-8") if x.strip()]
    vocab, _ = train_vocab(lines, VocabConfig(vocab_size=400, min_frequency=1))
    (tmp_path / "vocab.txt").write_text(vocab.to_text(), encoding="utf-8")
    seconds = stage_seconds(files, str(tmp_path / "vocab.txt"), str(tmp_path))
    assert list(seconds) == list(STAGES)
    assert all(s >= 0 for s in seconds.values()) and seconds["tokenize"] > 0
    shards = sorted((tmp_path / "out" / "shards" / ".building").glob("bucket-*.arrow"))
    assert shards  # the rows were built and written, as the build writes them
    rows = sum(pa.ipc.open_file(pa.memory_map(str(p))).read_all().num_rows for p in shards)
    assert rows > 0
    table = render(
        [{"stage": s, "cpu_s": v, "share": 0.1, "mb_per_cpu_s": None} for s, v in seconds.items()]
    )
    assert all(f"| {s} |" in table for s in STAGES)
    assert np.isfinite(list(seconds.values())).all()


@pytest.mark.slow
def test_the_whole_build_reads_copies_of_one_file_name_as_distinct_documents(tmp_path):
    from bench.stage_profile import whole_build

    for copy in ("copy-0", "copy-1"):
        shutil.copytree(f"{SAMPLE}/text", tmp_path / "in" / copy)
    files, _ = slice_files(str(tmp_path / "in"), 1.0)
    lines = [x.strip() for f in files for x in open(f, encoding="utf-8") if x.strip()]
    vocab, _ = train_vocab(lines, VocabConfig(vocab_size=400, min_frequency=1))
    (tmp_path / "vocab.txt").write_text(vocab.to_text(), encoding="utf-8")
    assert whole_build(files, str(tmp_path / "vocab.txt"), str(tmp_path / "out")) > 0
    assert (tmp_path / "out" / "manifest.json").exists()


def test_beam_part_is_shown_as_measured_negative_too():
    """What the whole build spends beyond the stages timed alone is shown as measured: never
    clamped at 0, and a negative one says the stages alone took longer (within noise)."""
    from bench.stage_profile import BEAM, table

    stages = {"read": 2.0, "tokenize": 5.0}
    over = {r["stage"]: r for r in table(stages, 6.5, 200_000_000)}
    assert over[BEAM]["cpu_s"] == -0.5 and over[BEAM]["share"] == round(-0.5 / 6.5, 3)
    assert "negative" in over[BEAM]["note"] and "0.50 CPU-s more" in over[BEAM]["note"]
    assert over["whole build"]["cpu_s"] == 6.5 and over["whole build"]["share"] == 1.0
    under = {r["stage"]: r for r in table(stages, 9.0, 200_000_000)}
    assert under[BEAM]["cpu_s"] == 2.0 and "negative" not in under[BEAM]["note"]
    assert "| -0.5 |" in render(list(over.values()))


def test_the_stages_cut_buckets_as_the_build_does(tmp_path, monkeypatch):
    """The profile plans its buckets with the build's default tokens per bucket, the one its
    whole build (the CLI, no --bucket-tokens) uses: taken from the build, not copied."""
    import pipeline.stages.instances as instances
    from bench import stage_profile
    from pipeline.build import BuildConfig
    from pipeline.shell.arguments import field_default

    default = next(f.default for f in dataclasses.fields(BuildConfig) if f.name == "bucket_tokens")
    assert stage_profile.BUCKET_TOKENS == default == field_default("bucket_tokens")
    asked = []
    real = instances.num_buckets

    def spy(totals, cfg, num_shards, bucket_tokens):
        asked.append((num_shards, bucket_tokens))
        return real(totals, cfg, num_shards, bucket_tokens)

    monkeypatch.setattr(instances, "num_buckets", spy)
    shutil.copytree(f"{SAMPLE}/text", tmp_path / "in" / "copy-0")
    files, _ = slice_files(str(tmp_path / "in"), 1.0)
    lines = [x.strip() for f in files for x in open(f, encoding="utf-8") if x.strip()]
    vocab, _ = train_vocab(lines, VocabConfig(vocab_size=400, min_frequency=1))
    (tmp_path / "vocab.txt").write_text(vocab.to_text(), encoding="utf-8")
    stage_seconds(files, str(tmp_path / "vocab.txt"), str(tmp_path))
    assert asked == [(0, default)]
