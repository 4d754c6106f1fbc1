"""The pre-trained encoder under one task head: its weights and tokenizer read from a
pre-training checkpoint (vocab.txt beside it) or a Hugging Face BERT directory
(`model.hf_import`), checked against each other and the run's sequence length."""

from __future__ import annotations

import os

import torch
from tokenizers import BertWordPieceTokenizer
from torch import nn

from model.bert import BertModel, init_weights
from model.config import BertConfig, flag_hint
from model.finetune.config import FinetuneConfig
from model.finetune.features import load_tokenizer
from model.hf_import import is_hf_directory, load_pretrained
from model.run_dir import load_checkpoint


class TaskModel(nn.Module):
    """The pre-trained encoder and one linear head, on the pooled `[CLS]` (`pooled`) or on every
    position, with dropout before it (`dropout`) or none."""

    def __init__(
        self,
        cfg: BertConfig,
        num_labels: int,
        generator: torch.Generator,
        pooled: bool = True,
        dropout: bool = True,
    ):
        super().__init__()
        self.pooled = pooled
        self.bert = BertModel(cfg)
        self.dropout = nn.Dropout(cfg.dropout) if dropout else nn.Identity()
        self.head = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self.head, cfg.initializer_range, generator)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h, pooled = self.bert(ids, types, mask)
        return self.head(self.dropout(pooled if self.pooled else h))


def build_model(
    ckpt: dict, num_labels: int, seed: int, pooled: bool = True, dropout: bool = True
) -> TaskModel:
    """The task model with the checkpoint's encoder weights."""
    model_cfg = BertConfig(**ckpt["model_config"])
    generator = torch.Generator().manual_seed(seed)
    model = TaskModel(model_cfg, num_labels, generator, pooled, dropout)
    encoder = {k[len("bert.") :]: v for k, v in ckpt["model"].items() if k.startswith("bert.")}
    model.bert.load_state_dict(encoder)
    return model


def read_encoder(cfg: FinetuneConfig) -> tuple[dict, BertWordPieceTokenizer]:
    """The pre-trained weights (as a checkpoint's fields) and their tokenizer, checked to fit
    each other and --max-seq-length."""
    ckpt, vocab_path = _read_weights(cfg)
    tok = load_tokenizer(vocab_path, bool(ckpt["shard_config"].get("lowercase", True)))
    if tok.get_vocab_size() != ckpt["vocab"]["size"]:
        raise ValueError(
            f"{vocab_path} has {tok.get_vocab_size()} pieces but the checkpoint was trained "
            f"with {ckpt['vocab']['size']}; put the run's own vocab.txt beside the checkpoint"
        )
    positions = ckpt["model_config"]["max_position"]
    if cfg.max_seq_length > positions:
        raise ValueError(
            f"{cfg.ckpt}: the model has {positions} positions, fewer than --max-seq-length "
            f"{cfg.max_seq_length}; lower it ({flag_hint('--max-seq-length', str(positions))})"
        )
    return ckpt, tok


def _read_weights(cfg: FinetuneConfig) -> tuple[dict, str]:
    """The pre-trained weights and the path of their vocab.txt: a pre-training checkpoint
    file, or a Hugging Face BERT directory."""
    if is_hf_directory(cfg.ckpt):
        imported = load_pretrained(cfg.ckpt, cfg.seed)
        said = imported.report(parts=("pooler",))  # the heads of pre-training are not used here
        if said:
            print(f"note: {said}")
        return imported.as_checkpoint(), os.path.join(cfg.ckpt, "vocab.txt")
    if os.path.isdir(cfg.ckpt):
        raise FileNotFoundError(
            f"{cfg.ckpt} is a directory without config.json; --ckpt takes a pre-training "
            "checkpoint (RUN/last.pt) or a Hugging Face BERT directory (config.json, "
            "model.safetensors or pytorch_model.bin, vocab.txt)"
        )
    if not os.path.exists(cfg.ckpt):
        raise FileNotFoundError(
            f"no checkpoint at {cfg.ckpt}; `make pretrain` writes one, or pass "
            f"{flag_hint('--ckpt', 'PATH')}"
        )
    return load_checkpoint(cfg.ckpt), os.path.join(os.path.dirname(cfg.ckpt) or ".", "vocab.txt")
