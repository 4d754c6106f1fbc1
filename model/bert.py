"""BERT, as in the paper, in one file read bottom-up.

Embeddings (token + segment + learned position) -> post-LayerNorm encoder layers (fused
`scaled_dot_product_attention` with the padding mask, GELU feed-forward) -> heads: the masked-LM
decoder, tied to the token embeddings and evaluated only at the masked positions, and the
next-sentence classifier on the pooled `[CLS]`. Every weight has its counterpart in Hugging Face's
`BertForPreTraining` (`model.export` writes that mapping).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from model.config import BertConfig


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_id)
        self.position = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.segment = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = self.position.weight[: input_ids.size(1)]
        x = self.word(input_ids) + positions + self.segment(token_type_ids)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention; query, key and value come from one fused projection."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_dropout = cfg.attention_dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        p = self.attention_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.out(y.transpose(1, 2).reshape(b, t, h))


class Layer(nn.Module):
    """One post-LN encoder layer: x = LN(x + attention(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, mask)))
        return self.ffn_norm(x + self.dropout(self.ffn_out(F.gelu(self.ffn_in(x)))))


class BertModel(nn.Module):
    """The encoder: returns every position's hidden state and the pooled `[CLS]`."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (batch, 1, 1, keys), True where a key is a real token: padding is never attended to.
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


class MaskedLMHead(nn.Module):
    """Dense + GELU + LayerNorm, then the decoder whose weight is the token embedding matrix."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(F.gelu(self.dense(h))), embedding, self.bias)


class BertForPreTraining(nn.Module):
    """Encoder + tied masked-LM head + next-sentence head."""

    def __init__(self, cfg: BertConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        self.bert = BertModel(cfg)
        self.mlm = MaskedLMHead(cfg)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        self.apply(partial(init_weights, std=cfg.initializer_range, generator=generator))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MLM logits at `mlm_positions` (flat indices into batch x length), shape (M, vocab),
        or at every position, shape (batch, length, vocab), when none are given; NSP logits
        (batch, 2), class 1 = B is a random next sentence."""
        h, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if mlm_positions is not None:
            h = h.flatten(0, 1).index_select(0, mlm_positions)
        return self.mlm(h, self.bert.embeddings.word.weight), self.nsp(pooled)


def init_weights(module: nn.Module, std: float, generator: torch.Generator | None) -> None:
    """BERT's initialisation: N(0, std) weights, zero biases, identity LayerNorm."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, 0.0, std, generator=generator)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        with torch.no_grad():
            module.weight[module.padding_idx].zero_()
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def pretraining_loss(
    mlm_logits: torch.Tensor,
    nsp_logits: torch.Tensor,
    mlm_labels: torch.Tensor,
    nsp_labels: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss = MLM cross-entropy (mean over masked positions) + NSP cross-entropy.

    Also returns, detached and without a host sync, [mlm_loss, nsp_loss, mlm_correct,
    mlm_count, nsp_correct, nsp_count] for logging.
    """
    mlm = F.cross_entropy(mlm_logits.float(), mlm_labels)
    nsp = F.cross_entropy(nsp_logits.float(), nsp_labels)
    with torch.no_grad():
        stats = torch.stack(
            [
                mlm.detach(),
                nsp.detach(),
                (mlm_logits.argmax(-1) == mlm_labels).sum().float(),
                torch.tensor(float(mlm_labels.numel()), device=mlm.device),
                (nsp_logits.argmax(-1) == nsp_labels).sum().float(),
                torch.tensor(float(nsp_labels.numel()), device=mlm.device),
            ]
        )
    return mlm + nsp, stats


def count_parameters(model: nn.Module, embeddings: bool = True) -> int:
    """Parameters of a model; without the embedding tables when `embeddings` is False."""
    skip = set()
    if not embeddings:
        skip = {
            id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()
        }
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def training_flops(cfg: BertConfig, tokens: int, length: int, masked: int) -> float:
    """Forward + backward FLOPs of one step: 6 x encoder weights per token, attention scores
    (12 x layers x hidden x length per token) and the MLM head at the masked positions only."""
    h, f = cfg.hidden_size, cfg.intermediate_size
    per_layer = 4 * h * h + 2 * h * f
    encoder = 6 * cfg.num_layers * per_layer * tokens
    attention = 12 * cfg.num_layers * h * length * tokens
    head = 6 * (h * h + h * cfg.vocab_size) * masked
    return float(encoder + attention + head)
