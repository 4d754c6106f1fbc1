"""Pre-training throughput on a GPU (issue 14): bf16 sequences/s, tokens/s, MFU, peak memory and
the share of step time spent waiting for the loader, through the package's own training step.

Runs `model.training.Trainer` (the step `model.pretrain.pretrain` runs: autocast, fused AdamW,
clipping, schedule, `torch.compile` when asked) on batches from `model.data` over a synthetic
shard set made by `schemas.synthetic`. Each case runs `--warmup` steps, then `--steps` timed
steps. On CUDA the cases are base at seq 128 and 512 and large at seq 128, each without and with
`--compile`, and base at seq 128 and 512 packed (`--pack`, attention dropout 0 so that the
attention takes the block-skipping kernel), without and with `--compile`. Without CUDA it is a
CPU fallback: the tiny preset for a few fp32 steps, padded and packed, to check the script
itself; it reports no MFU.

FLOPs per step: 6 x N x tokens (N: parameters without the embedding tables) plus the attention
scores, 12 x layers x hidden x length per token; the padded tokens count, as the GPU computes
them (`mfu`). `mfu_real_tokens` counts real tokens only: 6 x N per real token plus the scores of
each row over its own length (12 x layers x hidden x length^2 per row), the work a padded or
packed batch has to do. The loader share is the host time spent in `next()` on the batch
stream over the timed wall time; the host runs ahead of the GPU, so it is an upper bound on GPU
idle time.

    PYTHONPATH=. python -m bench.gpu_bench --out DIR [--steps 30] [--warmup 10] [--only base-128]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from model.batches import batches
from model.bert import count_parameters, training_flops
from model.config import TrainConfig
from model.data import LoaderConfig, PretrainingData, open_shards
from model.held_out import split_holdout
from model.pretrain import model_config
from model.run_log import PEAK_BF16_TFLOPS
from model.training import (
    Dist,
    Trainer,
    build_model,
    precision_name,
    to_device,
)
from schemas.synthetic import SyntheticConfig, write_synthetic_set

RESULT_NAME = "gpu_bench.json"


@dataclass(frozen=True)
class Case:
    model: str
    seq: int
    batch: int  # sequences: padded rows, or packed sequences of `seq` tokens
    compile: bool
    pack: bool = False

    @property
    def name(self) -> str:
        packed = "-packed" if self.pack else ""
        return f"{self.model}-{self.seq}{packed}{'-compile' if self.compile else ''}"


# Per-GPU batches: the paper's 256 at seq 128; at seq 512 a quarter of that (same tokens).
GPU_CASES = [
    Case(m, s, b, c)
    for m, s, b in (("base", 128, 256), ("base", 512, 64), ("large", 128, 256))
    for c in (False, True)
] + [Case("base", s, b, c, pack=True) for s, b in ((128, 256), (512, 64)) for c in (False, True)]
CPU_CASES = [Case("tiny", 128, 8, False), Case("tiny", 128, 8, False, pack=True)]
# When not told: untimed steps first, timed steps, loader processes.
GPU_WARMUP, GPU_STEPS, GPU_WORKERS = 10, 30, 2
CPU_WARMUP, CPU_STEPS, CPU_WORKERS = 2, 3, 0


def peak_tflops(device: torch.device) -> tuple[str, float]:
    """The device's name and dense bf16 peak (TFLOP/s; 0 when unknown or on a CPU)."""
    if device.type != "cuda":
        return f"cpu ({platform.machine()})", 0.0
    name = torch.cuda.get_device_name(device)
    return name, next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), 0.0)


def flops_per_step(n_params: int, layers: int, hidden: int, tokens: int, length: int) -> float:
    """6 N per token for the weights plus the attention scores (12 x layers x hidden x length)."""
    return float(6 * n_params * tokens + 12 * layers * hidden * length * tokens)


def row_lengths(batch: dict) -> torch.Tensor:
    """The real length of every row of a batch, padded or packed."""
    if "row_ids" in batch:
        rows = batch["row_ids"].reshape(-1)
        return torch.bincount(rows[rows >= 0], minlength=len(batch["nsp_labels"]))
    return batch["attention_mask"].sum(1)


