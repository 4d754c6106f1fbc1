"""The pre-trained encoder under one task head: its weights and tokenizer read from a
pre-training checkpoint (vocab.txt beside it, checked to be the one it was trained with) or a
Hugging Face BERT directory (`model.hf_import`), checked against the run's sequence length."""

from __future__ import annotations

import os

import torch
from tokenizers import BertWordPieceTokenizer
from torch import nn

from model.bert import BertModel, init_weights
from model.config import BertConfig, flag_hint
from model.finetune.config import FinetuneConfig
from model.finetune.features import load_tokenizer
from model.folders import FINETUNING_RUN, folder_kind, run_folder_line
from model.hf_import import CONFIG, LAYOUT, TOKENIZER, is_hf_directory, load_pretrained
from model.run_dir import checked_vocab, load_checkpoint
from schemas.vocab import Vocab


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
    """The pre-trained weights (as a checkpoint's fields, the vocab's pieces added to its
    `vocab`) and their tokenizer, checked to fit each other and --max-seq-length."""
    ckpt, vocab = _read_weights(cfg)
    lowercase = bool(ckpt["shard_config"].get("lowercase", True))
    if isinstance(vocab, Vocab):  # a tokenizer.json's pieces: no vocab.txt to read
        tok = BertWordPieceTokenizer(dict(vocab.index), lowercase=lowercase)
    else:
        tok = load_tokenizer(vocab, lowercase)
        vocab = Vocab.load(vocab)
    ckpt["vocab"] = {**ckpt["vocab"], "pieces": list(vocab.pieces)}
    positions = ckpt["model_config"]["max_position"]
    if cfg.max_seq_length > positions:
        raise ValueError(
            f"{cfg.ckpt}: the model has {positions} positions, fewer than --max-seq-length "
            f"{cfg.max_seq_length}; lower it ({flag_hint('--max-seq-length', str(positions))})"
        )
    return ckpt, tok


def encoder_record(ckpt: dict) -> dict:
    """What a fine-tuning checkpoint keeps of the encoder it started from, so that `bert-model
    export` can write the fine-tuned model with its tokenizer (`model.export`): the model's
    shape, the vocab's pieces and the casing (of a checkpoint `read_encoder` returned)."""
    return {
        "model_config": dict(ckpt["model_config"]),
        "vocab": list(ckpt["vocab"]["pieces"]),
        "lowercase": bool(ckpt["shard_config"].get("lowercase", True)),
    }


def _read_weights(cfg: FinetuneConfig) -> tuple[dict, str | Vocab]:
    """The pre-trained weights and their vocab: the path of the vocab.txt beside a
    pre-training checkpoint file (checked to be the one it was trained with), or a Hugging Face
    BERT directory's vocab.txt, or the pieces of its tokenizer.json where it has none."""
    if is_hf_directory(cfg.ckpt):
        imported = load_pretrained(cfg.ckpt, cfg.seed)
        said = imported.report(parts=("pooler",))  # the heads of pre-training are not used here
        if said:
            print(f"note: {said}")
        vocab = imported.vocab if imported.vocab_file.endswith(TOKENIZER) else imported.vocab_file
        return imported.as_checkpoint(), vocab
    if os.path.isdir(cfg.ckpt):
        raise FileNotFoundError(_not_a_checkpoint_folder(cfg.ckpt))
    if not os.path.exists(cfg.ckpt):
        raise FileNotFoundError(
            f"no checkpoint at {cfg.ckpt}; `make pretrain` writes one, or pass "
            f"{flag_hint('--ckpt', 'PATH')}"
        )
    ckpt = load_checkpoint(cfg.ckpt, mmap=True)
    vocab = os.path.join(os.path.dirname(cfg.ckpt) or ".", "vocab.txt")
    checked_vocab(cfg.ckpt, ckpt, vocab)
    return ckpt, vocab


def _not_a_checkpoint_folder(path: str) -> str:
    """What a --ckpt folder without config.json is, and what to pass instead."""
    found = folder_kind(path)
    if line := run_folder_line(path, found):
        return line
    if found and found[0] == FINETUNING_RUN:
        return (
            f"--ckpt {path} is a fine-tuning run folder ({found[1]}); pass the pre-training "
            f"checkpoint it started from (RUN/last.pt) or a Hugging Face BERT directory"
        )
    what = f"holds {found[0]} ({found[1]})" if found else f"is a directory without {CONFIG}"
    return (
        f"--ckpt {path} {what}; --ckpt takes a pre-training checkpoint (RUN/last.pt) or a Hugging "
        f"Face BERT directory ({LAYOUT})"
    )
