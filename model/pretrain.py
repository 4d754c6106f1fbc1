"""Pre-training: MLM + NSP on the shards, on a CPU or under `torchrun` on GPUs, then the
held-out evaluation.

One process per device. Under `torchrun` each rank reads its slice of every global batch
(`model.data`), DDP averages the gradients, and rank 0 writes metrics and checkpoints. A
checkpoint (`model.run_dir`; checked and restored by `model.resume`) holds everything the rest
of the run depends on, so `--resume` reproduces an uninterrupted run exactly. The step,
optimizer and metrics are `model.training`'s, which fine-tuning shares.
"""

from __future__ import annotations

import gc
import os
from dataclasses import replace

import torch.distributed as dist

from model.batches import batches
from model.bert import count_parameters
from model.board import Board, check_available
from model.config import BertConfig, TrainConfig, model_sizes, preset
from model.data import LoaderConfig, PretrainingData, open_shards
from model.held_out import HeldOut, shown, split_holdout
from model.hf_import import Imported, load_pretrained
from model.resume import check_resume, restore
from model.run_dir import (
    CHECKPOINT,
    EVAL,
    METRICS,
    RESUME_ADVICE,
    checkpoint_to_resume,
    keep_checkpoint,
    kept_checkpoint,
    load_checkpoint,
    prepare_run,
    to_json,
    trim_metrics,
    write_checkpoint,
)
from model.run_lock import RunLock
from model.run_log import Meter, MetricsLog, Progress, pretraining_figures
from model.run_shards import shard_set_record
from model.training import (
    Dist,
    Trainer,
    build_model,
    init_distributed,
    micro_batch_size,
    precision_name,
    to_device,
)
from schemas.labels import forced_labels_note
from schemas.manifest import atomic_write_text
from schemas.reader import ShardSet


