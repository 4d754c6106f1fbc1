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
"""

from __future__ import annotations

import json
import os
import re

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from tokenizers import BertWordPieceTokenizer

from model.config import BertConfig, flag_hint
from model.folders import MODEL_DIRECTORY, check_own_kind, folder_kind, run_folder_line
from model.run_dir import check_output_dir, checked_vocab, load_checkpoint
from schemas.manifest import atomic_write_text, new_file_mode
from schemas.vocab import Vocab, bert_normalizer, tokenizer_config_files


def hf_config(cfg: BertConfig) -> dict:
    """The `transformers.BertConfig` fields for this model."""
    return {
        "architectures": ["BertForPreTraining" if cfg.next_sentence else "BertForMaskedLM"],
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


def hf_state_dict(state: dict[str, torch.Tensor], cfg: BertConfig) -> dict[str, torch.Tensor]:
    """Our parameter names -> `BertForPreTraining`'s; the fused QKV split in three, the tied
    decoder written out (as the embedding matrix) so that any loader finds it. Masked-LM only:
    without the pooler and the next-sentence head."""
    names = HF_NAMES
    if not cfg.next_sentence:
        names = {k: v for k, v in HF_NAMES.items() if not k.startswith(("nsp.", "bert.pooler."))}
    out = {theirs: state[ours] for ours, theirs in names.items()}
    for i in range(cfg.num_layers):
        out.update(_layer(state, i))
    out["cls.predictions.decoder.weight"] = state["bert.embeddings.word.weight"]
    out["cls.predictions.decoder.bias"] = state["mlm.bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


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
    ckpt = load_checkpoint(ckpt_path)
    cfg = BertConfig(**ckpt["model_config"])
    vocab = checked_vocab(ckpt_path, ckpt, os.path.join(os.path.dirname(ckpt_path), "vocab.txt"))
    lowercase = bool(ckpt["shard_config"].get("lowercase", True))
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):  # an earlier export's, killed before it could remove it
        if own_temporary(name):
            os.unlink(os.path.join(out_dir, name))
    weights = os.path.join(out_dir, "model.safetensors")
    try:
        save_file(hf_state_dict(ckpt["model"], cfg), weights + ".tmp", metadata={"format": "pt"})
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
    for name, text in tokenizer_files(vocab, lowercase, cfg.max_position).items():
        atomic_write_text(os.path.join(out_dir, name), text)
    atomic_write_text(os.path.join(out_dir, "config.json"), _json(hf_config(cfg)))
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
    if os.path.isdir(path):
        what = f"holds {found[0]} ({found[1]})" if found else "is a folder"
        raise FileNotFoundError(
            f"--ckpt {path} {what}; export takes a pre-training checkpoint, "
            f"{flag_hint('--ckpt', 'RUN/last.pt')}"
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
