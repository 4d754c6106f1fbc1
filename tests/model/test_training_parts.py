"""Pre-training's parts, each once: the loss (the step's mean, the held-out evaluation's sums),
the model built apart from the Trainer that steps it."""

from __future__ import annotations

import pytest
import torch

from model.bert import pretraining_loss
from model.config import TrainConfig, preset
from model.training import Dist, Trainer, build_model


@pytest.mark.parametrize("nsp", [True, False])
def test_summed_loss_is_the_mean_times_the_counts(nsp):
    g = torch.Generator().manual_seed(0)
    mlm = torch.randn(7, 50, generator=g)
    labels = torch.randint(0, 50, (7,), generator=g)
    nsp_logits = torch.randn(3, 2, generator=g) if nsp else None
    nsp_labels = torch.tensor([0, 1, 1])
    loss, mean = pretraining_loss(mlm, nsp_logits, labels, nsp_labels)
    summed_loss, sums = pretraining_loss(mlm, nsp_logits, labels, nsp_labels, reduction="sum")
    assert sums[3].item() == 7 and sums[5].item() == 3  # masked positions, rows (NSP or not)
    assert sums[0].item() == pytest.approx(mean[0].item() * 7, rel=1e-5)
    assert sums[1].item() == pytest.approx(mean[1].item() * 3, rel=1e-5)
    assert torch.equal(sums[2:], mean[2:])  # the counts do not depend on the reduction
    assert loss.item() == pytest.approx(mean[0].item() + mean[1].item(), rel=1e-6)
    assert summed_loss.item() == pytest.approx(sums[0].item() + sums[1].item(), rel=1e-6)
    if not nsp:
        assert sums[1].item() == 0 and sums[4].item() == 0


@pytest.mark.parametrize("compile", [False, True])
def test_the_trainer_steps_the_model_it_is_given(compile):
    cfg = TrainConfig(model="tiny", steps=4, warmup=1, compile=compile, seed=3)
    d = Dist(0, 1, torch.device("cpu"))
    built = build_model(cfg, preset("tiny", 64), d)
    again = build_model(cfg, preset("tiny", 64), d)
    for p, q in zip(built.raw.parameters(), again.raw.parameters(), strict=True):
        assert torch.equal(p, q)  # seeded by cfg.seed
    assert built.ddp is None  # one rank: no DDP
    assert (built.forward is built.raw) != compile
    if compile:
        assert built.forward._orig_mod is built.raw  # compiled lazily, around the same module
    trainer = Trainer(cfg, d, built)
    assert trainer.raw is built.raw and trainer.model is built.forward and trainer.ddp is None
    params = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert params == {id(p) for p in built.raw.parameters()}


def test_a_metrics_line_the_disk_refuses_names_the_file(tmp_path):
    """A full disk met by the metrics' flush, and again by the close after it (which a run's
    `finally` calls), names metrics.jsonl, for the command's one line (a file object's own
    error names no file: the line said `None: No space left on device`)."""
    import errno

    from model.run_log import MetricsLog
    from tests.helpers import tmpfs

    with tmpfs(tmp_path / "fs", "size=8k", "the checkpoint's and export's tests fill a disk") as at:
        log = MetricsLog(f"{at}/metrics.jsonl")
        with pytest.raises(OSError) as e:
            for step in range(1000):
                log.write({"step": step, "figures": "x" * 100})
        with pytest.raises(OSError) as closing:  # what the buffer holds fails the same way
            log.close()
    for error in (e.value, closing.value):
        assert (error.errno, error.filename) == (errno.ENOSPC, f"{at}/metrics.jsonl")
