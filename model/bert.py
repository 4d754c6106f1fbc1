"""BERT, as in the paper, in one file read bottom-up.

Embeddings (token + segment + learned position) -> post-LayerNorm encoder layers (fused
`scaled_dot_product_attention` with the padding mask, GELU feed-forward) -> heads: the masked-LM
decoder, tied to the token embeddings and evaluated only at the masked positions, and the
next-sentence classifier on the pooled `[CLS]`. Every weight has its counterpart in Hugging
Face's `BertForPreTraining` (`model.export` writes that mapping).

Packed batches (`model.packing`) hold several rows per sequence: each token's `row_ids` says
which row it belongs to, its `position_ids` count from its row's start, and attention is
block-diagonal, one block per row, by one of three routes (`ATTENTION_ROUTES`): SDPA with a
dense block mask (every device), `flex_attention` with a document mask, or the variable-length
flash kernel of `torch.nn.attention.varlen` (CUDA only); the last two skip the masked blocks.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from model.config import BertConfig


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_id)
        self.position = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.segment = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if position_ids is None:
            positions = self.position.weight[: input_ids.size(1)]
        else:  # packed rows: each counts from its own start
            positions = self.position(position_ids)
        x = self.word(input_ids) + positions + self.segment(token_type_ids)
        return self.dropout(self.norm(x))


# How a packed batch attends, block-diagonally (one block per row):
# sdpa: scaled_dot_product_attention with a dense (batch, 1, length, length) mask; any device.
# flex: flex_attention with a document mask; skips masked blocks (fast when compiled).
# varlen: the variable-length flash kernel over the flattened tokens; CUDA only, skips every
#   masked block.
# auto: varlen on CUDA in bf16/fp16 (flex in fp32, or if this torch lacks varlen), sdpa on
#   the CPU; and sdpa wherever attention dropout is active, which neither kernel offers.
ATTENTION_ROUTES = ("auto", "sdpa", "flex", "varlen")


class Varlen(NamedTuple):
    """The flattened layout of a packed batch: each row (and each run of padding) one sequence."""

    cu_seqlens: torch.Tensor  # int32, sequence starts in the flattened tokens, then the total
    max_length: int


def _has_varlen() -> bool:
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


def attention_route(route: str, device: torch.device, dropout: bool, half: bool = True) -> str:
    """The route a packed batch takes (see `ATTENTION_ROUTES`); `half`: attention computes in
    bf16 or fp16 (the flash kernel takes nothing else)."""
    if route not in ATTENTION_ROUTES:
        raise ValueError(f"unknown attention route {route!r}; one of {', '.join(ATTENTION_ROUTES)}")
    if route == "auto":
        if device.type != "cuda" or dropout:
            return "sdpa"
        return "varlen" if half and _has_varlen() else "flex"
    if route == "varlen" and device.type != "cuda":
        raise ValueError("the varlen attention route needs a CUDA device")
    if route != "sdpa" and dropout:
        raise ValueError(f"the {route} attention route has no attention dropout; use sdpa")
    return route


def block_mask(row_ids: torch.Tensor, route: str):
    """What `attend` takes for a packed batch: a token attends the tokens of its own row (and
    padding only padding, so that no softmax row is empty)."""
    b, t = row_ids.shape
    if route == "sdpa":
        return row_ids[:, None, :, None] == row_ids[:, None, None, :]
    if route == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        def same_row(batch, head, q, k):
            return row_ids[batch, q] == row_ids[batch, k]

        return create_block_mask(same_row, b, None, t, t, device=row_ids.device)
    flat = row_ids.reshape(-1)
    starts = torch.ones_like(flat, dtype=torch.bool)
    starts[1:] = flat[1:] != flat[:-1]
    starts[::t] = True  # a sequence's padding never runs on into the next sequence
    total = torch.tensor([flat.numel()], device=flat.device)
    cu = torch.cat([starts.nonzero().flatten(), total]).to(torch.int32)
    return Varlen(cu, t)


def attend(q, k, v, mask, dropout: float) -> torch.Tensor:
    """Attention of (batch, heads, length, head size) q, k, v under `mask`: a bool tensor
    (SDPA), a flex `BlockMask`, or a `Varlen` layout."""
    if isinstance(mask, Varlen):
        from torch.nn.attention.varlen import varlen_attn

        b, h, t, d = q.shape
        flat = [x.transpose(1, 2).reshape(b * t, h, d) for x in (q, k, v)]
        m = mask.max_length
        y = varlen_attn(*flat, mask.cu_seqlens, mask.cu_seqlens, m, m)
        return y.reshape(b, t, h, d).transpose(1, 2)
    if mask is not None and not isinstance(mask, torch.Tensor):
        from torch.nn.attention.flex_attention import flex_attention

        return flex_attention(q, k, v, block_mask=mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


class SelfAttention(nn.Module):
    """Multi-head self-attention; query, key and value come from one fused projection."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_dropout = cfg.attention_dropout

    def forward(self, x: torch.Tensor, mask) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        p = self.attention_dropout if self.training else 0.0
        y = attend(q, k, v, mask, p)
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

    def forward(self, x: torch.Tensor, mask) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, mask)))
        return self.ffn_norm(x + self.dropout(self.ffn_out(F.gelu(self.ffn_in(x)))))


