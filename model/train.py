"""Pre-training: MLM + NSP on the shards, on a CPU or under `torchrun` on GPUs.

One process per device. Under `torchrun` each rank reads its slice of every global batch
(`model.data`), DDP averages the gradients, and rank 0 writes metrics and checkpoints. A
checkpoint holds everything the rest of the run depends on (weights, optimizer, schedule, every
rank's RNG, the loader's position), so `--resume` reproduces an uninterrupted run exactly, and a
run killed at any moment (SIGKILL included) continues from its last checkpoint.
"""

from __future__ import annotations

import glob
import json
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from model.bert import BertForPreTraining, count_parameters, pretraining_loss, training_flops
from model.config import BertConfig, TrainConfig, preset
from model.data import LoaderConfig, Part, PretrainingData, batches, open_shards, whole_shards
from schemas import ShardSet
from schemas.manifest import atomic_write_text

CHECKPOINT = "last.pt"
METRICS = "metrics.jsonl"
CHECKPOINT_FORMAT = 1
# Dense bf16 tensor-core peaks (TFLOP/s) for the MFU figure, by a substring of the GPU's name.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}
# Settings that fix the data order; a resumed run must keep them.
ORDER_KEYS = ("seed", "batch_size", "accum", "shuffle_window", "remask", "holdout")


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
        raise ValueError(f"unknown --device {device!r}: use cpu or cuda")
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: torch sees no CUDA device (this torch build: "
            f"{torch.__version__}); use --device cpu, or install the CUDA build of torch"
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
            f"{accum} = {parts}; choose a multiple of {parts}"
        )
    return batch_size // parts


