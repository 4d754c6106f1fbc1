"""Reading, splitting and tokenizing run as one stage of the local runner on each worker's own
chunks (no redistribution between them), and a trained vocab keeps tokenizing behind its
barrier: the stages the runner executes, as it names them, for builds of sample/."""

from __future__ import annotations

import functools
import os

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import fn_runner

from pipeline.stages.split import SplitSentences
from pipeline.stages.tokenize import TokenizeDocuments
from tests.helpers import build_shards, file_digests

STEPS = ("ReadDocuments-Read_", "SplitSentences-Split_", "Tokenize-Encode_")


@pytest.fixture
def stages(monkeypatch) -> list[str]:
    """The name of each stage the FnApiRunner executes (its fused transforms, joined by +)."""
    seen: list[str] = []
    real = fn_runner.FnApiRunner._execute_bundle

    def execute(self, context, bundle_context_manager, *args, **kwargs):
        seen.append(bundle_context_manager.stage.name)
        return real(self, context, bundle_context_manager, *args, **kwargs)

    monkeypatch.setattr(fn_runner.FnApiRunner, "_execute_bundle", execute)
    return seen


def holding(stages: list[str], step: str) -> list[int]:
    return [i for i, name in enumerate(stages) if step in name]


def test_with_a_given_vocab_read_split_and_tokenize_are_one_stage(
    stages, sample_shards, tmp_path, monkeypatch
):
    vocab = os.path.join(sample_shards, "vocab.txt")
    fused = str(tmp_path / "fused")
    assert build_shards(fused, "--num-shards", "4", "--vocab", vocab) == 0
    where = [holding(stages, step) for step in STEPS]
    assert all(len(w) == 1 for w in where), where
    assert where[0] == where[1] == where[2]

    # The same build with each step's input redistributed first, as it was before the fusion:
    # three stages, and the same bytes.
    for stage in (SplitSentences, TokenizeDocuments):
        apart = functools.partialmethod(
            lambda self, chunks, real: real(self, chunks | "Apart" >> beam.Reshuffle()),
            real=stage.expand,
        )
        monkeypatch.setattr(stage, "expand", apart)
    stages.clear()
    separate = str(tmp_path / "separate")
    assert build_shards(separate, "--num-shards", "4", "--vocab", vocab) == 0
    where = [holding(stages, step) for step in STEPS]
    assert all(len(w) == 1 for w in where) and len({w[0] for w in where}) == 3, where
    assert file_digests(fused) == file_digests(separate)


def test_a_trained_vocab_keeps_tokenizing_behind_its_barrier(stages, tmp_path):
    assert build_shards(str(tmp_path / "out"), "--num-shards", "4") == 0
    read, split, encode = (holding(stages, step) for step in STEPS)
    assert read == split and len(read) == 1
    assert len(encode) == 1 and encode[0] > read[0]