class BertModel(nn.Module):
    """The encoder: returns every position's hidden state and the pooled `[CLS]` (of each row
    of a packed batch, at `cls_positions`, flat indices into batch x length)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_route = "auto"  # of packed batches (`ATTENTION_ROUTES`)
        # --checkpoint-activations: training keeps each layer's input alone and computes the
        # layer again in the backward pass (its dropout draws replayed): the same results
        self.checkpoint_layers = False

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        row_ids: torch.Tensor | None = None,
        cls_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if row_ids is not None:  # packed: block-diagonal, one block per row
            dropout = self.training and self.cfg.attention_dropout > 0
            device = input_ids.device
            half = torch.is_autocast_enabled(device.type) or self.pooler.weight.dtype in (
                torch.bfloat16,
                torch.float16,
            )
            route = attention_route(self.attention_route, device, dropout, half)
            mask = block_mask(row_ids, route)
        elif attention_mask is not None:
            # (batch, 1, 1, keys), True where a key is a real token: padding is never attended.
            mask = attention_mask.bool()[:, None, None, :]
        else:
            mask = None
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        recompute = self.checkpoint_layers and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            x = checkpoint(layer, x, mask, use_reentrant=False) if recompute else layer(x, mask)
        cls = x[:, 0] if cls_positions is None else x.flatten(0, 1).index_select(0, cls_positions)
        return x, torch.tanh(self.pooler(cls))


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
    """Encoder + tied masked-LM head + next-sentence head; without `cfg.next_sentence`, no
    next-sentence head, and the pooler (kept, initialised, for fine-tuning to start from) is
    frozen: nothing trains it, and DDP must not wait for its gradients."""

    def __init__(self, cfg: BertConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        self.bert = BertModel(cfg)
        self.mlm = MaskedLMHead(cfg)
        self.nsp = nn.Linear(cfg.hidden_size, 2) if cfg.next_sentence else None
        self.apply(partial(init_weights, std=cfg.initializer_range, generator=generator))
        if not cfg.next_sentence:
            self.bert.pooler.requires_grad_(False)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        row_ids: torch.Tensor | None = None,
        cls_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MLM logits at `mlm_positions` (flat indices into batch x length), shape (M, vocab),
        or at every position, shape (batch, length, vocab), when none are given; NSP logits
        (batch, 2), class 1 = B is a random next sentence, or None without the NSP head; of a
        packed batch (`position_ids`, `row_ids`, `cls_positions`, as `model.packing.pack`
        makes them), one per row."""
        packed = (position_ids, row_ids, cls_positions)
        h, pooled = self.bert(input_ids, token_type_ids, attention_mask, *packed)
        if mlm_positions is not None:
            h = h.flatten(0, 1).index_select(0, mlm_positions)
        nsp = None if self.nsp is None else self.nsp(pooled)
        return self.mlm(h, self.bert.embeddings.word.weight), nsp


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
    nsp_logits: torch.Tensor | None,
    mlm_labels: torch.Tensor,
    nsp_labels: torch.Tensor,
    reduction: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss = MLM cross-entropy (mean over masked positions) + NSP cross-entropy (none
    without NSP logits: masked-LM only); `reduction="sum"`: each summed instead, over the
    positions and the rows (the held-out evaluation adds batches up).

    Also returns, detached and without a host sync, [mlm_loss, nsp_loss, mlm_correct,
    mlm_count, nsp_correct, rows] for logging (NSP's loss and correct 0 without NSP logits).
    """
    mlm = F.cross_entropy(mlm_logits.float(), mlm_labels, reduction=reduction)
    zero = torch.zeros((), device=mlm.device)
    nsp = zero
    if nsp_logits is not None:
        nsp = F.cross_entropy(nsp_logits.float(), nsp_labels, reduction=reduction)
    with torch.no_grad():
        nsp_ok = zero if nsp_logits is None else (nsp_logits.argmax(-1) == nsp_labels).sum()
        stats = torch.stack(
            [
                mlm.detach(),
                nsp.detach(),
                (mlm_logits.argmax(-1) == mlm_labels).sum().float(),
                torch.tensor(float(mlm_labels.numel()), device=mlm.device),
                nsp_ok.float(),
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
