"""LAMB, the optimizer of BERT's large-batch pre-training (`--optimizer lamb`); torch ships
none, and the packages that did are CUDA-only (apex) or unkept."""

from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76
    minutes", algorithm 2), the optimizer of BERT's large-batch pre-training: Adam's moments
    with bias correction, the decoupled weight decay added to the update, and each tensor's
    update scaled by its trust ratio ||w|| / ||update|| (1 where either is 0). A group with
    `adapt` false (biases and LayerNorm weights, which get no weight decay either) takes the
    Adam update unscaled, as the reference implementation leaves them out of layer adaptation.
    Its state is Adam's (`exp_avg`, `exp_avg_sq`, `step`)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0, "adapt": True}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group)

    def _update(self, p: torch.Tensor, group: dict) -> None:
        (b1, b2), state = group["betas"], self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
        m.lerp_(p.grad, 1 - b1)
        v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        update = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt_().add_(group["eps"]))
        if group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
        if group["adapt"]:
            w, u = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
            update.mul_(torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w)))
        p.add_(update, alpha=-group["lr"])
