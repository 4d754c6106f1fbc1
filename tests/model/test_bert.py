"""The BERT model: sizes, shapes, masking, tying, loss at init, learning one batch."""

from __future__ import annotations

import math

import pytest
import torch

from model.bert import BertForPreTraining, count_parameters, pretraining_loss
from model.config import PRESETS, BertConfig, preset
from model.training import adamw


def small_config(**overrides) -> BertConfig:
    fields = dict(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    return BertConfig(**{**fields, **overrides})


def random_batch(cfg: BertConfig, b: int = 4, t: int = 16, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (b, t), generator=g)
    lengths = torch.tensor([t, t - 3, t - 8, 5])[:b]
    mask = (torch.arange(t) < lengths[:, None]).long()
    ids = ids * mask  # [PAD] = 0 after each row's end
    ids[:, 0] = 2
    types = ((torch.arange(t) >= 3) & mask.bool()).long()
    positions = torch.tensor([1, 4, t + 2, 2 * t + 1, 3 * t + 3])
    labels = torch.randint(5, cfg.vocab_size, (len(positions),), generator=g)
    nsp = torch.tensor([0, 1, 0, 1])[:b]
    return dict(ids=ids, types=types, mask=mask, positions=positions, labels=labels, nsp=nsp)


@pytest.mark.parametrize(
    "name,expected", [("tiny", (2, 128, 2)), ("base", (12, 768, 12)), ("large", (24, 1024, 16))]
)
def test_presets_have_the_papers_shapes(name, expected):
    cfg = preset(name, vocab_size=30522)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads) == expected
    assert cfg.intermediate_size == 4 * cfg.hidden_size and cfg.max_position == 512


@pytest.mark.parametrize("name,millions", [("base", 110.1), ("large", 336.2)])
def test_parameter_counts_match_the_published_sizes(name, millions):
    with torch.device("meta"):
        model = BertForPreTraining(preset(name, vocab_size=30522))
    assert count_parameters(model) / 1e6 == pytest.approx(millions, abs=0.05)


def test_every_preset_builds_and_refuses_bad_shapes():
    assert set(PRESETS) == {"tiny", "mini", "small", "medium", "base", "large"}
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("huge", 100)
    with pytest.raises(ValueError, match="does not divide"):
        BertConfig(vocab_size=100, hidden_size=30, num_heads=4)


def test_output_shapes_masked_and_full():
    cfg = small_config()
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(0)).eval()
    b = random_batch(cfg)
    mlm, nsp = model(b["ids"], b["types"], b["mask"], b["positions"])
    assert mlm.shape == (5, cfg.vocab_size) and nsp.shape == (4, 2)
    full, nsp_full = model(b["ids"], b["types"], b["mask"])
    assert full.shape == (4, 16, cfg.vocab_size)
    # The head at the masked positions only is the full head gathered there.
    torch.testing.assert_close(mlm, full.flatten(0, 1)[b["positions"]])
    torch.testing.assert_close(nsp, nsp_full)


def test_padding_changes_nothing_for_real_tokens():
    cfg = small_config()
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(1)).eval()
    b = random_batch(cfg)
    row = slice(3, 4)  # length 5 within 16
    padded, _ = model(b["ids"][row], b["types"][row], b["mask"][row])
    short, _ = model(b["ids"][row, :5], b["types"][row, :5], b["mask"][row, :5])
    torch.testing.assert_close(padded[:, :5], short, atol=1e-5, rtol=1e-5)


def test_decoder_is_tied_to_the_token_embeddings():
    cfg = small_config()
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(2)).eval()
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)
    b = random_batch(cfg)
    before, _ = model(b["ids"], b["types"], b["mask"], b["positions"])
    with torch.no_grad():
        model.bert.embeddings.word.weight[7] += 1.0
    after, _ = model(b["ids"], b["types"], b["mask"], b["positions"])
    assert not torch.allclose(before[:, 7], after[:, 7])


def test_initialisation_is_seeded_and_pad_row_zero():
    cfg = small_config()
    a = BertForPreTraining(cfg, torch.Generator().manual_seed(3))
    b = BertForPreTraining(cfg, torch.Generator().manual_seed(3))
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), n
    assert torch.count_nonzero(a.bert.embeddings.word.weight[cfg.pad_id]) == 0
    std = a.bert.layers[0].ffn_in.weight.std().item()
    assert std == pytest.approx(cfg.initializer_range, rel=0.15)


def test_loss_at_init_is_near_uniform_guess():
    cfg = small_config(vocab_size=1000)
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(4)).eval()
    b = random_batch(cfg)
    mlm, nsp = model(b["ids"], b["types"], b["mask"], b["positions"])
    loss, stats = pretraining_loss(mlm, nsp, b["labels"], b["nsp"])
    assert loss.item() == pytest.approx(math.log(1000) + math.log(2), abs=0.15)
    assert stats[3].item() == 5 and stats[5].item() == 4  # masked positions, sequences


def test_overfits_one_tiny_batch():
    torch.manual_seed(0)
    cfg = small_config(dropout=0.0, attention_dropout=0.0)
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(5))
    b = random_batch(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        mlm, nsp = model(b["ids"], b["types"], b["mask"], b["positions"])
        loss, stats = pretraining_loss(mlm, nsp, b["labels"], b["nsp"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    assert stats[2].item() == 5 and stats[4].item() == 4  # every prediction right


def test_no_weight_decay_on_biases_and_layer_norm():
    model = BertForPreTraining(small_config())
    opt = adamw(model, 1e-3, weight_decay=0.01, fused=True)  # as pre-training builds it
    decay, no_decay = (set(map(id, g["params"])) for g in opt.param_groups)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    for name, p in model.named_parameters():
        expect_decay = not (name.endswith("bias") or "norm" in name)
        assert (id(p) in decay) == expect_decay, name
        assert (id(p) in no_decay) != expect_decay, name
