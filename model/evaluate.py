"""`bert-model evaluate`: the held-out evaluation of any model on any shard set of its vocab:
masked-LM and next-sentence loss and accuracy, and the masked-LM perplexity.

Each model (one or several, evaluated in turn on the same rows: a run's kept checkpoints, say)
is a pre-training checkpoint of this package (RUN/last.pt, whatever set it trained on)
or a Hugging Face BERT directory with a masked-LM head (`BertForPreTraining`, `BertForMaskedLM`,
or our export): how well Google's BERT, say, models a corpus of one's own before and after
continued pre-training on it (`pretrain --init`). The rows are those pre-training holds out with
`--holdout N` (the last N shards, or the last tenth of a single shard's rows), or every row of
the set (`--all-rows`); each with the set's own static masks, so two models evaluated on one set
see the same masked positions. A model without a next-sentence head (`BertForMaskedLM`) is
evaluated on the masked LM alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import torch

from model.bert import BertForPreTraining
from model.config import BertConfig, EvaluateConfig, flag_hint
from model.data import open_shards, whole_shards
from model.held_out import HeldOut, shown, split_holdout
from model.hf_import import is_hf_directory, load_pretrained
from model.pretrain import check_fits
from model.run_dir import load_checkpoint
from model.training import Dist, amp_dtype, precision_name, resolve_device
from schemas.manifest import atomic_write_text
from schemas.reader import ShardSet


def evaluate(cfg: EvaluateConfig) -> list[dict]:
    """Evaluate each checkpoint on the same rows (every one checked against the set before the
    first is evaluated), print a line each, write them to `cfg.out` if given, a JSON object a
    line; returns them (`held_out` names the rows, `model` the model, `precision` its
    autocast)."""
    device = resolve_device(cfg.device)
    shards = open_shards(cfg.shards)
    models: dict[BertConfig, BertForPreTraining] = {}  # one a config, weights loaded in turn
    for path in cfg.ckpts[1:]:  # the first is checked as it is loaded below
        _model(path, shards, models)
    if cfg.all_rows:
        held = whole_shards(shards, range(len(shards)))
    else:
        held = split_holdout(shards, cfg.holdout)[1]
    dtype = amp_dtype(cfg.precision, device)
    data = HeldOut(shards, held, cfg.batch_size, Dist(0, 1, device))

    def amp():
        return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)

    results = []
    for path in cfg.ckpts:
        model = _model(path, shards, models).to(device)
        result = data.evaluate(model, amp, cfg.eval_batches or data.batches)
        print(f"{path} on {cfg.shards}: {shown(result)}", flush=True)
        results.append({**result, "model": path, "precision": precision_name(dtype)})
    if cfg.out:
        os.makedirs(os.path.dirname(os.path.abspath(cfg.out)), exist_ok=True)
        atomic_write_text(cfg.out, "".join(json.dumps(r, sort_keys=True) + "\n" for r in results))
    return results


def _model(path: str, shards: ShardSet, models: dict) -> BertForPreTraining:
    """The model at `path` on these shards: their vocab (refused otherwise) and casing, and
    positions enough for their rows. A checkpoint's tensors are mapped from its file, so its
    optimizer's state is never read. The weights go into the model of `models` made for their
    config, made once (a base model's initialisation is a CPU-second): a run's checkpoints,
    checked and then evaluated, share one."""
    where = f"the shards in {shards.directory}"
    if is_hf_directory(path):
        imported = load_pretrained(path, vocab=shards.vocab, where=where, mappable=False)
        if "masked-LM head" in imported.initialised:
            raise ValueError(
                f"{path} has no masked-LM head (a BertModel's weights): evaluate a directory of "
                "BertForPreTraining or BertForMaskedLM, as `bert-model export` writes"
            )
        cfg, state, lowercase = imported.cfg, imported.state, imported.lowercase
        if "next-sentence head" in imported.initialised:  # BertForMaskedLM: the MLM alone
            cfg = replace(cfg, next_sentence=False)
            state = {k: v for k, v in state.items() if not k.startswith("nsp.")}
    else:
        ckpt = load_checkpoint(path, flag="--ckpt", mmap=True)
        if ckpt["vocab"].get("sha256") != shards.manifest.vocab_sha256:
            raise ValueError(
                f"{path} was trained with another vocab (sha256 {ckpt['vocab']['sha256'][:12]}) "
                f"than {where} ({shards.manifest.vocab_sha256[:12]}); evaluate it on a set built "
                f"with its vocab ({flag_hint('--vocab', 'RUN/vocab.txt')} at the build)"
            )
        cfg, state = BertConfig(**ckpt["model_config"]), ckpt["model"]
        lowercase = ckpt["shard_config"].get("lowercase", True)
    check_fits(path, cfg, lowercase, shards)
    if cfg not in models:
        models[cfg] = BertForPreTraining(cfg)
    models[cfg].load_state_dict(state)
    return models[cfg]


def evaluate_config(args) -> EvaluateConfig:
    """Flags -> EvaluateConfig; --holdout beside --all-rows, which evaluates every row, is
    refused."""
    if args.all_rows and args.holdout is not None:
        raise ValueError(
            f"--all-rows evaluates every row of the set, and --holdout {args.holdout} the rows "
            "pre-training holds out: give one of them"
        )
    holdout = EvaluateConfig.holdout if args.holdout is None else args.holdout
    fields = ("shards", "all_rows", "batch_size", "eval_batches", "device", "precision", "out")
    given = {k: getattr(args, k) for k in fields}
    return EvaluateConfig(ckpts=tuple(args.ckpt), holdout=holdout, **given)
