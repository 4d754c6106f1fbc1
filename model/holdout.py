"""The held-out evaluation at the end of pre-training: which rows are held out, and MLM and NSP
loss, accuracy and perplexity on them (reduced over ranks)."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from model.data import LoaderConfig, Part, PretrainingData, batches, whole_shards
from model.trainer import Trainer, model_inputs, to_device
from schemas import ShardSet


def split_holdout(shards: ShardSet, holdout: int) -> tuple[list[Part], list[Part]]:
    """Train on all shards but the last `holdout` (manifest order), evaluated at the end. A set
    with too few shards holds out the last tenth of its last shard's rows instead."""
    n = len(shards)
    if holdout == 0:
        return whole_shards(shards, range(n)), []
    if n > holdout:
        return whole_shards(shards, range(n - holdout)), whole_shards(shards, range(n - holdout, n))
    rows = shards.manifest.shards[n - 1].rows
    held = max(1, rows // 10)
    print(
        f"note: {n} shard(s), too few to hold {holdout} out: evaluating on the last {held} rows "
        f"of {shards.manifest.shards[n - 1].path} instead (they may share documents with "
        "training rows; build more shards for a clean held-out set)"
    )
    train = whole_shards(shards, range(n - 1)) + [(n - 1, 0, rows - held)]
    return train, [(n - 1, rows - held, rows)]


@torch.no_grad()
def evaluate(trainer: Trainer, shards: ShardSet, held: list[Part], micro: int) -> dict | None:
    """MLM and NSP loss and accuracy on the held-out rows, with their own (static) masks."""
    if sum(stop - start for _, start, stop in held) == 0:
        return None
    cfg, d = trainer.cfg, trainer.d
    lc = LoaderConfig(micro, cfg.seed, d.rank, d.world, shuffle=False, drop_last=False)
    data = PretrainingData(shards, held, lc)
    stop = min(data.batches_per_epoch, cfg.eval_batches)
    sums = torch.zeros(6, dtype=torch.float64, device=d.device)
    trainer.raw.eval()
    for batch in batches(data, 0, stop):
        batch = to_device(batch, d.device)
        with trainer.amp():
            mlm, nsp = trainer.raw(*model_inputs(batch), batch["mlm_positions"])
        sums += _batch_sums(mlm, nsp, batch)
    trainer.raw.train()
    if d.world > 1:
        dist.all_reduce(sums)
    return _eval_record(sums.tolist(), shards, held)


def _batch_sums(mlm: torch.Tensor, nsp: torch.Tensor, batch: dict[str, torch.Tensor]):
    """[mlm_loss, nsp_loss, mlm_correct, mlm_count, nsp_correct, nsp_count], summed, float64."""
    mlm_l, nsp_l, device = batch["mlm_labels"], batch["nsp_labels"], mlm.device
    return torch.stack(
        [
            F.cross_entropy(mlm.float(), mlm_l, reduction="sum").double(),
            F.cross_entropy(nsp.float(), nsp_l, reduction="sum").double(),
            (mlm.argmax(-1) == mlm_l).sum().double(),
            torch.tensor(float(len(mlm_l)), device=device, dtype=torch.float64),
            (nsp.argmax(-1) == nsp_l).sum().double(),
            torch.tensor(float(len(nsp_l)), device=device, dtype=torch.float64),
        ]
    )


def _eval_record(sums: list[float], shards: ShardSet, held: list[Part]) -> dict:
    mlm_sum, nsp_sum, mlm_ok, mlm_n, nsp_ok, nsp_n = sums
    mlm_loss, nsp_loss = mlm_sum / mlm_n, nsp_sum / nsp_n
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "nsp_loss": nsp_loss,
        "mlm_acc": mlm_ok / mlm_n,
        "nsp_acc": nsp_ok / nsp_n,
        "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
        "sequences": int(nsp_n),
        "held_out": [f"{shards.manifest.shards[i].path}[{a}:{b}]" for i, a, b in held],
    }
