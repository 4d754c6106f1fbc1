"""Pre-training's held-out evaluation: which rows are held out of training, and MLM and NSP loss
and accuracy on them, at the end of a run (eval.json) and every `--eval-every` steps on the way
(metrics.jsonl's `held_out` figures).

An evaluation changes nothing that training depends on: the model runs in eval mode (no dropout,
so no random draw), without gradients, on the held-out rows' own static masks, read by a loader
of its own; a run that evaluates every few steps trains to the same weights as one that does not
(`tests/model/test_run_logs.py`).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from model.batches import batches
from model.bert import pretraining_loss
from model.data import LoaderConfig, Part, PretrainingData, whole_shards
from model.training import Trainer, model_inputs, to_device
from schemas.reader import ShardSet


def split_holdout(
    shards: ShardSet, holdout: int, say: bool = True
) -> tuple[list[Part], list[Part]]:
    """Train on all shards but the last `holdout` (manifest order), evaluated at the end. A set
    with too few shards holds out the last tenth of its last shard's rows instead, and says so
    when `say` (under torchrun, rank 0 alone)."""
    n = len(shards)
    if holdout == 0:
        return whole_shards(shards, range(n)), []
    if n > holdout:
        return whole_shards(shards, range(n - holdout)), whole_shards(shards, range(n - holdout, n))
    rows = shards.manifest.shards[n - 1].rows
    held = max(1, rows // 10)
    if say:
        print(
            f"note: {n} shard(s), too few to hold {holdout} out: evaluating on the last "
            f"{held} rows of {shards.manifest.shards[n - 1].path} instead (they may share "
            "documents with training rows; build more shards for a clean held-out set)"
        )
    train = whole_shards(shards, range(n - 1)) + [(n - 1, 0, rows - held)]
    return train, [(n - 1, rows - held, rows)]


class HeldOut:
    """The held-out rows of a run, read in their manifest order (never shuffled) in micro-batches
    of the training's size, at most `--eval-batches` of them per rank at each evaluation."""

    def __init__(self, trainer: Trainer, shards: ShardSet, held: list[Part], micro: int):
        self.trainer, self.shards, self.held = trainer, shards, held
        self.data = None
        if sum(stop - start for _, start, stop in held):
            cfg, d = trainer.cfg, trainer.d
            lc = LoaderConfig(micro, cfg.seed, d.rank, d.world, shuffle=False, drop_last=False)
            self.data = PretrainingData(shards, held, lc)

    @torch.no_grad()
    def evaluate(self) -> dict | None:
        """MLM and NSP loss and accuracy on the held-out rows (None: none held out), summed
        over every rank; the model is back in training mode after."""
        if self.data is None:
            return None
        trainer, d = self.trainer, self.trainer.d
        stop = min(self.data.batches_per_epoch, trainer.cfg.eval_batches)
        sums = torch.zeros(6, dtype=torch.float64, device=d.device)
        trainer.raw.eval()
        for batch in batches(self.data, 0, stop):
            batch = to_device(batch, d.device)
            with trainer.amp():
                mlm, nsp = trainer.raw(*model_inputs(batch), batch["mlm_positions"])
            labels = batch["mlm_labels"], batch["nsp_labels"]
            sums += pretraining_loss(mlm, nsp, *labels, reduction="sum")[1]  # nsp None: MLM only
        trainer.raw.train()
        if d.world > 1:
            dist.all_reduce(sums)
        return self._record(sums.tolist())

    def _record(self, sums: list[float]) -> dict:
        mlm_sum, nsp_sum, mlm_ok, mlm_n, nsp_ok, nsp_n = sums
        mlm_loss, nsp_loss = mlm_sum / mlm_n, nsp_sum / nsp_n
        nsp = self.trainer.model_cfg.next_sentence
        return {
            "loss": mlm_loss + nsp_loss,
            "mlm_loss": mlm_loss,
            "nsp_loss": nsp_loss,
            "mlm_acc": mlm_ok / mlm_n,
            "nsp_acc": nsp_ok / nsp_n if nsp else None,  # None: masked-LM only
            "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
            "sequences": int(nsp_n),
            "held_out": self.rows(),
        }

    def rows(self) -> list[str]:
        """The held-out rows, `shards/NAME.arrow[start:stop]` for each part."""
        paths = [s.path for s in self.shards.manifest.shards]
        return [f"{paths[i]}[{a}:{b}]" for i, a, b in self.held]


def shown(result: dict) -> str:
    """An evaluation's figures as the run prints them: `loss 7.1234 mlm_loss ... sequences 80`
    (an MLM-only run's NSP figures left out)."""
    hidden = {"held_out"} | ({"nsp_loss"} if result["nsp_acc"] is None else set())
    return " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in result.items()
        if k not in hidden and v is not None
    )