def model_config(
    name: str,
    shards: ShardSet,
    nsp: bool = True,
    attention_dropout: float = 0.1,
    sizes: tuple[int, int, int] | None = None,
) -> BertConfig:
    """The preset sized to the shards: their vocab, their [PAD], their sequence length; with
    or without the next-sentence head, with its attention dropout; `sizes` (layers, hidden,
    heads) in place of the preset's, the feed-forward 4 x hidden."""
    max_len = shards.shard_config.max_seq_length
    pad = shards.vocab.special_ids.pad
    shape = {}
    if sizes is not None:
        layers, hidden, heads = sizes
        shape = dict(num_layers=layers, hidden_size=hidden, num_heads=heads)
        shape["intermediate_size"] = 4 * hidden
    return preset(
        name,
        len(shards.vocab),
        pad_id=pad,
        max_position=max(512, max_len),
        next_sentence=nsp,
        attention_dropout=attention_dropout,
        **shape,
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
    if cfg.tensorboard and d.main:  # rank 0 writes the events
        check_available()  # refused before the shards are read or the run folder is written
    shards = open_shards(cfg.shards)
    # the manifest's digest each checkpoint records, read now with the set (and kept: see
    # `manifest_sha256`), not from the store at the first checkpoint, which a store failing
    # then would stop
    shard_set_record(shards)
    micro = micro_batch_size(cfg.batch_size, d.world, cfg.accum)
    imported = init_model(cfg, shards) if cfg.init else None  # refused before any note
    train_parts, held = split_holdout(shards, cfg.holdout, say=d.main)
    lc = LoaderConfig(
        micro, cfg.seed, d.rank, d.world, True, cfg.shuffle_window, cfg.remask, cfg.mask_prob
    )
    data = PretrainingData(shards, train_parts, replace(lc, pack=cfg.pack))
    model_cfg = model_config(cfg.model, shards, cfg.nsp, cfg.attention_dropout, model_sizes(cfg))
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
        kept = cfg.keep_every and step and step % cfg.keep_every == 0
        if kept and not os.path.exists(kept_checkpoint(cfg.run, step)):  # killed before keeping
            keep_checkpoint(cfg.run, step)
        _announce(cfg, trainer, data, step)
        if imported and step == 0 and imported.report():
            print(f"note: {imported.report()}", flush=True)
        if cfg.nsp and step == 0 and (note := forced_labels_note(shards.manifest)):
            print(f"{note} (--no-nsp pre-trains the masked LM alone)", flush=True)
    held_out = HeldOut(shards, held, micro, d, cfg.seed)
    board = Board(cfg.run, step) if cfg.tensorboard and d.main else None
    last, result = _train_loop(cfg, trainer, shards, (data, held_out), (step, position), board)
    if d.main and result is not None:
        _report_eval(cfg, result)
    return {"step": cfg.steps, "last": last, "eval": result}


def init_model(cfg: TrainConfig, shards: ShardSet) -> Imported:
    """The model of `--init DIR` on these shards: their vocab (or its rows mapped onto it with
    --init-map-vocab), positions enough for their rows."""
    imported = load_pretrained(
        cfg.init, cfg.seed, shards.vocab, f"the shards in {shards.directory}", cfg.init_map_vocab
    )
    check_fits(cfg.init, imported.cfg, imported.lowercase, shards)
    return imported


def check_fits(name: str, cfg: BertConfig, lowercase: bool, shards: ShardSet) -> None:
    """A model (`name`: its directory or checkpoint) whose vocab is the shards' refused where
    it was trained on text of the other casing (the same vocab, other text: no sign of it
    later) or has fewer positions than the shards' rows."""
    if lowercase != shards.shard_config.lowercase:
        raise ValueError(_casing_mismatch(name, lowercase, shards.directory))
    rows = shards.shard_config.max_seq_length
    if cfg.max_position < rows:
        raise ValueError(
            f"{name}: max_position_embeddings {cfg.max_position} is shorter than the shards' "
            f"rows of up to {rows} tokens; build shards of at most that length (make shards "
            f"SEQ_LEN={cfg.max_position})"
        )


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
        f"{trainer.d.device} {precision_name(trainer.dtype)} | "
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
    print(f"held-out {shown(result)}")


def _train_loop(
    cfg: TrainConfig,
    trainer: Trainer,
    shards: ShardSet,
    reads: tuple[PretrainingData, HeldOut],
    start: tuple[int, int],
    board: Board | None,
) -> tuple[dict | None, dict | None]:
    """Train from `start` (step, loader position) to `cfg.steps`, logging, checkpointing and
    evaluating the held-out rows as configured; then the final evaluation. Returns (the last
    metrics record, the final evaluation)."""
    (data, held_out), (step, position) = reads, start
    d, meter, last = trainer.d, Meter(trainer), None
    stream = batches(data, position, workers=cfg.workers, pin_memory=d.device.type == "cuda")
    metrics = MetricsLog(os.path.join(cfg.run, METRICS) if d.main else None, board=board)
    progress = Progress(cfg.steps, step)
    try:
        while step < cfg.steps:
            micro_batches = [next(stream) for _ in range(cfg.accum)]
            lr = trainer.lr
            stats = trainer.step([to_device(b, d.device) for b in micro_batches])
            step, position = step + 1, position + cfg.accum
            meter.add(stats, micro_batches)
            keep = cfg.keep_every > 0 and step % cfg.keep_every == 0
            save = keep or step % cfg.ckpt_every == 0 or step == cfg.steps
            evaluate = cfg.eval_every > 0 and step % cfg.eval_every == 0
            if save or evaluate or step % cfg.log_every == 0:
                last = meter.flush(step, lr, position / data.batches_per_epoch)
                if evaluate:
                    last["held_out"] = _figures(_evaluate(trainer, held_out))
                metrics.write(last)
                if d.main:
                    print(progress.line(step, pretraining_figures(last)), flush=True)
                    if evaluate and step < cfg.steps:  # the last step's: the final line
                        print(f"step {step} held-out {shown(last['held_out'])}", flush=True)
            if save:
                write_checkpoint(os.path.join(cfg.run, CHECKPOINT), trainer, shards, step, position)
                if keep and d.main:
                    keep_checkpoint(cfg.run, step)
                meter.reset()
        result = _final_evaluation(trainer, held_out, last, board)
    finally:  # the loader's workers end here too, before an interrupted run says so
        stream.close()
        metrics.close()
    if d.world > 1:
        dist.barrier()
    return last, result


def _figures(result: dict) -> dict:
    """An evaluation as a metrics record holds it: its figures, not the rows it read."""
    return {k: v for k, v in result.items() if k != "held_out"}


def _evaluate(trainer: Trainer, held_out: HeldOut) -> dict | None:
    return held_out.evaluate(trainer.raw, trainer.amp, trainer.cfg.eval_batches)


def _final_evaluation(
    trainer: Trainer, held_out: HeldOut, last: dict | None, board: Board | None
) -> dict | None:
    """The held-out evaluation of the trained weights (eval.json): the last step's periodic
    one when it ran (the same weights and rows), else one now; TensorBoard gets it at the last
    step either way."""
    cfg = trainer.cfg
    if last is not None and last["step"] == cfg.steps and "held_out" in last:
        return {**last["held_out"], "held_out": held_out.rows()}
    result = _evaluate(trainer, held_out)
    if board is not None and result is not None:
        board.write({"step": cfg.steps, "held_out": _figures(result)})
    return result