def real_flops_per_step(n_params: int, layers: int, hidden: int, batch: dict) -> float:
    """6 N per real token plus each row's attention scores over its own length."""
    lengths = row_lengths(batch).double()
    return float(6 * n_params * lengths.sum() + 12 * layers * hidden * (lengths**2).sum())


def make_shards(directory: str, seq: int, rows: int, vocab: int) -> str:
    cfg = SyntheticConfig(
        rows=rows,
        shards=4,
        max_seq_length=seq,
        max_predictions_per_seq=max(20, round(0.15 * seq)),
        vocab_size=vocab,
        seed=1,
    )
    write_synthetic_set(directory, cfg)
    return directory


def _compiled_graphs() -> int | None:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"].get("unique_graphs", 0))
    except Exception:
        return None


def _setup(
    case: Case, shards_dir: str, device: torch.device, warmup: int, steps: int, workers: int
) -> tuple[Trainer, Iterator[dict]]:
    """The package's Trainer for `case` and the stream of its batches from `shards_dir`."""
    cuda = device.type == "cuda"
    cfg = TrainConfig(
        shards=shards_dir,
        model=case.model,
        steps=warmup + steps,
        batch_size=case.batch,
        warmup=max(1, warmup),
        device=device.type,
        precision="bf16" if cuda else "fp32",
        compile=case.compile,
        workers=workers,
        holdout=0,
        pack=case.pack,
        attention_dropout=0.0 if case.pack else 0.1,
    )
    shards = open_shards(shards_dir)
    parts, _ = split_holdout(shards, 0)
    data = PretrainingData(shards, parts, LoaderConfig(case.batch, seed=0, pack=case.pack))
    if cuda:
        torch.cuda.empty_cache()
    if case.compile:
        torch._dynamo.reset()
    mcfg = model_config(case.model, shards, attention_dropout=cfg.attention_dropout)
    d = Dist(0, 1, device)
    trainer = Trainer(cfg, d, build_model(cfg, mcfg, d))
    return trainer, batches(data, 0, workers=workers, pin_memory=cuda)


def _one_step(trainer: Trainer, stream: Iterator[dict], device: torch.device) -> tuple[float, dict]:
    """One optimizer step; the seconds spent waiting for its batch, and the batch."""
    t0 = time.perf_counter()
    b = next(stream)
    waited = time.perf_counter() - t0
    trainer.step([to_device(b, device)])
    return waited, b


