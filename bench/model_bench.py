"""Model figures: the training step against transformers, the shard loader.

- CPU training step (forward, backward, AdamW) of our BERT and of
  `transformers.BertForPreTraining` with the same size, the same batch (taken from the loader:
  padded to its longest row, 15% of the tokens masked) and fp32; median of interleaved steps.
  Ours evaluates the MLM decoder at the masked positions only; transformers at every position.
- Loader throughput, sequences/s in one process, on a synthetic shard set of realistic size
  (`schemas.synthetic`: seq 128, 30,522 pieces, a build's statistics): static masks, dynamic
  re-masking, and whole-word re-masking. The target is >= 50,000 sequences/s.
- Packing (`--pack`), on shards the pipeline builds from real prose (a part of the kernel-docs
  corpus and gensim's Wikipedia sample, both from `make corpora`, else the bundled sample) at
  seq 128 and 512: the share of computed
  tokens that are padding, padded (batch 32, to a multiple of 8) and packed; rows per packed
  sequence (the batch-size rule); real (non-pad) tokens per CPU-second of the mini preset's
  training step at seq 512, packed against padded (one thread, the same batch of sequences);
  and the packed loader's rate on the synthetic set.
- On a CUDA machine only: base at seq 128 in bf16, sequences/s, tokens/s and MFU
  (`bench.gpu_bench`'s base-128 case, on the loader's synthetic shards).

    python -m bench.model_bench [--preset mini] [--batch 32] [--steps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
import time

import torch

from bench.gpu_bench import gpu_case
from bench.rows import rows_for
from model.batches import batches
from model.bert import BertForPreTraining, pretraining_loss
from model.config import preset
from model.data import LoaderConfig, PretrainingData, open_shards
from model.pretrain import model_config
from model.training import adamw, packed_inputs
from schemas.synthetic import SyntheticConfig, write_synthetic_set

VOCAB_SIZE = 30522


_row = rows_for("model")


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
            **packed_inputs(batch),
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
    return step_rows(name, t["ours"], t["transformers"], note)


# The two steps do not do the same work: say so beside every figure that sets them side by side.
DIFFERENT_WORK = (
    "not the same work: ours computes the MLM head (its vocab-wide decoder included) at the "
    "masked positions only, transformers' BertForPreTraining at every position"
)


def step_rows(name: str, ours_s: float, theirs_s: float, note: str) -> list[dict]:
    """The training step's rows from the median seconds of ours and of transformers'."""
    return [
        _row(f"train step {name} ours (CPU)", round(ours_s * 1e3, 1), "ms", note),
        _row(f"train step {name} transformers (CPU)", round(theirs_s * 1e3, 1), "ms", note),
        _row(
            f"train step {name} speed-up over transformers",
            round(theirs_s / ours_s, 2),
            "x",
            f"transformers time / ours, same batch and run; {DIFFERENT_WORK}; >= 1 means ours "
            "is not slower at its own work",
        ),
    ]


def _loader_rate(shards: str, batch_size: int, remask: bool, n: int, pack: bool = False) -> float:
    """Rows per second (packed: the rows inside the packed sequences)."""
    cfg = LoaderConfig(batch_size=batch_size, remask=remask, pack=pack)
    data = PretrainingData(open_shards(shards), [0, 1, 2, 3], cfg)
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
    packed = f"{note.replace(f'batch {batch}', f'batch {batch // 2} packed sequences')}"
    for metric, remask in (("loader packed", False), ("loader packed, re-masking", True)):
        rate = max(_loader_rate(directory, batch // 2, remask, n, pack=True) for _ in range(2))
        out.append(_row(metric, round(rate), "rows/s", f"{packed}; target >= 50,000"))
    return out


SAMPLE_INPUT = "books:sample/books,text:sample/text"


WIKI_SAMPLE = "gensim/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def real_inputs() -> list[tuple[str, str]]:
    """(pipeline input, name) of the real prose at hand: one 4 MB part of the kernel-docs text
    and gensim's shortened English Wikipedia dump (both fetched by `make corpora`), else the
    bundled sample."""
    data = os.environ.get("DATA", "data")
    candidates = (
        ("text", f"{data}/corpora/kernel-docs/text/part-00000.txt", "kernel-docs part-00000"),
        ("wikipedia", f"{data}/{WIKI_SAMPLE}", "Wikipedia (gensim's enwiki sample)"),
    )
    found = [(f"{kind}:{path}", name) for kind, path, name in candidates if os.path.exists(path)]
    return found or [(SAMPLE_INPUT, "sample/")]


def real_shards(directory: str, seq: int, inputs: str, name: str) -> str:
    """Shards the pipeline builds from `inputs` at `seq` (dupe factor 1, 4 shards)."""
    from pipeline.shell.cli import main as build

    out = os.path.join(directory, f"real-{seq}-{name.split()[0].lower()}")
    args = ["build", "--input", inputs, "--out", out, "--workers", "1", "--num-shards", "4"]
    args += ["--max-seq-length", str(seq), "--dupe-factor", "1"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if build(args) != 0:
            raise RuntimeError(f"building shards from {inputs} failed")
    return out


def padding_share(data: PretrainingData) -> float:
    """Padding's share of the tokens an epoch of batches computes."""
    real = total = 0
    for p in range(data.batches_per_epoch):
        b = data.batch(p)
        real += int(b["attention_mask"].sum())
        total += b["input_ids"].numel()
    return 1 - real / total


