"""The training machinery that pre-training and fine-tuning share: where a process runs (its
device and rank in a `torchrun` world), the optimizer and its schedule, one optimizer step with
bf16 autocast and gradient accumulation, and the metrics records and progress line."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from model.bert import BertForPreTraining, pretraining_loss, training_flops
from model.config import BertConfig, TrainConfig, flag_hint

# Dense bf16 tensor-core peaks (TFLOP/s) for the MFU figure, by a substring of the GPU's name.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}


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


def micro_batch_size(batch_size: int, world: int, accum: int) -> int:
    """Sequences per rank per micro-batch; refuses a batch that does not split evenly."""
    parts = world * accum
    if batch_size % parts:
        raise ValueError(
            f"--batch-size {batch_size} does not divide by the world size {world} x --accum "
            f"{accum} = {parts}; choose a multiple of {parts}, e.g. "
            f"{flag_hint('--batch-size', str(parts))}"
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


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's parameter groups: biases and LayerNorm weights (every 1-d parameter) get no
    weight decay, the rest `weight_decay`."""
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device):
    """The pre-training AdamW (fused on a GPU)."""
    groups = param_groups(model, cfg.weight_decay)
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)


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


class Meter:
    """Sums over a logging interval; `flush` reduces them over ranks into one metrics record."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.peak = peak_flops(trainer.cfg, trainer.d.device)
        self.reset()

    def reset(self) -> None:
        self.stats = torch.zeros(6, device=self.trainer.d.device)
        self.host = [0.0, 0.0, 0.0, 0.0]  # micro-batches, sequences, real tokens, FLOPs
        self.clock = time.perf_counter()

    def add(self, stats: torch.Tensor, micro_batches: list[dict[str, torch.Tensor]]) -> None:
        self.stats += stats
        for b in micro_batches:
            ids = b["input_ids"]
            tokens = ids.numel()
            flops = training_flops(
                self.trainer.model_cfg, tokens, ids.size(1), len(b["mlm_labels"])
            )
            self.host = [
                self.host[0] + 1,
                self.host[1] + ids.size(0),
                self.host[2] + int(b["attention_mask"].sum()),
                self.host[3] + flops,
            ]

    def flush(self, step: int, lr: float, epoch: float) -> dict:
        host = torch.tensor(self.host, dtype=torch.float64, device=self.stats.device)
        sums = torch.cat([self.stats.double(), host])
        if self.trainer.d.world > 1:
            dist.all_reduce(sums)
        mlm_loss, nsp_loss, mlm_ok, mlm_n, nsp_ok, nsp_n, micro, seqs, tokens, flops = sums.tolist()
        elapsed = max(time.perf_counter() - self.clock, 1e-9)
        record = {
            "step": step,
            "epoch": round(epoch, 4),
            "loss": (mlm_loss + nsp_loss) / micro,
            "mlm_loss": mlm_loss / micro,
            "nsp_loss": nsp_loss / micro,
            "mlm_acc": mlm_ok / max(mlm_n, 1),
            "nsp_acc": nsp_ok / max(nsp_n, 1),
            "lr": lr,
            "seq_per_s": seqs / elapsed,
            "tokens_per_s": tokens / elapsed,
        }
        if self.peak:
            record["mfu"] = flops / elapsed / (self.peak * self.trainer.d.world)
        self.reset()
        return record


def peak_flops(cfg: TrainConfig, device: torch.device) -> float:
    """The device's bf16 peak in FLOP/s for MFU: --peak-tflops, else looked up by GPU name;
    0 (no MFU figure) on a CPU or an unknown GPU."""
    if device.type != "cuda":
        return 0.0
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12
    name = torch.cuda.get_device_name(device)
    return next((v * 1e12 for k, v in PEAK_BF16_TFLOPS.items() if k in name), 0.0)


def progress(step: int, steps: int, started: float, first_step: int = 0) -> tuple[str, float, str]:
    """The bar of a long run, its steps per second since `first_step` (at `started`) and the
    time left as m:ss at that rate."""
    filled = int(20 * step / steps)
    rate = (step - first_step) / max(time.perf_counter() - started, 1e-9)
    eta = int((steps - step) / rate) if rate > 0 else 0
    return f"[{'#' * filled}{'.' * (20 - filled)}]", rate, f"{eta // 60}:{eta % 60:02d}"


def progress_line(record: dict, steps: int, started: float, first_step: int) -> str:
    """One terminal line: bar, losses, accuracies, learning rate, throughput, ETA."""
    step = record["step"]
    bar, _, eta = progress(step, steps, started, first_step)
    mfu = f" mfu {100 * record['mfu']:.1f}%" if "mfu" in record else ""
    return (
        f"step {step:>{len(str(steps))}}/{steps} {bar} "
        f"loss {record['loss']:.4f} (mlm {record['mlm_loss']:.4f} nsp {record['nsp_loss']:.4f}) "
        f"acc mlm {record['mlm_acc']:.3f} nsp {record['nsp_acc']:.3f} lr {record['lr']:.2e} "
        f"{record['seq_per_s']:.0f} seq/s {record['tokens_per_s'] / 1e3:.1f}k tok/s{mfu} "
        f"eta {eta}"
    )
