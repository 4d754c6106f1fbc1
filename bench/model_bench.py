"""Model figures: the training step against transformers, the shard loader.

- CPU training step (forward, backward, AdamW) of our BERT and of
  `transformers.BertForPreTraining` with the same size, the same batch (taken from the loader:
  padded to its longest row, 15% of the tokens masked) and fp32; median of interleaved steps.
  Ours evaluates the MLM decoder at the masked positions only; transformers at every position.
- Loader throughput, sequences/s in one process, on a synthetic shard set of realistic size
  (`schemas.synthetic`: seq 128, 30,522 pieces, a build's statistics): static masks, dynamic
  re-masking, and whole-word re-masking. The target is >= 50,000 sequences/s.
- On a CUDA machine only: base at seq 128 in bf16, sequences/s, tokens/s and MFU.

    python -m bench.model_bench [--preset mini] [--batch 32] [--steps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from model.bert import BertForPreTraining, pretraining_loss, training_flops
from model.config import preset
from model.data import LoaderConfig, PretrainingData, batches, open_shards
from model.training import PEAK_BF16_TFLOPS
from schemas.synthetic import SyntheticConfig, write_synthetic_set

VOCAB_SIZE = 30522


def _row(metric: str, value: float, unit: str, note: str) -> dict:
    return {"area": "model", "metric": metric, "value": value, "unit": unit, "note": note}


def synthetic_shards(directory: str, rows: int, whole_word: bool = False) -> str:
    cfg = SyntheticConfig(
        rows=rows, shards=4, vocab_size=VOCAB_SIZE, whole_word_mask=whole_word, seed=1
    )
    write_synthetic_set(directory, cfg)
    return directory


def _ours_step(model, optimizer, batch: dict):
    def step() -> None:
        mlm, nsp = model(
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            batch["mlm_positions"],
        )
        loss, _ = pretraining_loss(mlm, nsp, batch["mlm_labels"], batch["nsp_labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _hf_step(model, optimizer, batch: dict):
    labels = torch.full_like(batch["input_ids"], -100)
    labels.view(-1)[batch["mlm_positions"]] = batch["mlm_labels"]

    def step() -> None:
        out = model(
            input_ids=batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=labels,
            next_sentence_label=batch["nsp_labels"],
        )
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _hf_model(name: str):
    import transformers

    cfg = preset(name, VOCAB_SIZE)
    hf_cfg = transformers.BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        attn_implementation="sdpa",
    )
    return transformers.BertForPreTraining(hf_cfg)


def _interleaved(steps: dict, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per step of each function, run in turn so that load hits all alike."""
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for name, fn in steps.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_training_step(shards: str, name: str, batch_size: int, repeats: int) -> list[dict]:
    torch.manual_seed(0)
    data = PretrainingData(open_shards(shards), [0], LoaderConfig(batch_size=batch_size))
    batch = data.batch(0)
    ours = BertForPreTraining(preset(name, VOCAB_SIZE), torch.Generator().manual_seed(0))
    theirs = _hf_model(name)
    steps = {
        "ours": _ours_step(ours, torch.optim.AdamW(ours.parameters(), lr=1e-4), batch),
        "transformers": _hf_step(theirs, torch.optim.AdamW(theirs.parameters(), lr=1e-4), batch),
    }
    t = _interleaved(steps, repeats)
    shape = tuple(batch["input_ids"].shape)
    note = (
        f"{name} preset, batch {shape[0]} x {shape[1]} (padded), "
        f"{len(batch['mlm_labels'])} masked, fp32, {torch.get_num_threads()} threads, "
        f"median of {repeats}"
    )
    return [
        _row(f"train step {name} ours (CPU)", round(t["ours"] * 1e3, 1), "ms", note),
        _row(
            f"train step {name} transformers (CPU)", round(t["transformers"] * 1e3, 1), "ms", note
        ),
        _row(
            f"train step {name} speed-up over transformers",
            round(t["transformers"] / t["ours"], 2),
            "x",
            "transformers time / ours; >= 1 means ours is not slower",
        ),
    ]


def _loader_rate(shards: str, batch_size: int, remask: bool, n: int) -> float:
    data = PretrainingData(
        open_shards(shards), [0, 1, 2, 3], LoaderConfig(batch_size=batch_size, remask=remask)
    )
    stream = batches(data, 0, n + 2)
    next(stream), next(stream)  # open the first window's shards
    t = time.perf_counter()
    count = sum(len(b["nsp_labels"]) for b in stream)
    return count / (time.perf_counter() - t)


def bench_loader(directory: str, wwm_directory: str, rows: int) -> list[dict]:
    batch, n = 256, min(400, rows // 256 - 4)
    note = f"{rows} rows in 4 shards, seq 128, vocab {VOCAB_SIZE}, batch {batch}, one process"
    cases = [
        ("loader static masks", directory, False),
        ("loader dynamic re-masking", directory, True),
        ("loader whole-word re-masking", wwm_directory, True),
    ]
    out = []
    for metric, shards, remask in cases:
        rate = max(_loader_rate(shards, batch, remask, n) for _ in range(2))
        out.append(_row(metric, round(rate), "seq/s", f"{note}; target >= 50,000"))
    return out


def bench_gpu(shards: str, batch_size: int = 128, steps: int = 20) -> list[dict]:
    """base, seq 128, bf16 autocast, fused AdamW: sequences/s, tokens/s, MFU (CUDA only)."""
    if not torch.cuda.is_available():
        return []
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = preset("base", VOCAB_SIZE)
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(0)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    data = PretrainingData(open_shards(shards), [0], LoaderConfig(batch_size=batch_size))
    batch = {k: v.to(dev) for k, v in data.batch(0).items()}
    step = _ours_step(model, opt, batch)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / steps
    ids = batch["input_ids"]
    flops = training_flops(cfg, ids.numel(), ids.size(1), len(batch["mlm_labels"]))
    name = torch.cuda.get_device_name(dev)
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), 0.0)
    note = f"{name}, base, batch {batch_size} x {ids.size(1)}, bf16 autocast"
    rows = [
        _row("GPU base seq/s", round(batch_size / dt, 1), "seq/s", note),
        _row("GPU base tokens/s", round(ids.numel() / dt), "tokens/s", note),
    ]
    if peak:
        rows.append(_row("GPU base MFU", round(flops / dt / (peak * 1e12), 3), "fraction", note))
    return rows


def run(
    preset_name: str = "mini", batch: int = 32, repeats: int = 3, rows: int = 100_000
) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        shards = synthetic_shards(f"{tmp}/static", rows)
        wwm = synthetic_shards(f"{tmp}/wwm", rows, whole_word=True)
        out = bench_loader(shards, wwm, rows)
        out += bench_training_step(shards, preset_name, batch, repeats)
        out += bench_gpu(shards)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mini", help="model size for the step comparison")
    parser.add_argument("--batch", type=int, default=32, help="sequences per training step")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model")
    parser.add_argument("--rows", type=int, default=100_000, help="synthetic rows for the loader")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    rows = run(args.preset, args.batch, args.steps, args.rows)
    for r in rows:
        print(f"{r['metric']:<48} {r['value']:>12} {r['unit']:<9} {r['note']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
