"""One pre-training optimizer step: the model (DDP-wrapped and compiled when asked), its
optimizer and schedule, bf16 autocast, gradient accumulation over micro-batches."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from model.bert import BertForPreTraining, pretraining_loss
from model.config import BertConfig, TrainConfig
from model.distributed import Dist
from model.optim import WarmupLinear, make_optimizer


class Trainer:
    """The model, its optimizer and schedule, and one optimizer step over micro-batches."""

    def __init__(self, cfg: TrainConfig, model_cfg: BertConfig, d: Dist):
        self.cfg, self.model_cfg, self.d = cfg, model_cfg, d
        torch.manual_seed(cfg.seed + d.rank)  # dropout draws from torch's generator
        init = torch.Generator().manual_seed(cfg.seed)
        self.raw = BertForPreTraining(model_cfg, generator=init).to(d.device)
        self.optimizer = make_optimizer(self.raw, cfg, d.device)
        self.scheduler = LambdaLR(self.optimizer, WarmupLinear(cfg.warmup, cfg.steps))
        ids = [d.device.index] if d.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(self.raw, device_ids=ids) if d.world > 1 else None
        model = self.ddp or self.raw
        self.model = torch.compile(model, dynamic=True) if cfg.compile else model
        bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and d.device.type == "cuda")
        self.autocast = bf16

    def amp(self):
        if not self.autocast:
            return nullcontext()
        return torch.autocast(device_type=self.d.device.type, dtype=torch.bfloat16)

    def step(self, micro_batches: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        """One optimizer step; returns summed [mlm_loss, nsp_loss, mlm_correct, mlm_count,
        nsp_correct, nsp_count] over the micro-batches (on the device, no sync)."""
        stats = torch.zeros(6, device=self.d.device)
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            with nullcontext() if last or self.ddp is None else self.ddp.no_sync():
                with self.amp():
                    mlm, nsp = self.model(*model_inputs(batch), batch["mlm_positions"])
                    loss, s = pretraining_loss(mlm, nsp, batch["mlm_labels"], batch["nsp_labels"])
                (loss / len(micro_batches)).backward()
            stats += s
        if self.cfg.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.raw.parameters(), self.cfg.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return stats

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]


def model_inputs(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The encoder's positional inputs: token ids, segment ids, attention mask."""
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
