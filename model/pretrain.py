"""Pre-training: MLM + NSP on the shards, on a CPU or under `torchrun` on GPUs, then the
held-out evaluation.

One process per device. Under `torchrun` each rank reads its slice of every global batch
(`model.data`), DDP averages the gradients, and rank 0 writes metrics and checkpoints. A
checkpoint (`model.run_dir`) holds everything the rest of the run depends on, so `--resume`
reproduces an uninterrupted run exactly. The step, optimizer and metrics are `model.training`'s,
which fine-tuning shares.
"""

from __future__ import annotations

import gc
import math
import os
from dataclasses import replace

import torch
import torch.distributed as dist

from model.batches import batches
from model.bert import count_parameters, pretraining_loss
from model.config import BertConfig, TrainConfig, preset
from model.data import LoaderConfig, Part, PretrainingData, open_shards, whole_shards
from model.hf_import import Imported, load_pretrained
from model.run_dir import (
    CHECKPOINT,
    EVAL,
    METRICS,
    RESUME_ADVICE,
    check_resume,
    checkpoint_to_resume,
    load_checkpoint,
    prepare_run,
    restore,
    to_json,
    trim_metrics,
    write_checkpoint,
)
from model.run_lock import RunLock
from model.training import (
    Dist,
    Meter,
    MetricsLog,
    Progress,
    Trainer,
    build_model,
    init_distributed,
    micro_batch_size,
    model_inputs,
    pretraining_figures,
    to_device,
)
from schemas.manifest import atomic_write_text
from schemas.reader import ShardSet


def model_config(
    name: str, shards: ShardSet, nsp: bool = True, attention_dropout: float = 0.1
) -> BertConfig:
    """The preset sized to the shards: their vocab, their [PAD], their sequence length; with
    or without the next-sentence head, with its attention dropout."""
    max_len = shards.shard_config.max_seq_length
    pad = shards.vocab.special_ids.pad
    return preset(
        name,
        len(shards.vocab),
        pad_id=pad,
        max_position=max(512, max_len),
        next_sentence=nsp,
        attention_dropout=attention_dropout,
    )


def pretrain(cfg: TrainConfig) -> dict:
    """Train as configured; returns {"step", "last" (the last metrics record), "eval"}."""
    d = init_distributed(cfg.device)
    lock = RunLock(cfg.run, take=d.main)  # a second run into RUN is refused, naming this one
    try:
        lock.acquire()
        result = _pretrain(cfg, d)
        if d.world > 1:
            # Every rank done with every collective, and the DDP model (which holds the
            # process group) freed, before the group goes: else gloo can abort at exit.
            gc.collect()
            dist.barrier()
        return result
    finally:
        lock.release()
        if d.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _pretrain(cfg: TrainConfig, d: Dist) -> dict:
    shards = open_shards(cfg.shards)
    micro = micro_batch_size(cfg.batch_size, d.world, cfg.accum)
    imported = init_model(cfg, shards) if cfg.init else None  # refused before any note
    train_parts, held = split_holdout(shards, cfg.holdout, say=d.main)
    lc = LoaderConfig(
        micro, cfg.seed, d.rank, d.world, True, cfg.shuffle_window, cfg.remask, cfg.mask_prob
    )
    data = PretrainingData(shards, train_parts, replace(lc, pack=cfg.pack))
    model_cfg = model_config(cfg.model, shards, cfg.nsp, cfg.attention_dropout)
    if imported:
        recipe = dict(next_sentence=cfg.nsp, attention_dropout=cfg.attention_dropout)
        model_cfg = replace(imported.cfg, **recipe)
    trainer = Trainer(cfg, d, build_model(cfg, model_cfg, d))
    step, position = _resume(cfg, trainer, shards)
    if imported and step == 0:  # a resumed run has its own weights
        state = imported.state
        if not cfg.nsp:  # masked-LM only: the imported next-sentence head is not used
            state = {k: v for k, v in state.items() if not k.startswith("nsp.")}
        trainer.raw.load_state_dict(state)
    if d.main:
        trim_metrics(os.path.join(cfg.run, METRICS), step)
        _announce(cfg, trainer, data, step)
        if imported and step == 0 and imported.report():
            print(f"note: {imported.report()}", flush=True)
    last = _train_loop(cfg, trainer, shards, data, step, position)
    result = evaluate(trainer, shards, held, micro)
    if d.main and result is not None:
        _report_eval(cfg, result)
    return {"step": cfg.steps, "last": last, "eval": result}


