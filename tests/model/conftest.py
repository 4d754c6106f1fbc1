"""Model fixtures: a synthetic shard set (tests/model/helpers.py writes it with `schemas`
alone, never the pipeline), one intra-op thread, and a short pre-training run several tests
fine-tune or export."""

from __future__ import annotations

import pytest

from tests.helpers import built_once
from tests.model.helpers import config, write_shard_set


@pytest.fixture(scope="session")
def shards_dir(tmp_path_factory) -> str:
    """Three shards of 96 learnable rows each, lengths 16..64 (shared, read-only)."""
    return built_once(tmp_path_factory, "model-shards", write_shard_set)


@pytest.fixture
def make_shards():
    """A factory: make_shards(directory, **write_shard_set options) -> directory."""
    return write_shard_set


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One intra-op thread: the machine's cores are shared, and spinning OpenMP threads on a
    busy machine make tiny models slower, not faster."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def pretrained_run(shards_dir, tmp_path_factory) -> str:
    """A run directory after 60 tiny-model steps on `shards_dir` (last.pt, metrics, vocab),
    made once for all test processes; read-only."""
    from model.pretrain import pretrain

    def run(path: str) -> None:
        cfg = config(
            shards_dir,
            path,
            steps=60,
            batch_size=16,
            warmup=6,
            log_every=10,
            ckpt_every=60,
            eval_batches=5,
        )
        pretrain(cfg)

    return built_once(tmp_path_factory, "tiny-run", run)