def _warm_up(trainer: Trainer, stream: Iterator[dict], device: torch.device, warmup: int) -> float:
    """`warmup` untimed steps (compilation, allocator, loader start-up); their seconds."""
    t = time.perf_counter()
    for _ in range(warmup):
        _one_step(trainer, stream, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    return time.perf_counter() - t


@dataclass
class Timed:
    """What the timed steps processed, and their wall seconds."""

    steps: int
    wall: float = 0.0
    seqs: int = 0  # sequences computed: padded rows or packed sequences
    rows: int = 0  # rows trained on (several per packed sequence)
    tokens: int = 0  # padded, as computed
    real_tokens: int = 0
    flops: float = 0.0  # by `flops_per_step`
    real_flops: float = 0.0  # real tokens only, each row's attention over its own length
    model_flops: float = 0.0  # by `model.bert.training_flops`
    waited: float = 0.0  # seconds in `next()` on the batch stream


def _timed_steps(
    trainer: Trainer, stream: Iterator[dict], device: torch.device, steps: int, n_params: int
) -> Timed:
    mcfg = trainer.model_cfg
    timed = Timed(steps)
    start = time.perf_counter()
    for _ in range(steps):
        w, b = _one_step(trainer, stream, device)
        ids = b["input_ids"]
        timed.waited += w
        timed.seqs += ids.size(0)
        timed.rows += len(b["nsp_labels"])
        timed.tokens += ids.numel()
        timed.real_tokens += int(b["attention_mask"].sum())
        timed.flops += flops_per_step(
            n_params, mcfg.num_layers, mcfg.hidden_size, ids.numel(), ids.size(1)
        )
        timed.real_flops += real_flops_per_step(n_params, mcfg.num_layers, mcfg.hidden_size, b)
        timed.model_flops += training_flops(mcfg, ids.numel(), ids.size(1), len(b["mlm_labels"]))
    if device.type == "cuda":
        torch.cuda.synchronize()
    timed.wall = max(time.perf_counter() - start, 1e-9)
    return timed


def run_case(
    case: Case, shards_dir: str, device: torch.device, warmup: int, steps: int, workers: int
) -> dict:
    """Warm up, then time `steps` optimizer steps of the package's Trainer on real batches."""
    trainer, stream = _setup(case, shards_dir, device, warmup, steps, workers)
    n_params = count_parameters(trainer.raw, embeddings=False)
    warmup_s = _warm_up(trainer, stream, device, warmup)
    graphs_after_warmup = _compiled_graphs() if case.compile else None
    timed = _timed_steps(trainer, stream, device, steps, n_params)
    graphs = _compiled_graphs() if case.compile else None
    row = {
        "case": case.name,
        "model": case.model,
        "seq": case.seq,
        "batch": case.batch,
        "compile": case.compile,
        "pack": case.pack,
        "rows_per_sequence": timed.rows / max(timed.seqs, 1),
        "precision": precision_name(trainer.dtype),
        "device": peak_tflops(device)[0],
        "parameters": count_parameters(trainer.raw),
        "non_embedding_parameters": n_params,
        "warmup_steps": warmup,
        "steps": steps,
        "warmup_s": round(warmup_s, 3),
        **_rates(timed, device),
        "compiled_graphs": graphs,
        "graphs_added_while_timed": (
            graphs - graphs_after_warmup
            if graphs is not None and graphs_after_warmup is not None
            else None
        ),
    }
    stream.close()  # drops the DataLoader and its workers before the next case
    return row


def _rates(timed: Timed, device: torch.device) -> dict:
    """A case's figures from its timed steps."""
    wall, peak = timed.wall, peak_tflops(device)[1]
    return {
        "step_ms": round(1e3 * wall / timed.steps, 3),
        "seq_per_s": timed.seqs / wall,
        "rows_per_s": timed.rows / wall,
        "tokens_per_s": timed.tokens / wall,  # padded tokens, as computed
        "real_tokens_per_s": timed.real_tokens / wall,
        "padding_share": 1 - timed.real_tokens / max(timed.tokens, 1),
        "tflops_per_s": timed.flops / wall / 1e12,
        "peak_tflops": peak or None,
        "mfu": timed.flops / wall / (peak * 1e12) if peak else None,
        "mfu_model_formula": timed.model_flops / wall / (peak * 1e12) if peak else None,
        "mfu_real_tokens": timed.real_flops / wall / (peak * 1e12) if peak else None,
        "real_tflops_per_s": timed.real_flops / wall / 1e12,
        "peak_mem_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
        "loader_wait_share": timed.waited / wall,
    }


def _percent(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def table(rows: list[dict]) -> str:
    head = (
        f"{'case':<26} {'prec':<5} {'batch':>5} {'step ms':>9} {'seq/s':>9} {'tok/s':>11} "
        f"{'real tok/s':>11} {'pad':>6} {'TFLOP/s':>8} {'MFU':>6} {'MFU real':>8} "
        f"{'mem GiB':>8} {'loader':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        mem = f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] is not None else "-"
        lines.append(
            f"{r['case']:<26} {r['precision']:<5} {r['batch']:>5} {r['step_ms']:>9.1f} "
            f"{r['seq_per_s']:>9.1f} {r['tokens_per_s']:>11.0f} "
            f"{r.get('real_tokens_per_s', 0):>11.0f} {_percent(r.get('padding_share')):>6} "
            f"{r['tflops_per_s']:>8.3f} {_percent(r['mfu']):>6} "
            f"{_percent(r.get('mfu_real_tokens')):>8} {mem:>8} "
            f"{100 * r['loader_wait_share']:>6.1f}%"
        )
    return "\n".join(lines)


def _cases(cuda: bool, only: list[str] | None) -> list[Case]:
    cases = GPU_CASES if cuda else CPU_CASES
    if only:
        cases = [c for c in cases if c.name in only]
        if not cases:
            raise SystemExit(f"--only {only}: no such case on {'cuda' if cuda else 'cpu'}")
    return cases


def cuda_device(force_cpu: bool = False) -> torch.device:
    """The GPU, with TF32 matmuls and convolutions allowed, else the CPU."""
    if force_cpu or not torch.cuda.is_available():
        return torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return torch.device("cuda")


def gpu_case(name: str, shards_dir: str) -> dict | None:
    """GPU case `name`'s record, as `run` writes it, on the shard set in `shards_dir` (of the
    case's sequence length), with the GPU's warm-up, steps and loader workers; None without
    CUDA."""
    device = cuda_device()
    if device.type != "cuda":
        return None
    (case,) = _cases(True, [name])
    return run_case(case, shards_dir, device, GPU_WARMUP, GPU_STEPS, GPU_WORKERS)


def _run_cases(
    cases: list[Case], device: torch.device, warmup: int, steps: int, workers: int, tmp: str
) -> list[dict]:
    """Each case's row (or its error), on synthetic shards made once per sequence length."""
    vocab = 30522 if device.type == "cuda" else 2000
    rows_needed = max(c.batch * (2 if c.pack else 1) for c in cases) * (steps + warmup)
    results, sets = [], {}
    for case in cases:
        if case.seq not in sets:
            t = time.perf_counter()
            sets[case.seq] = make_shards(
                os.path.join(tmp, f"seq{case.seq}"), case.seq, max(rows_needed, 400), vocab
            )
            print(f"synthetic shards, seq {case.seq}: {time.perf_counter() - t:.1f} s")
        try:
            row = run_case(case, sets[case.seq], device, warmup, steps, workers)
        except Exception as e:  # one failing case must not lose the others' figures
            row = {"case": case.name, "error": f"{type(e).__name__}: {e}"}
            print(f"{case.name}: FAILED {row['error']}")
        else:
            print(
                f"{case.name}: {row['seq_per_s']:.1f} seq/s (warm-up {row['warmup_s']:.1f} s)",
                flush=True,
            )
        results.append(row)
    return results


def run(
    out: str,
    steps: int | None = None,
    warmup: int | None = None,
    only: list[str] | None = None,
    workers: int | None = None,
    force_cpu: bool = False,
) -> dict:
    device = cuda_device(force_cpu)
    cuda = device.type == "cuda"
    cases = _cases(cuda, only)
    steps = steps if steps is not None else (GPU_STEPS if cuda else CPU_STEPS)
    warmup = warmup if warmup is not None else (GPU_WARMUP if cuda else CPU_WARMUP)
    workers = workers if workers is not None else (GPU_WORKERS if cuda else CPU_WORKERS)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = _run_cases(cases, device, warmup, steps, workers, tmp)
    name, peak = peak_tflops(device)
    report = {
        "cpu_fallback": not cuda,
        "device": name,
        "peak_bf16_tflops": peak or None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "steps": steps,
        "warmup": warmup,
        "workers": workers,
        "total_s": round(time.perf_counter() - started, 1),
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "results": results,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, RESULT_NAME), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help=f"directory for {RESULT_NAME}")
    for flag, what, gpu, cpu in (
        ("--steps", "timed steps per case", GPU_STEPS, CPU_STEPS),
        ("--warmup", "untimed steps first", GPU_WARMUP, CPU_WARMUP),
        ("--workers", "loader processes", GPU_WORKERS, CPU_WORKERS),
    ):
        parser.add_argument(flag, type=int, help=f"{what} ({gpu} on GPU, {cpu} on CPU)")
    parser.add_argument("--only", nargs="+", help="case names, e.g. base-128 base-128-compile")
    parser.add_argument("--cpu", action="store_true", help="the CPU fallback even with CUDA")
    args = parser.parse_args(argv)
    report = run(args.out, args.steps, args.warmup, args.only, args.workers, args.cpu)
    if report["cpu_fallback"]:
        print("CPU fallback (no CUDA): tiny preset, fp32, a few steps; no MFU; no GPU figures.")
    ok = [r for r in report["results"] if "error" not in r]
    print(
        f"{report['device']} | torch {report['torch']} | {report['steps']} timed steps after "
        f"{report['warmup']} warm-up | loader workers {report['workers']}"
    )
    print(table(ok))
    for r in report["results"]:
        if "error" in r:
            print(f"{r['case']}: FAILED {r['error']}")
    print(f"wrote {os.path.join(args.out, RESULT_NAME)} ({report['total_s']} s)")
    return 0 if len(ok) == len(report["results"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
