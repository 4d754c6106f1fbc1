"""What a run records as it goes: the figures of a logging interval reduced over ranks into
one metrics record (`Meter`), the metrics file (`MetricsLog`, and TensorBoard's events beside it
with `--tensorboard`) and the progress line (`Progress`). Pre-training and fine-tuning share
them."""

from __future__ import annotations

import contextlib
import json
import time

import torch
import torch.distributed as dist

from model.bert import training_flops
from model.config import TrainConfig
from model.training import Trainer

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
                self.host[1] + len(b["nsp_labels"]),  # rows, packed or not
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
            "nsp_acc": nsp_ok / nsp_n if self.trainer.model_cfg.next_sentence else None,
            "lr": lr,
            "seq_per_s": seqs / elapsed,
            "tokens_per_s": tokens / elapsed,
        }
        if self.peak:
            record["mfu"] = flops / elapsed / (self.peak * self.trainer.d.world)
        if self.trainer.scaler:  # fp16: the loss scale after this step
            record["loss_scale"] = self.trainer.scaler.get_scale()
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


class MetricsLog:
    """A run's metrics.jsonl: one JSON record a line, each flushed as it is written (a killed
    run keeps what it logged). With no path (ranks other than 0) it writes nothing. A `board`
    (`model.board.Board`, `--tensorboard`) gets every record too."""

    def __init__(self, path: str | None, mode: str = "a", board=None):
        self.path, self.board = path, board
        self.file = open(path, mode, encoding="utf-8") if path else None

    def write(self, record: dict) -> None:
        if self.file:
            with self.named():
                self.file.write(json.dumps(record) + "\n")
                self.file.flush()
        if self.board:
            self.board.write(record)

    def close(self) -> None:
        if self.board:
            self.board.close()
        if self.file:
            with self.named():  # after a failed write, its buffer's flush fails the same way
                self.file.close()

    @contextlib.contextmanager
    def named(self):
        """A full disk's OSError, which the file object raises naming no file, naming it."""
        try:
            yield
        except OSError as e:
            raise OSError(e.errno, e.strerror, e.filename or self.path) from None


class Progress:
    """The terminal line of a long run, from its `first_step` (now) to `steps`: `NAME step
    i/n`, a bar, the caller's figures and the time left at the rate so far."""

    def __init__(self, steps: int, first_step: int = 0, name: str = ""):
        self.steps, self.first_step, self.name = steps, first_step, name
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def rate(self, step: int) -> float:
        """Steps per second since the first."""
        return (step - self.first_step) / max(self.elapsed(), 1e-9)

    def line(self, step: int, figures: str) -> str:
        filled = int(20 * step / self.steps)
        bar = f"[{'#' * filled}{'.' * (20 - filled)}]"
        rate = self.rate(step)
        left = int((self.steps - step) / rate) if rate > 0 else 0
        name = f"{self.name} " if self.name else ""
        at = f"{name}step {step:>{len(str(self.steps))}}/{self.steps}"
        return f"{at} {bar} {figures} eta {left // 60}:{left % 60:02d}"


def pretraining_figures(record: dict) -> str:
    """Pre-training's progress figures: losses, accuracies, learning rate, throughput."""
    mfu = f" mfu {100 * record['mfu']:.1f}%" if "mfu" in record else ""
    mfu += f" scale {record['loss_scale']:g}" if "loss_scale" in record else ""
    nsp = record["nsp_acc"] is not None
    nsp_loss = f" nsp {record['nsp_loss']:.4f}" if nsp else ""
    nsp_acc = f" nsp {record['nsp_acc']:.3f}" if nsp else ""
    return (
        f"loss {record['loss']:.4f} (mlm {record['mlm_loss']:.4f}{nsp_loss}) "
        f"acc mlm {record['mlm_acc']:.3f}{nsp_acc} lr {record['lr']:.2e} "
        f"{record['seq_per_s']:.0f} seq/s {record['tokens_per_s'] / 1e3:.1f}k tok/s{mfu}"
    )
