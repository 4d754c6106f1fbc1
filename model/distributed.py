"""Where this process runs: its device, its rank in a `torchrun` world, its share of a batch."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from model.config import flag_hint


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
