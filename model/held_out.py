"""Pre-training's held-out evaluation: which rows are held out of training, and MLM and NSP loss
and accuracy on them, at the end of a run (eval.json), every `--eval-every` steps on the way
(metrics.jsonl's `held_out` figures), and of any checkpoint by `bert-model evaluate`.

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
from model.bert import BertForPreTraining, pretraining_loss
from model.data import LoaderConfig, Part, PretrainingData, whole_shards
from model.training import Dist, model_inputs, to_device
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
    """The held-out rows of a set, read in their manifest order (never shuffled) in
    micro-batches of `micro` rows, this rank's slice of each global batch (`d`)."""

    def __init__(self, shards: ShardSet, held: list[Part], micro: int, d: Dist, seed: int = 0):
        self.shards, self.held, self.d = shards, held, d
        self.data = None
        if sum(stop - start for _, start, stop in held):
            lc = LoaderConfig(micro, seed, d.rank, d.world, shuffle=False, drop_last=False)
            self.data = PretrainingData(shards, held, lc)

    @property
    def batches(self) -> int:
        """Micro-batches per rank that hold every held-out row."""
        return self.data.batches_per_epoch if self.data else 0

    @torch.no_grad()
    def evaluate(self, model: BertForPreTraining, amp, most: int) -> dict | None:
        """MLM and NSP loss and accuracy of `model` on at most `most` micro-batches per rank
        (None: no row held out), under the autocast `amp()` gives, summed over every rank;
        the model is left in the mode it was in."""
        if self.data is None:
            return None
        device, training = self.d.device, model.training
        sums = torch.zeros(6, dtype=torch.float64, device=device)
        model.eval()
        for batch in batches(self.data, 0, min(self.batches, most)):
            batch = to_device(batch, device)
            with amp():
                mlm, nsp = model(*model_inputs(batch), batch["mlm_positions"])
            labels = batch["mlm_labels"], batch["nsp_labels"]
            sums += pretraining_loss(mlm, nsp, *labels, reduction="sum")[1]  # nsp None: MLM only
        model.train(training)
        if self.d.world > 1:
            dist.all_reduce(sums)
        return self._record(sums.tolist(), model.cfg.next_sentence)

    def _record(self, sums: list[float], nsp: bool) -> dict:
        mlm_sum, nsp_sum, mlm_ok, mlm_n, nsp_ok, nsp_n = sums
        mlm_loss, nsp_loss = mlm_sum / mlm_n, nsp_sum / nsp_n
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
