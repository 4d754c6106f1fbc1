"""Export a checkpoint as a Hugging Face directory: `BertForPreTraining.from_pretrained(dir)`
loads it and gives the same outputs, and `BertTokenizer.from_pretrained(dir)` the same ids. A
masked-LM-only run (`--no-nsp`) is exported as a `BertForMaskedLM`: no next-sentence head and
no pooler (neither was trained), as `BertForMaskedLM.save_pretrained` writes it.

Written: config.json, model.safetensors (what `transformers` writes and prefers: unlike a
pickle, loading it cannot run code), and the tokenizer as each loader reads it, all from the
checkpoint's vocab.txt: vocab.txt, tokenizer.json (all that transformers 5 reads when it is
there), tokenizer_config.json and special_tokens_map.json. An --out that holds other files is
refused (unless --overwrite), and so is one that holds a shard set or a run. Needs torch,
safetensors and tokenizers, not transformers.

A fine-tuning run's best.pt or model.pt is exported as the transformers class of its task,
which `AutoModelForSequenceClassification` (every GLUE task; STS-B as a regression),
`AutoModelForTokenClassification` (ner) or `AutoModelForQuestionAnswering` (squad) loads with
the same outputs: the encoder as above (with the pooler only where the head reads it), the
head under that class's name, and the task's labels as `id2label`. Its tokenizer is the vocab
the fine-tuning checkpoint recorded.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from tokenizers import BertWordPieceTokenizer

from model.config import BertConfig, flag_hint
from model.folders import (
    FINETUNING_RUN,
    MODEL_DIRECTORY,
    check_own_kind,
    folder_kind,
    run_folder_line,
)
from model.run_dir import check_output_dir, checked_vocab, is_finetuned, load_checkpoint
from schemas.manifest import atomic_write_text, new_file_mode
from schemas.vocab import Vocab, bert_normalizer, tokenizer_config_files


def hf_config(cfg: BertConfig, architecture: str = "") -> dict:
    """The `transformers.BertConfig` fields for this model, as `architecture` (by default the
    pre-training class its heads make)."""
    pretraining = "BertForPreTraining" if cfg.next_sentence else "BertForMaskedLM"
    return {
        "architectures": [architecture or pretraining],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }


# Our parameter names -> `BertForPreTraining`'s (the encoder layers apart); `model.hf_import`
# reads the same table the other way.
HF_NAMES = {
    "bert.embeddings.word.weight": "bert.embeddings.word_embeddings.weight",
    "bert.embeddings.position.weight": "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.segment.weight": "bert.embeddings.token_type_embeddings.weight",
    "bert.embeddings.norm.weight": "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.norm.bias": "bert.embeddings.LayerNorm.bias",
    "bert.pooler.weight": "bert.pooler.dense.weight",
    "bert.pooler.bias": "bert.pooler.dense.bias",
    "mlm.dense.weight": "cls.predictions.transform.dense.weight",
    "mlm.dense.bias": "cls.predictions.transform.dense.bias",
    "mlm.norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm.norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm.bias": "cls.predictions.bias",
    "nsp.weight": "cls.seq_relationship.weight",
    "nsp.bias": "cls.seq_relationship.bias",
}
# Inside layer i: ours under `bert.layers.i.`, theirs under `bert.encoder.layer.i.`, each with
# a weight and a bias. The fused query-key-value projection is split apart (`HF_QKV`).
HF_LAYER_NAMES = {
    "attention.out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
HF_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")


def _layer(state: dict, i: int) -> dict[str, torch.Tensor]:
    src, dst = f"bert.layers.{i}.", f"bert.encoder.layer.{i}."
    out = {}
    qkv_w = state[src + "attention.qkv.weight"].chunk(3, dim=0)
    qkv_b = state[src + "attention.qkv.bias"].chunk(3, dim=0)
    for name, w, b in zip(HF_QKV, qkv_w, qkv_b, strict=True):
        out[f"{dst}{name}.weight"] = w
        out[f"{dst}{name}.bias"] = b
    for ours, theirs in HF_LAYER_NAMES.items():
        for p in ("weight", "bias"):
            out[f"{dst}{theirs}.{p}"] = state[f"{src}{ours}.{p}"]
    return out


def _encoder(state: dict, cfg: BertConfig, pooler: bool) -> dict[str, torch.Tensor]:
    """The encoder's parameters under transformers' names (`bert.`), the fused QKV split in
    three; the pooler only if `pooler`."""
    skip = ("mlm.", "nsp.") if pooler else ("mlm.", "nsp.", "bert.pooler.")
    out = {theirs: state[ours] for ours, theirs in HF_NAMES.items() if not ours.startswith(skip)}
    for i in range(cfg.num_layers):
        out.update(_layer(state, i))
    return out


def _detached(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().contiguous() for k, v in tensors.items()}


def hf_state_dict(state: dict[str, torch.Tensor], cfg: BertConfig) -> dict[str, torch.Tensor]:
    """Our parameter names -> `BertForPreTraining`'s; the fused QKV split in three, the tied
    decoder written out (as the embedding matrix) so that any loader finds it. Masked-LM only:
    without the pooler and the next-sentence head."""
    out = _encoder(state, cfg, pooler=cfg.next_sentence)
    heads = ("mlm.", "nsp.") if cfg.next_sentence else ("mlm.",)
    out.update({theirs: state[ours] for ours, theirs in HF_NAMES.items() if ours.startswith(heads)})
    out["cls.predictions.decoder.weight"] = state["bert.embeddings.word.weight"]
    out["cls.predictions.decoder.bias"] = state["mlm.bias"]
    return _detached(out)


# A fine-tuned model by its --task: the transformers class that holds its head, that class's
# name for the head's linear layer, and whether the head reads the pooled [CLS] (and so the
# pooler is exported; transformers' token and span classes have none). GLUE's tasks are the
# rest (`GLUE_CLASS`).
TASK_CLASSES = {
    "ner": ("BertForTokenClassification", "classifier", False),
    "squad": ("BertForQuestionAnswering", "qa_outputs", False),
    "squad2": ("BertForQuestionAnswering", "qa_outputs", False),
    "swag": ("BertForMultipleChoice", "classifier", True),
}
GLUE_CLASS = ("BertForSequenceClassification", "classifier", True)
REGRESSION_TASKS = ("stsb",)  # one score per pair, trained by mean squared error


def task_state_dict(ckpt: dict, cfg: BertConfig) -> dict[str, torch.Tensor]:
    """A fine-tuning checkpoint's weights under the names of its task's transformers class."""
    _, head, pooled = TASK_CLASSES.get(ckpt["config"]["task"], GLUE_CLASS)
    out = _encoder(ckpt["model"], cfg, pooler=pooled)
    out[f"{head}.weight"] = ckpt["model"]["head.weight"]
    out[f"{head}.bias"] = ckpt["model"]["head.bias"]
    return _detached(out)


def task_config(ckpt: dict, cfg: BertConfig) -> dict:
    """The config.json of a fine-tuned model: its task's class, and the head's outputs named
    (`id2label`: the task's labels, as its files write them; `LABEL_i` where the outputs are
    no classes, STS-B's score and SQuAD's start and end)."""
    task, labels = ckpt["config"]["task"], list(ckpt["labels"])
    architecture = TASK_CLASSES.get(task, GLUE_CLASS)[0]
    outputs = ckpt["model"]["head.weight"].shape[0]
    if len(labels) != outputs:
        labels = [f"LABEL_{i}" for i in range(outputs)]
    config = hf_config(cfg, architecture)
    config["finetuning_task"] = task
    config["id2label"] = {str(i): name for i, name in enumerate(labels)}
    config["label2id"] = {name: i for i, name in enumerate(labels)}
    if task not in TASK_CLASSES:
        config["classifier_dropout"] = None  # as fine-tuning: the encoder's dropout
        regression = task in REGRESSION_TASKS
        config["problem_type"] = "regression" if regression else "single_label_classification"
    return config


@dataclass(frozen=True)
class Exported:
    """What an export writes: the weights and config.json, and the tokenizer's vocab, casing
    and longest input."""

    weights: dict[str, torch.Tensor]
    config: dict
    vocab: Vocab
    lowercase: bool
    max_length: int


def exported(ckpt_path: str) -> Exported:
    """A pre-training or fine-tuning checkpoint, read and mapped for export."""
    ckpt = load_checkpoint(ckpt_path, finetuned=True, mmap=True)
    if is_finetuned(ckpt):
        return _finetuned(ckpt_path, ckpt)
    cfg = BertConfig(**ckpt["model_config"])
    vocab = checked_vocab(ckpt_path, ckpt, os.path.join(os.path.dirname(ckpt_path), "vocab.txt"))
    lowercase = bool(ckpt["shard_config"].get("lowercase", True))
    return Exported(
        hf_state_dict(ckpt["model"], cfg), hf_config(cfg), vocab, lowercase, cfg.max_position
    )


def _finetuned(path: str, ckpt: dict) -> Exported:
    encoder = ckpt.get("encoder")
    if not isinstance(encoder, dict):  # fine-tuned by a version that did not record it
        raise ValueError(
            f"{path}: a fine-tuning checkpoint (--task {ckpt['config']['task']}) without the "
            "record of its encoder's shape and vocab that an export needs; fine-tune again and "
            "export the new run's best.pt"
        )
    cfg = BertConfig(**encoder["model_config"])
    vocab = Vocab(tuple(encoder["vocab"]))
    return Exported(
        task_state_dict(ckpt, cfg),
        task_config(ckpt, cfg),
        vocab,
        bool(encoder["lowercase"]),
        cfg.max_position,
    )


# Every file an export writes: the model, and each tokenizer file a loader reads (a stale one
# from another model, tokenizer.json above all, would tokenize with that model's pieces).
EXPORT_FILES = (
    "config.json",
    "model.safetensors",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
OUT_HINT = flag_hint("--out", "DIR")


def own_temporary(name: str) -> bool:
    """A file an export writes before renaming it onto one of EXPORT_FILES (`NAME.tmp`, or
    `atomic_write`'s `NAME.tmp-XXXX`), left only by an export killed while writing it."""
    return any(name == f"{f}.tmp" or name.startswith(f"{f}.tmp-") for f in EXPORT_FILES)


def export(ckpt_path: str, out_dir: str, overwrite: bool = False) -> str:
    """Write the Hugging Face directory for a checkpoint; returns `out_dir`. Everything is
    checked before the first file is written."""
    check_ckpt(ckpt_path)
    check_output_dir(out_dir, "--out")
    check_out(out_dir, ckpt_path, overwrite)
    model = exported(ckpt_path)
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):  # an earlier export's, killed before it could remove it
        if own_temporary(name):
            os.unlink(os.path.join(out_dir, name))
    weights = os.path.join(out_dir, "model.safetensors")
    try:
        save_file(model.weights, weights + ".tmp", metadata={"format": "pt"})
        os.chmod(weights + ".tmp", new_file_mode())  # safetensors writes 0600
        os.replace(weights + ".tmp", weights)
    except BaseException as e:  # an interrupt too: "run the same command again" must then work
        if os.path.exists(weights + ".tmp"):
            os.unlink(weights + ".tmp")
        refused = (
            re.search(r"\(os error (\d+)\)", str(e)) if isinstance(e, SafetensorError) else None
        )
        if refused:  # safetensors' writer: the disk's refusal (full, read-only) as its OSError
            code = int(refused.group(1))
            raise OSError(code, os.strerror(code), weights) from None
        raise
    for name, text in tokenizer_files(model.vocab, model.lowercase, model.max_length).items():
        atomic_write_text(os.path.join(out_dir, name), text)
    atomic_write_text(os.path.join(out_dir, "config.json"), _json(model.config))
    return out_dir


