"""Training metrics: sums over a logging interval reduced over ranks into one record (losses,
accuracies, throughput, MFU), and the terminal progress line printed from it."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from model.bert import training_flops
from model.config import TrainConfig
from model.trainer import Trainer

# Dense bf16 tensor-core peaks (TFLOP/s) for the MFU figure, by a substring of the GPU's name.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}


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