def init_model(cfg: TrainConfig, shards: ShardSet) -> Imported:
    """The model of `--init DIR` on these shards: their vocab (or its rows mapped onto it with
    --init-map-vocab), positions enough for their rows."""
    imported = load_pretrained(
        cfg.init, cfg.seed, shards.vocab, f"the shards in {shards.directory}", cfg.init_map_vocab
    )
    built_lowercase = shards.shard_config.lowercase
    if imported.lowercase != built_lowercase:  # the same vocab, other text: no sign of it later
        raise ValueError(_casing_mismatch(cfg.init, imported.lowercase, shards.directory))
    rows = shards.shard_config.max_seq_length
    if imported.cfg.max_position < rows:
        raise ValueError(
            f"{cfg.init}: max_position_embeddings {imported.cfg.max_position} is shorter than "
            f"the shards' rows of up to {rows} tokens; build shards of at most that length "
            f"(make shards SEQ_LEN={imported.cfg.max_position})"
        )
    return imported


def _resume(cfg: TrainConfig, trainer: Trainer, shards: ShardSet) -> tuple[int, int]:
    """Check the checkpoint to resume, if any, then make the run's files and restore it; the
    step and loader position to go on from. A refused resume has written nothing."""
    path = checkpoint_to_resume(cfg)
    ckpt = load_checkpoint(path, RESUME_ADVICE, flag="") if path else None
    if ckpt is not None:
        check_resume(path, ckpt, trainer, shards)
    prepare_run(cfg, shards, trainer.d, path)
    if ckpt is None:
        return 0, 0
    restore(ckpt, trainer)
    return ckpt["step"], ckpt["loader_position"]


def _announce(cfg: TrainConfig, trainer: Trainer, data: PretrainingData, step: int) -> None:
    m = trainer.model_cfg
    params = count_parameters(trainer.raw) / 1e6
    name = f"from {cfg.init}" if cfg.init else cfg.model
    print(
        f"{name}: {m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads, "
        f"vocab {m.vocab_size}, {params:.1f}M parameters | {data.total_rows} training sequences, "
        f"batch {cfg.batch_size} ({trainer.d.world} rank(s) x {data.cfg.batch_size} x accum "
        f"{cfg.accum}){_packed(data)} | {_recipe(cfg, data)} | "
        f"{trainer.d.device} {'bf16' if trainer.autocast else 'fp32'} | "
        f"{_start(cfg, step)} -> {cfg.run}",
        flush=True,
    )


def _casing_mismatch(init: str, lowercase: bool, shards: str) -> str:
    """An --init model whose tokenizer lowercases where the shards kept case, or the reverse:
    pre-training would go on with text of another casing than the model's pieces."""
    if lowercase:
        return (
            f"{init}: its tokenizer lowercases (do_lower_case true), but the shards in {shards} "
            "were built with --cased; build them lowercased, as the model was (make shards "
            "without --cased)"
        )
    return (
        f"{init}: its tokenizer keeps case (do_lower_case false), but the shards in {shards} "
        "were built lowercased, accents stripped; build them as the model was, with --cased "
        "(make shards ARGS=--cased)"
    )


def _start(cfg: TrainConfig, step: int) -> str:
    if step:
        return f"resuming at step {step}"
    return "a new run from its weights" if cfg.init else "from scratch"


def _packed(data: PretrainingData) -> str:
    if not data.cfg.pack:
        return ""
    return (
        f" packed sequences of {data.max_length} ({data.rows_per_unit:.2f} rows each on "
        f"average, {data.total_units} per epoch)"
    )


