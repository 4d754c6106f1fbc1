"""The training machinery that pre-training and fine-tuning share: where a process runs (its
device and rank in a `torchrun` world), the optimizer and its schedule, one optimizer step with
bf16 or fp16 autocast (fp16 with loss scaling) and gradient accumulation, and pre-training's
model and step (`Trainer`); what a run records as it goes is `model.run_log`'s."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from model.bert import BertForPreTraining, pretraining_loss
from model.config import BertConfig, TrainConfig, flag_hint
from model.lamb import Lamb


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def resolve_device(device: str, local_rank: int | None = None) -> torch.device:
    """`cpu`, `cuda` or `cuda:N` (under torchrun: this rank's GPU), refusing a missing GPU."""
    if device == "cpu":
        return torch.device("cpu")
    if not device.startswith("cuda"):
        raise ValueError(f"unknown --device {device!r}: use {flag_hint('--device', 'cpu')} or cuda")
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: torch sees no CUDA device (this torch build: "
            f"{torch.__version__}); use {flag_hint('--device', 'cpu')}, or install the CUDA build "
            "of torch"
        )
    index = local_rank if local_rank is not None else (torch.device(device).index or 0)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_distributed(device: str) -> Dist:
    """This process's rank and device; joins the process group when started by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local if world > 1 else None)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return Dist(rank, world, dev)


# What a collective says on one rank when another rank's process has ended (gloo's TCP pair,
# NCCL's watchdog): that rank's own failure is the one to read.
PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote process exited",
)


def peer_gone(error: BaseException) -> bool:
    """Whether `error`, raised on a rank of several, is a collective broken by another rank's
    end (which says why in its own line), not a failure of this rank's."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and any(s in str(error) for s in PEER_GONE)


def micro_batch_size(batch_size: int, world: int, accum: int) -> int:
    """Sequences per rank per micro-batch; refuses a batch that does not split evenly."""
    parts = world * accum
    if batch_size % parts:
        below = batch_size // parts * parts  # the multiples either side, nearest the one asked
        nearest = below if below and batch_size - below <= below + parts - batch_size else None
        nearest = nearest or below + parts
        raise ValueError(
            f"--batch-size {batch_size} does not divide by the world size {world} x --accum "
            f"{accum} = {parts}; choose a multiple of {parts}, e.g. "
            f"{flag_hint('--batch-size', str(nearest))}"
        )
    return batch_size // parts


@dataclass(frozen=True)
class WarmupLinear:
    """Learning-rate factor: linear warm-up to 1 over `warmup` steps, then linear decay to 0."""

    warmup: int
    total: int

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


@dataclass(frozen=True)
class WarmupCosine:
    """Learning-rate factor: linear warm-up to 1 over `warmup` steps, then half a cosine down
    to 0 at `total`."""

    warmup: int
    total: int

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        done = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return 0.5 * (1.0 + math.cos(math.pi * done))


SCHEDULES = {"linear": WarmupLinear, "cosine": WarmupCosine}


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's parameter groups: biases and LayerNorm weights (every 1-d parameter) get no
    weight decay, the rest `weight_decay`."""
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def adamw(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    fused: bool | None = None,
) -> torch.optim.AdamW:
    """AdamW over `param_groups` (`fused=None`: torch's default implementation; pre-training
    asks for the fused kernel on every device, so that the CPU runs, and tests, the GPU's
    optimizer path)."""
    groups = param_groups(model, weight_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def warmup_linear(
    optimizer: torch.optim.Optimizer, warmup: int, total: int, kind: str = "linear"
) -> LambdaLR:
    """The schedule: `WarmupLinear` (or another of `SCHEDULES`) over `total` steps."""
    return LambdaLR(optimizer, SCHEDULES[kind](warmup, total))


def amp_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast type of `--precision` on `device` (None: fp32, no autocast). `auto` is fp32
    on a CPU, bf16 on a GPU that has it (Ampere and later) and fp16 on one that has not (V100,
    T4), where bf16 would run emulated, if at all."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[precision]


def precision_name(dtype: torch.dtype | None) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}[dtype]


# (model, batch) -> (the loss to minimise, detached figures summed over the micro-batches)
LossOf = Callable[[torch.nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]


# torch's warning when the schedule steps before the optimizer ever has (fp16's first step,
# skipped because its gradients overflowed at the first loss scale)
SKIPPED_FIRST_STEP = "Detected call of `lr_scheduler.step"


class Stepper:
    """A model, its optimizer and schedule, and one optimizer step over micro-batches: the
    forward pass and loss under autocast to `dtype` (bf16 or fp16; None: fp32), gradients
    averaged over the micro-batches (under DDP synchronised on the last one only), clipped to
    norm `clip` (0: not clipped), then the optimizer and schedule step. Pre-training and
    fine-tuning both step so.

    In fp16 the loss is scaled before the backward pass (torch's `GradScaler`: 2^16 at first),
    so that small gradients do not flush to zero; the gradients are unscaled before clipping,
    and a step whose gradients overflowed is skipped and the scale halved (doubled again after
    2,000 steps without overflow). The schedule steps either way: a skipped step counts."""

    def __init__(
        self,
        raw: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: LambdaLR,
        loss_of: LossOf,
        device: torch.device,
        *,
        dtype: torch.dtype | None,
        clip: float,
        ddp: DistributedDataParallel | None = None,
        model: torch.nn.Module | None = None,  # what the forward pass calls (default: ddp or raw)
    ):
        self.raw, self.optimizer, self.scheduler, self.loss_of = raw, optimizer, scheduler, loss_of
        self.device, self.dtype, self.clip, self.ddp = device, dtype, clip, ddp
        self.autocast = dtype is not None
        fp16 = dtype == torch.float16
        self.scaler = torch.amp.GradScaler(device.type) if fp16 else None
        # Never `model or ddp or raw`: a module's truth value calls len(), which a compiled
        # module does not support.
        self.model = next(m for m in (model, ddp, raw) if m is not None)

    def amp(self):
        if not self.autocast:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def step(self, micro_batches: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        """One optimizer step; returns `loss_of`'s figures summed over the micro-batches (on the
        device, no sync)."""
        stats, scaled = None, self.scaler.scale if self.scaler else (lambda t: t)
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            with nullcontext() if last or self.ddp is None else self.ddp.no_sync():
                with self.amp():
                    loss, s = self.loss_of(self.model, batch)
                scaled(loss / len(micro_batches)).backward()
            stats = s if stats is None else stats + s
        if self.scaler:
            self.scaler.unscale_(self.optimizer)  # the clip's norm is the true gradients'
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.raw.parameters(), self.clip)
        if self.scaler:
            self.scaler.step(self.optimizer)  # skipped when a gradient overflowed
            self.scaler.update()
            with warnings.catch_warnings():  # a skipped first step: the schedule steps anyway
                warnings.filterwarnings("ignore", SKIPPED_FIRST_STEP, UserWarning)
                self.scheduler.step()
        else:
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return stats

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]


@dataclass(frozen=True)
class PretrainingModel:
    """Pre-training's model: the module itself (`raw`: its weights, what a checkpoint
    holds), its DDP wrapper when the world has more than one rank, and what the forward pass
    calls (`forward`: DDP or raw, compiled with --compile)."""

    raw: BertForPreTraining
    ddp: DistributedDataParallel | None
    forward: torch.nn.Module


def build_model(cfg: TrainConfig, model_cfg: BertConfig, d: Dist) -> PretrainingModel:
    """The model initialised from `cfg.seed` on this rank's device, its layers recomputed in the
    backward pass with --checkpoint-activations, under DDP and torch.compile (dynamic shapes: one
    graph for every batch length) as configured; torch's generator seeded per rank for
    dropout."""
    torch.manual_seed(cfg.seed + d.rank)  # dropout draws from torch's generator
    init = torch.Generator().manual_seed(cfg.seed)
    raw = BertForPreTraining(model_cfg, generator=init).to(d.device)
    raw.bert.checkpoint_layers = cfg.checkpoint_activations
    ids = [d.device.index] if d.device.type == "cuda" else None
    ddp = DistributedDataParallel(raw, device_ids=ids) if d.world > 1 else None
    model = raw if ddp is None else ddp
    return PretrainingModel(raw, ddp, compiled(model) if cfg.compile else model)


def compiled(model: torch.nn.Module, backend: str = "inductor") -> torch.nn.Module:
    """`model` under torch.compile with dynamic shapes: one graph for every batch length.

    The model's floats (LayerNorm's eps, dropout's p) are constants, and dynamo is told so
    (a setting of this process's dynamo, for every graph it compiles after):
    traced as symbols, they make inductor specialize them after the fact and restart the
    whole analysis, a second trace and lowering of the graph (docs/benchmarks.md, "Model")."""
    import torch._dynamo.config

    torch._dynamo.config.specialize_float = True
    return torch.compile(model, dynamic=True, backend=backend)


class Trainer(Stepper):
    """Pre-training's step on a `PretrainingModel`, with its optimizer (AdamW, fused, or LAMB)
    and schedule; `step` returns summed [mlm_loss, nsp_loss, mlm_correct, mlm_count,
    nsp_correct, rows]."""

    def __init__(self, cfg: TrainConfig, d: Dist, model: PretrainingModel):
        self.cfg, self.model_cfg, self.d = cfg, model.raw.cfg, d
        if cfg.optimizer == "lamb":  # biases and LayerNorm weights out of layer adaptation
            decayed, plain = param_groups(model.raw, cfg.weight_decay)
            groups = [decayed, {**plain, "adapt": False}]
            optimizer = Lamb(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)
        else:
            optimizer = adamw(model.raw, cfg.lr, cfg.weight_decay, cfg.betas, cfg.eps, fused=True)
        scheduler = warmup_linear(optimizer, cfg.warmup, cfg.steps, cfg.schedule)
        super().__init__(
            model.raw,
            optimizer,
            scheduler,
            pretraining_step_loss,
            d.device,
            dtype=amp_dtype(cfg.precision, d.device),
            clip=cfg.clip,
            ddp=model.ddp,
            model=model.forward,
        )


def pretraining_step_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]):
    """MLM + NSP loss of a batch and its figures (`pretraining_loss`)."""
    mlm, nsp = model(*model_inputs(batch), batch["mlm_positions"], **packed_inputs(batch))
    return pretraining_loss(mlm, nsp, batch["mlm_labels"], batch["nsp_labels"])


def model_inputs(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The encoder's positional inputs: token ids, segment ids, attention mask."""
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


PACKED_INPUTS = ("position_ids", "row_ids", "cls_positions")


def packed_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A packed batch's own inputs (`model.packing.pack`), none for a padded one."""
    return {k: batch[k] for k in PACKED_INPUTS if k in batch}


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