def split_holdout(shards: ShardSet, holdout: int) -> tuple[list[Part], list[Part]]:
    """Train on all shards but the last `holdout` (manifest order), evaluated at the end. A set
    with too few shards holds out the last tenth of its last shard's rows instead."""
    n = len(shards)
    if holdout == 0:
        return whole_shards(shards, range(n)), []
    if n > holdout:
        return whole_shards(shards, range(n - holdout)), whole_shards(shards, range(n - holdout, n))
    rows = shards.manifest.shards[n - 1].rows
    held = max(1, rows // 10)
    print(
        f"note: {n} shard(s), too few to hold {holdout} out: evaluating on the last {held} rows "
        f"of {shards.manifest.shards[n - 1].path} instead (they may share documents with "
        "training rows; build more shards for a clean held-out set)"
    )
    train = whole_shards(shards, range(n - 1)) + [(n - 1, 0, rows - held)]
    return train, [(n - 1, rows - held, rows)]


def model_config(name: str, shards: ShardSet) -> BertConfig:
    """The preset sized to the shards: their vocab, their [PAD], their sequence length."""
    max_len = int(shards.config.get("max_seq_length", 512))
    pad = shards.vocab.special_ids.pad
    return preset(name, len(shards.vocab), pad_id=pad, max_position=max(512, max_len))


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
                    mlm, nsp = self.model(*_inputs(batch), batch["mlm_positions"])
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


def _inputs(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class Meter:
    """Sums over a logging interval; `flush` reduces them over ranks into one metrics record."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.peak = _peak_flops(trainer.cfg, trainer.d.device)
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


def _peak_flops(cfg: TrainConfig, device: torch.device) -> float:
    if device.type != "cuda":
        return 0.0
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12
    name = torch.cuda.get_device_name(device)
    return next((v * 1e12 for k, v in PEAK_BF16_TFLOPS.items() if k in name), 0.0)


def progress_line(record: dict, steps: int, started: float, first_step: int) -> str:
    """One terminal line: bar, losses, accuracies, learning rate, throughput, ETA."""
    step = record["step"]
    filled = int(20 * step / steps)
    rate = (step - first_step) / max(time.perf_counter() - started, 1e-9)
    eta = int((steps - step) / rate) if rate > 0 else 0
    mfu = f" mfu {100 * record['mfu']:.1f}%" if "mfu" in record else ""
    return (
        f"step {step:>{len(str(steps))}}/{steps} [{'#' * filled}{'.' * (20 - filled)}] "
        f"loss {record['loss']:.4f} (mlm {record['mlm_loss']:.4f} nsp {record['nsp_loss']:.4f}) "
        f"acc mlm {record['mlm_acc']:.3f} nsp {record['nsp_acc']:.3f} lr {record['lr']:.2e} "
        f"{record['seq_per_s']:.0f} seq/s {record['tokens_per_s'] / 1e3:.1f}k tok/s{mfu} "
        f"eta {eta // 60}:{eta % 60:02d}"
    )


def save_checkpoint(path: str, state: dict) -> None:
    """Write atomically: a temporary file in the same directory, fsync, rename."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _rng_states(d: Dist) -> list[dict]:
    """Every rank's torch generator state (dropout), gathered on all ranks."""
    state = {"cpu": torch.get_rng_state()}
    if d.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(d.device)
    if d.world == 1:
        return [state]
    states: list = [None] * d.world
    dist.all_gather_object(states, state)
    return states


def checkpoint_state(
    trainer: Trainer, shards: ShardSet, step: int, position: int, rng: list[dict]
) -> dict:
    return {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "loader_position": position,
        "model_config": asdict(trainer.model_cfg),
        "train_config": asdict(trainer.cfg),
        "vocab": {
            "size": len(shards.vocab),
            "sha256": shards.manifest.vocab_sha256,
            "special_ids": shards.vocab.special_ids.to_dict(),
        },
        "shard_config": dict(shards.config),
        "model": trainer.raw.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "rng": rng,
        "world_size": trainer.d.world,
    }


def load_checkpoint(path: str) -> dict:
    try:
        ckpt = torch.load(path, map_location="cpu")
    except Exception as e:  # torch raises several types for a damaged file
        raise ValueError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {e}); it was not written "
            "by this package or is damaged"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a checkpoint of this package (format {CHECKPOINT_FORMAT})")
    return ckpt


def check_resume(path: str, ckpt: dict, trainer: Trainer, shards: ShardSet) -> None:
    """Refuse to resume a checkpoint onto a different vocab, model or data order."""
    size, here = ckpt["vocab"]["size"], len(shards.vocab)
    if size != here:
        raise ValueError(
            f"{path}: trained with a vocab of {size} pieces, but {shards.directory} has {here}; "
            "resume on the shard set the run started with, or start a new --run"
        )
    if ckpt["vocab"]["sha256"] != shards.manifest.vocab_sha256:
        raise ValueError(
            f"{path}: trained with vocab {ckpt['vocab']['sha256']}, but {shards.directory} uses "
            f"{shards.manifest.vocab_sha256}; resume on the original shard set"
        )
    if ckpt["model_config"] != asdict(trainer.model_cfg):
        was = ckpt["train_config"]["model"]
        raise ValueError(f"{path}: a {was!r} model; --model {trainer.cfg.model!r} differs")
    changed = [k for k in ORDER_KEYS if ckpt["train_config"][k] != getattr(trainer.cfg, k)]
    if changed:
        old = ", ".join(f"{k}={ckpt['train_config'][k]}" for k in changed)
        raise ValueError(f"{path}: resume with the run's own data settings ({old})")


def restore(ckpt: dict, trainer: Trainer) -> None:
    trainer.raw.load_state_dict(ckpt["model"])
    trainer.optimizer.load_state_dict(ckpt["optimizer"])
    trainer.scheduler.load_state_dict(ckpt["scheduler"])
    # The schedule follows this run's --steps and --warmup (a resumed run may be extended).
    schedule = WarmupLinear(trainer.cfg.warmup, trainer.cfg.steps)
    trainer.scheduler.lr_lambdas = [schedule] * len(trainer.optimizer.param_groups)
    factor = schedule(trainer.scheduler.last_epoch)
    for group, base in zip(trainer.optimizer.param_groups, trainer.scheduler.base_lrs, strict=True):
        group["lr"] = base * factor
    trainer.scheduler._last_lr = [g["lr"] for g in trainer.optimizer.param_groups]
    d = trainer.d
    if len(ckpt["rng"]) == d.world:
        torch.set_rng_state(ckpt["rng"][d.rank]["cpu"])
        if d.device.type == "cuda" and "cuda" in ckpt["rng"][d.rank]:
            torch.cuda.set_rng_state(ckpt["rng"][d.rank]["cuda"], d.device)
    else:  # another world size: the data order holds, dropout draws differ
        torch.manual_seed(trainer.cfg.seed + d.rank + ckpt["step"])


def prepare_run(cfg: TrainConfig, shards: ShardSet, d: Dist) -> str | None:
    """Create the run directory (rank 0); the checkpoint to resume from, if any."""
    path = os.path.join(cfg.run, CHECKPOINT)
    exists = os.path.exists(path)
    if exists and not cfg.resume:
        raise ValueError(
            f"{path} exists: pass --resume to continue that run, or choose another --run"
        )
    if d.main:
        os.makedirs(cfg.run, exist_ok=True)
        for stale in glob.glob(f"{path}.tmp-*"):  # left by a run killed while saving
            os.unlink(stale)
        for name in ("vocab.txt", "tokenizer.json"):
            src = os.path.join(shards.directory, name)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(cfg.run, name))
        atomic_write_text(os.path.join(cfg.run, "train_config.json"), _json(asdict(cfg)))
    if cfg.resume and not exists and d.main:
        print(f"note: {path} does not exist yet; starting {cfg.run} from step 0")
    return path if exists else None