def bench_packing_shares(shards: str, seq: int, what: str) -> list[dict]:
    s = open_shards(shards)
    parts = list(range(len(s)))
    padded = PretrainingData(s, parts, LoaderConfig(batch_size=32))
    packed = PretrainingData(s, parts, LoaderConfig(batch_size=16, pack=True))
    note = f"{what}, seq {seq}, {padded.total_rows} rows, one epoch"
    rule = (
        f"{note}: a packed batch of B sequences holds B x this many rows; B = unpacked batch / "
        "this keeps the rows (and tokens) per step"
    )
    return [
        _row(
            f"padding share seq {seq} padded",
            round(padding_share(padded), 4),
            "fraction",
            f"{note}, batch 32 padded to its longest row (multiple of 8)",
        ),
        _row(
            f"padding share seq {seq} packed",
            round(padding_share(packed), 4),
            "fraction",
            f"{note}, --pack; target <= 0.02",
        ),
        _row(f"rows per packed sequence seq {seq}", round(packed.rows_per_unit, 3), "rows", rule),
    ]


def _cpu_seconds(steps: dict[str, list], rounds: int) -> dict[str, float]:
    """CPU-seconds of each list of functions, the lists' i-th calls side by side (one thread:
    CPU time is the step's own work, whatever else the machine runs)."""
    used = dict.fromkeys(steps, 0.0)
    for fns in steps.values():
        fns[0]()  # warm-up
    for _ in range(rounds):
        for i in range(min(len(fns) for fns in steps.values())):
            for name, fns in steps.items():
                t = time.process_time()
                fns[i]()
                used[name] += time.process_time() - t
    return used


def bench_packed_step(shards: str, what: str, name: str = "mini", b: int = 8) -> list[dict]:
    """Real tokens per CPU-second of the training step, packed against padded, at seq 512."""
    s = open_shards(shards)
    parts = list(range(len(s)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        steps, real = {}, {}
        for mode, pack in (("padded", False), ("packed", True)):
            torch.manual_seed(0)
            data = PretrainingData(s, parts, LoaderConfig(batch_size=b, pack=pack))
            model = BertForPreTraining(model_config(name, s), torch.Generator().manual_seed(0))
            opt = adamw(model, 1e-4, 0.01, fused=True)
            chosen = [data.batch(p) for p in range(6)]
            steps[mode] = [_ours_step(model, opt, batch) for batch in chosen]
            real[mode] = sum(int(x["attention_mask"].sum()) for x in chosen)
        rounds = 1
        used = _cpu_seconds(steps, rounds)
    finally:
        torch.set_num_threads(threads)
    rate = {m: rounds * real[m] / used[m] for m in steps}
    note = f"{what}, {name} preset, seq 512, batches of {b} sequences x 6, fp32, 1 thread"
    return [
        _row("real tokens/CPU-s seq 512 padded", round(rate["padded"]), "tokens/CPU-s", note),
        _row("real tokens/CPU-s seq 512 packed", round(rate["packed"]), "tokens/CPU-s", note),
        _row(
            "packed over padded, real tokens/CPU-s",
            round(rate["packed"] / rate["padded"], 3),
            "x",
            f"{note}; target >= 1.25",
        ),
    ]


def bench_packing(tmp: str) -> list[dict]:
    """Padding shares on every real corpus at hand; the step rate on the first one, at 512."""
    out, step = [], None
    for inputs, what in real_inputs():
        for seq in (128, 512):
            shards = real_shards(tmp, seq, inputs, what)
            out += bench_packing_shares(shards, seq, what)
            if seq == 512 and step is None:
                step = bench_packed_step(shards, what)
    return out + step


def bench_gpu(shards: str) -> list[dict]:
    """base at seq 128 in bf16 on CUDA: `bench.gpu_bench`'s base-128 case (the package's
    Trainer) on the loader's synthetic shards; sequences/s, tokens/s, MFU (by
    `model.bert.training_flops`). No rows without CUDA."""
    r = gpu_case("base-128", shards)
    if r is None:
        return []
    note = f"{r['device']}, base, batch {r['batch']} x {r['seq']}, bf16 autocast, bench.gpu_bench"
    rows = [
        _row("GPU base seq/s", round(r["seq_per_s"], 1), "seq/s", note),
        _row("GPU base tokens/s", round(r["tokens_per_s"]), "tokens/s", note),
    ]
    if r["mfu_model_formula"] is not None:
        rows.append(_row("GPU base MFU", round(r["mfu_model_formula"], 3), "fraction", note))
    return rows


def run(
    preset_name: str = "mini", batch: int = 32, repeats: int = 3, rows: int = 100_000
) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        shards = synthetic_shards(f"{tmp}/static", rows)
        wwm = synthetic_shards(f"{tmp}/wwm", rows, whole_word=True)
        out = bench_loader(shards, wwm, rows)
        out += bench_packing(tmp)
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