def tokenizer_files(vocab: Vocab, lowercase: bool, max_length: int) -> dict[str, str]:
    """vocab.txt, and the tokenizer.json, tokenizer_config.json and special_tokens_map.json
    built from it: the same WordPiece tokenizer whichever of them a loader reads."""
    wordpiece = BertWordPieceTokenizer(dict(vocab.index), **bert_normalizer(lowercase))
    return {
        "vocab.txt": vocab.to_text(),
        "tokenizer.json": wordpiece.to_str() + "\n",
        **tokenizer_config_files(lowercase, max_length),
    }


def check_ckpt(path: str) -> None:
    """A --ckpt that is no file, said for what it is: missing (a fresh clone, not "damaged"), a
    run folder (its checkpoint named), or a folder of another kind."""
    if os.path.isfile(path):
        return
    found = folder_kind(path)
    if line := run_folder_line(path, found):
        raise FileNotFoundError(line)
    if found and found[0] == FINETUNING_RUN:
        raise FileNotFoundError(
            f"--ckpt {path} is a fine-tuning run folder; pass its checkpoint of the best dev "
            f"score, {flag_hint('--ckpt', os.path.join(path, 'best.pt'))} (model.pt: the last)"
        )
    if os.path.isdir(path):
        what = f"holds {found[0]} ({found[1]})" if found else "is a folder"
        raise FileNotFoundError(
            f"--ckpt {path} {what}; export takes a checkpoint file, a pre-training run's "
            f"last.pt or a fine-tuning run's best.pt, {flag_hint('--ckpt', 'RUN/last.pt')}"
        )
    raise FileNotFoundError(
        f"no checkpoint at {path}; `make pretrain` writes one (or pass CKPT=...)"
    )


def check_out(out_dir: str, ckpt_path: str, overwrite: bool) -> None:
    """Refuse an --out that is the checkpoint's own folder, holds a shard set or a run, or
    (without --overwrite) files an export does not write, before any file is written."""
    if not os.path.isdir(out_dir):
        return
    here = os.path.dirname(os.path.abspath(ckpt_path))
    if os.path.samefile(out_dir, here):
        raise ValueError(
            f"--out {out_dir} is the folder of --ckpt {ckpt_path}; an export is a directory of "
            f"its own: choose another {OUT_HINT}"
        )
    check_own_kind(out_dir, "--out", MODEL_DIRECTORY, OUT_HINT)
    names = os.listdir(out_dir)
    foreign = sorted(n for n in names if n not in EXPORT_FILES and not own_temporary(n))
    if foreign and not overwrite:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise ValueError(
            f"--out {out_dir} holds files an export does not write ({shown}); choose a new or "
            f"empty {OUT_HINT}, or pass {flag_hint('--overwrite')} to export beside them"
        )


def _json(obj: dict) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