def trim_metrics(path: str, step: int) -> None:
    """Drop records after `step`: a killed run may have logged past its last checkpoint."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(lines))


def _json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


@torch.no_grad()
def evaluate(trainer: Trainer, shards: ShardSet, held: list[Part], micro: int) -> dict | None:
    """MLM and NSP loss and accuracy on the held-out rows, with their own (static) masks."""
    if sum(stop - start for _, start, stop in held) == 0:
        return None
    cfg, d = trainer.cfg, trainer.d
    lc = LoaderConfig(micro, cfg.seed, d.rank, d.world, shuffle=False, drop_last=False)
    data = PretrainingData(shards, held, lc)
    stop = min(data.batches_per_epoch, cfg.eval_batches)
    sums = torch.zeros(6, dtype=torch.float64, device=d.device)
    trainer.raw.eval()
    for batch in batches(data, 0, stop):
        batch = _to(batch, d.device)
        with trainer.amp():
            mlm, nsp = trainer.raw(*_inputs(batch), batch["mlm_positions"])
        mlm_l, nsp_l = batch["mlm_labels"], batch["nsp_labels"]
        sums += torch.stack(
            [
                F.cross_entropy(mlm.float(), mlm_l, reduction="sum").double(),
                F.cross_entropy(nsp.float(), nsp_l, reduction="sum").double(),
                (mlm.argmax(-1) == mlm_l).sum().double(),
                torch.tensor(float(len(mlm_l)), device=d.device, dtype=torch.float64),
                (nsp.argmax(-1) == nsp_l).sum().double(),
                torch.tensor(float(len(nsp_l)), device=d.device, dtype=torch.float64),
            ]
        )
    trainer.raw.train()
    if d.world > 1:
        dist.all_reduce(sums)
    mlm_sum, nsp_sum, mlm_ok, mlm_n, nsp_ok, nsp_n = sums.tolist()
    mlm_loss, nsp_loss = mlm_sum / mlm_n, nsp_sum / nsp_n
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "nsp_loss": nsp_loss,
        "mlm_acc": mlm_ok / mlm_n,
        "nsp_acc": nsp_ok / nsp_n,
        "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
        "sequences": int(nsp_n),
        "held_out": [f"{shards.manifest.shards[i].path}[{a}:{b}]" for i, a, b in held],
    }


def pretrain(cfg: TrainConfig) -> dict:
    """Train as configured; returns {"step", "last" (the last metrics record), "eval"}."""
    d = init_distributed(cfg.device)
    try:
        return _pretrain(cfg, d)
    finally:
        if d.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _pretrain(cfg: TrainConfig, d: Dist) -> dict:
    shards = open_shards(cfg.shards)
    micro = micro_batch_size(cfg.batch_size, d.world, cfg.accum)
    train_parts, held = split_holdout(shards, cfg.holdout)
    lc = LoaderConfig(micro, cfg.seed, d.rank, d.world, True, cfg.shuffle_window, cfg.remask)
    data = PretrainingData(shards, train_parts, lc)
    trainer = Trainer(cfg, model_config(cfg.model, shards), d)
    resume_from = prepare_run(cfg, shards, d)
    step = position = 0
    if resume_from:
        ckpt = load_checkpoint(resume_from)
        check_resume(resume_from, ckpt, trainer, shards)
        restore(ckpt, trainer)
        step, position = ckpt["step"], ckpt["loader_position"]
        del ckpt
    if d.main:
        trim_metrics(os.path.join(cfg.run, METRICS), step)
        _announce(cfg, trainer, data, step)
    last = _train_loop(cfg, trainer, shards, data, step, position)
    result = evaluate(trainer, shards, held, micro)
    if d.main and result is not None:
        atomic_write_text(os.path.join(cfg.run, "eval.json"), _json(result))
        shown = " ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in result.items()
            if k != "held_out"
        )
        print(f"held-out {shown}")
    return {"step": cfg.steps, "last": last, "eval": result}


def _announce(cfg: TrainConfig, trainer: Trainer, data: PretrainingData, step: int) -> None:
    m = trainer.model_cfg
    params = count_parameters(trainer.raw) / 1e6
    print(
        f"{cfg.model}: {m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads, "
        f"vocab {m.vocab_size}, {params:.1f}M parameters | {data.total_rows} training sequences, "
        f"batch {cfg.batch_size} ({trainer.d.world} rank(s) x {data.cfg.batch_size} x accum "
        f"{cfg.accum}) | {trainer.d.device} {'bf16' if trainer.autocast else 'fp32'} | "
        f"{'resuming at step ' + str(step) if step else 'from scratch'} -> {cfg.run}",
        flush=True,
    )


def _train_loop(
    cfg: TrainConfig,
    trainer: Trainer,
    shards: ShardSet,
    data: PretrainingData,
    step: int,
    position: int,
) -> dict | None:
    d, meter, last = trainer.d, Meter(trainer), None
    stream = batches(data, position, workers=cfg.workers, pin_memory=d.device.type == "cuda")
    metrics = open(os.path.join(cfg.run, METRICS), "a", encoding="utf-8") if d.main else None
    started, first = time.perf_counter(), step
    try:
        while step < cfg.steps:
            micro_batches = [next(stream) for _ in range(cfg.accum)]
            lr = trainer.lr
            stats = trainer.step([_to(b, d.device) for b in micro_batches])
            step, position = step + 1, position + cfg.accum
            meter.add(stats, micro_batches)
            save = step % cfg.ckpt_every == 0 or step == cfg.steps
            if save or step % cfg.log_every == 0:
                last = meter.flush(step, lr, position / data.batches_per_epoch)
                if metrics:
                    metrics.write(json.dumps(last) + "\n")
                    metrics.flush()
                    print(progress_line(last, cfg.steps, started, first), flush=True)
            if save:
                rng = _rng_states(d)  # a collective: every rank takes part
                if d.main:
                    state = checkpoint_state(trainer, shards, step, position, rng)
                    save_checkpoint(os.path.join(cfg.run, CHECKPOINT), state)
                meter.reset()
    finally:
        if metrics:
            metrics.close()
    if d.world > 1:
        dist.barrier()
    return last
