"""The pre-training optimizer (AdamW, no decay on 1-d parameters) and its learning-rate schedule."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.config import TrainConfig


@dataclass(frozen=True)
class WarmupLinear:
    """Learning-rate factor: linear warm-up to 1 over `warmup` steps, then linear decay to 0."""

    warmup: int
    total: int

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device):
    """AdamW; biases and LayerNorm weights (every 1-d parameter) get no weight decay."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)