def _recipe(cfg: TrainConfig, data: PretrainingData) -> str:
    masks = "the shards' masks"
    if data.rule is not None:
        masks = f"fresh masks at {data.rule.masked_lm_prob:g} (at most {data.rule.max_predictions})"
    return f"{'MLM + NSP' if cfg.nsp else 'MLM only'}, {masks}"


def _report_eval(cfg: TrainConfig, result: dict) -> None:
    atomic_write_text(os.path.join(cfg.run, EVAL), to_json(result))
    hidden = {"held_out"} | ({"nsp_loss"} if result["nsp_acc"] is None else set())  # MLM only
    shown = " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in result.items()
        if k not in hidden and v is not None
    )
    print(f"held-out {shown}")


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
    metrics = MetricsLog(os.path.join(cfg.run, METRICS) if d.main else None)
    progress = Progress(cfg.steps, step)
    try:
        while step < cfg.steps:
            micro_batches = [next(stream) for _ in range(cfg.accum)]
            lr = trainer.lr
            stats = trainer.step([to_device(b, d.device) for b in micro_batches])
            step, position = step + 1, position + cfg.accum
            meter.add(stats, micro_batches)
            save = step % cfg.ckpt_every == 0 or step == cfg.steps
            if save or step % cfg.log_every == 0:
                last = meter.flush(step, lr, position / data.batches_per_epoch)
                metrics.write(last)
                if d.main:
                    print(progress.line(step, pretraining_figures(last)), flush=True)
            if save:
                write_checkpoint(os.path.join(cfg.run, CHECKPOINT), trainer, shards, step, position)
                meter.reset()
    finally:  # the loader's workers end here too, before an interrupted run says so
        stream.close()
        metrics.close()
    if d.world > 1:
        dist.barrier()
    return last


def split_holdout(
    shards: ShardSet, holdout: int, say: bool = True
) -> tuple[list[Part], list[Part]]:
    """Train on all shards but the last `holdout` (manifest order), evaluated at the end. A set
    with too few shards holds out the last tenth of its last shard's rows instead, and says so
    when `say` (under torchrun, rank 0 alone)."""
    n = len(shards)
    if holdout == 0:
        return whole_shards(shards, range(n)), []
    if n > holdout:
        return whole_shards(shards, range(n - holdout)), whole_shards(shards, range(n - holdout, n))
    rows = shards.manifest.shards[n - 1].rows
    held = max(1, rows // 10)
    if say:
        print(
            f"note: {n} shard(s), too few to hold {holdout} out: evaluating on the last "
            f"{held} rows of {shards.manifest.shards[n - 1].path} instead (they may share "
            "documents with training rows; build more shards for a clean held-out set)"
        )
    train = whole_shards(shards, range(n - 1)) + [(n - 1, 0, rows - held)]
    return train, [(n - 1, rows - held, rows)]


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
        batch = to_device(batch, d.device)
        with trainer.amp():
            mlm, nsp = trainer.raw(*model_inputs(batch), batch["mlm_positions"])
        labels = batch["mlm_labels"], batch["nsp_labels"]
        sums += pretraining_loss(mlm, nsp, *labels, reduction="sum")[1]  # nsp None: MLM only
    trainer.raw.train()
    if d.world > 1:
        dist.all_reduce(sums)
    return _eval_record(sums.tolist(), trainer, shards, held)


def _eval_record(sums: list[float], trainer: Trainer, shards: ShardSet, held: list[Part]) -> dict:
    mlm_sum, nsp_sum, mlm_ok, mlm_n, nsp_ok, nsp_n = sums
    mlm_loss, nsp_loss = mlm_sum / mlm_n, nsp_sum / nsp_n
    nsp = trainer.model_cfg.next_sentence
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "nsp_loss": nsp_loss,
        "mlm_acc": mlm_ok / mlm_n,
        "nsp_acc": nsp_ok / nsp_n if nsp else None,  # None: masked-LM only
        "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
        "sequences": int(nsp_n),
        "held_out": [f"{shards.manifest.shards[i].path}[{a}:{b}]" for i, a, b in held],
    }
