"""Packing: the plan and its filling (pure), packed batches from the loader (every row once,
a pure function of seed, epoch and position, resumable), and the packed forward pass, which
gives every row the MLM and NSP logits of the unpacked one, by every attention route the CPU
runs (flex attention compiled: tests/model/test_gpu_paths.py, with the suite's other inductor
compilations)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model import packing
from model.batches import batches
from model.bert import BertForPreTraining, attention_route, block_mask
from model.config import preset
from model.data import LoaderConfig, PretrainingData, open_shards
from model.pretrain import model_config
from model.training import model_inputs, packed_inputs


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=300),
    st.integers(64, 80),
    st.integers(0, 2**32 - 1),
)
def test_plan_packs_every_row_once_within_capacity(lengths, capacity, seed):
    lengths = np.array(lengths)
    p = packing.plan(lengths, capacity)
    assert sorted(p.slots.tolist()) == sorted(lengths.tolist())  # every row once
    assert p.sizes.min() >= 1 and p.sizes.sum() == len(lengths)
    per_pack = np.add.reduceat(p.slots, np.cumsum(p.sizes) - p.sizes)
    assert per_pack.max() <= capacity
    # Best fit never leaves two packs that would fit in one.
    two_smallest = np.sort(per_pack)[:2]
    assert len(per_pack) == 1 or two_smallest.sum() > capacity
    # The plan depends on the lengths alone, not on their order.
    shuffled = np.random.default_rng(seed).permutation(lengths)
    q = packing.plan(shuffled, capacity)
    assert np.array_equal(p.slots, q.slots) and np.array_equal(p.sizes, q.sizes)
    # Filling it: a permutation of the rows whose lengths are the plan's slots.
    order = np.random.default_rng(seed).permutation(len(lengths))
    rows = packing.assign(lengths, p, order)
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    assert np.array_equal(lengths[rows], p.slots)


def test_plan_by_hand():
    p = packing.plan(np.array([5, 3, 2, 8, 1, 1]), 8)
    packs = np.split(p.slots, np.cumsum(p.sizes)[:-1])  # 3 fills the room 5 leaves exactly
    assert sorted(sorted(x.tolist()) for x in packs) == [[1, 1, 2], [3, 5], [8]]
    with pytest.raises(ValueError, match=r"lie in \[1, 8\]"):
        packing.plan(np.array([9]), 8)


def test_ties_among_equal_lengths_follow_the_order():
    lengths = np.array([4, 4, 4, 4])
    p = packing.plan(lengths, 8)
    assert packing.assign(lengths, p, np.array([0, 1, 2, 3])).tolist() == [0, 1, 2, 3]
    assert packing.assign(lengths, p, np.array([3, 1, 0, 2])).tolist() == [3, 1, 0, 2]


def _rows(lengths: list[int], vocab: int, seed: int = 0):
    """Padded rows as the loader collates them: ids, labels (-1: unmasked), B starts, NSP."""
    rng = np.random.default_rng(seed)
    n, t = len(lengths), max(lengths)
    ids = np.zeros((n, t), np.int64)
    labels = np.full((n, t), -1, np.int64)
    seg_b = np.zeros(n, np.int64)
    for i, length in enumerate(lengths):
        ids[i, :length] = rng.integers(5, vocab, length)
        ids[i, 0] = 2  # [CLS]
        seg_b[i] = rng.integers(1, length + 1)
        masked = rng.random(length) < 0.3
        labels[i, :length][masked] = rng.integers(5, vocab, masked.sum())
    return ids, labels, np.array(lengths), seg_b, rng.integers(0, 2, n)


def test_pack_lays_out_each_row_from_position_zero():
    ids, labels, lengths, seg_b, _ = _rows([3, 5, 2, 4], vocab=50)
    out = packing.pack(ids, labels, lengths, seg_b, np.array([2, 2]), 8, pad_id=0)
    assert out["input_ids"].shape == (2, 8)
    assert out["row_ids"].tolist() == [[0, 0, 0, 1, 1, 1, 1, 1], [2, 2, 3, 3, 3, 3, -1, -1]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4], [0, 1, 0, 1, 2, 3, 0, 0]]
    assert out["cls_positions"].tolist() == [0, 3, 8, 10]
    assert out["attention_mask"].sum() == lengths.sum()
    assert out["input_ids"][1, 2:6].tolist() == ids[3, :4].tolist()
    want = [(r, c) for r in range(4) for c in range(lengths[r]) if labels[r, c] >= 0]
    assert out["mlm_labels"].tolist() == [labels[r, c] for r, c in want]
    types = out["token_type_ids"].reshape(-1)[out["row_ids"].reshape(-1) == 1]
    assert types.tolist() == (np.arange(5) >= seg_b[1]).astype(int).tolist()


def _unpacked(ids, labels, lengths, seg_b, nsp):
    """The same rows as a padded batch, as `model.data` makes one."""
    t = ids.shape[1]
    attention = np.arange(t) < lengths[:, None]
    flat = np.flatnonzero(labels >= 0)
    return {
        "input_ids": torch.from_numpy(ids),
        "token_type_ids": torch.from_numpy(((np.arange(t) >= seg_b[:, None]) & attention) * 1),
        "attention_mask": torch.from_numpy(attention * 1),
        "mlm_positions": torch.from_numpy(flat),
        "mlm_labels": torch.from_numpy(labels.ravel()[flat]),
        "nsp_labels": torch.from_numpy(nsp),
    }


def _logits(model, batch, route: str = "auto"):
    model.bert.attention_route = route
    with torch.no_grad():
        return model(*model_inputs(batch), batch["mlm_positions"], **packed_inputs(batch))


def _assert_same_per_row(model, unpacked, packed, routes=("sdpa",)):
    mlm, nsp = _logits(model, unpacked)
    for route in routes:
        mlm_p, nsp_p = _logits(model, packed, route)
        # Both list the masked positions row after row, each row's in ascending order.
        torch.testing.assert_close(mlm_p, mlm, atol=1e-5, rtol=0)
        torch.testing.assert_close(nsp_p, nsp, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    cfg = preset("tiny", 120, max_position=64, dropout=0.0, attention_dropout=0.0)
    return BertForPreTraining(cfg, torch.Generator().manual_seed(1)).eval()


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_packed_logits_equal_unpacked_for_rows_of_every_length(tiny_model):
    lengths = list(range(1, 65))
    ids, labels, lens, seg_b, nsp = _rows(lengths, vocab=120, seed=3)
    p = packing.plan(lens, 64)
    order = packing.assign(lens, p, np.random.default_rng(0).permutation(64))
    arrays = packing.pack(ids[order], labels[order], lens[order], seg_b[order], p.sizes, 64, 0)
    packed = {k: torch.from_numpy(v) for k, v in arrays.items()}
    assert len(p.sizes) < 40  # 64 rows, 2,080 tokens: 33 sequences of 64 would do
    unpacked = _unpacked(ids[order], labels[order], lens[order], seg_b[order], nsp[order])
    _assert_same_per_row(tiny_model, unpacked, packed, routes=("sdpa", "flex"))


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_packed_logits_equal_unpacked_on_real_shards(sample_shards):
    shards = open_shards(sample_shards)
    cfg = model_config("tiny", shards)
    model = BertForPreTraining(cfg, torch.Generator().manual_seed(0)).eval()
    data = PretrainingData(shards, [0, 1], LoaderConfig(batch_size=6, pack=True))
    plain = PretrainingData(shards, [0, 1], LoaderConfig(batch_size=6, shuffle=False))
    for position in (0, 1):
        packed = data.batch(position)
        shard, rows = data.rows_at(position)
        # The same rows, unpacked, in the packed batch's row order.
        unpacked = plain._collate(np.searchsorted([0, 1], shard), rows)
        assert len(rows) > 6  # several rows per packed sequence
        _assert_same_per_row(model, _unpacked(*unpacked), packed, routes=("sdpa", "flex"))


def test_routes_by_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert attention_route("auto", cpu, dropout=False) == "sdpa"
    assert attention_route("auto", cuda, dropout=True) == "sdpa"  # no dropout in the kernels
    assert attention_route("auto", cuda, dropout=False) in ("varlen", "flex")
    assert attention_route("auto", cuda, dropout=False, half=False) == "flex"  # flash: 16-bit
    with pytest.raises(ValueError, match="needs a CUDA device"):
        attention_route("varlen", cpu, dropout=False)
    # The varlen layout: each row, and each sequence's padding, one sequence.
    rows = torch.tensor([[0, 0, 1, -1], [2, 2, 2, 2], [3, -1, -1, -1]])
    layout = block_mask(rows, "varlen")
    assert layout.cu_seqlens.tolist() == [0, 2, 3, 4, 8, 9, 12] and layout.max_length == 4


def test_packed_training_through_the_sdpa_block_mask_learns(tiny_model, shards_dir):
    """Gradients flow through the block mask: one batch, a few steps, its loss falls."""
    shards = open_shards(shards_dir)
    model = BertForPreTraining(model_config("tiny", shards), torch.Generator().manual_seed(0))
    data = PretrainingData(shards, [0], LoaderConfig(batch_size=4, pack=True))
    batch = data.batch(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        mlm, nsp = model(*model_inputs(batch), batch["mlm_positions"], **packed_inputs(batch))
        loss = torch.nn.functional.cross_entropy(mlm, batch["mlm_labels"])
        loss = loss + torch.nn.functional.cross_entropy(nsp, batch["nsp_labels"])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5


def _loader(directory, **cfg) -> PretrainingData:
    return PretrainingData(open_shards(directory), [0, 1, 2], LoaderConfig(pack=True, **cfg))


def test_an_epoch_of_packed_batches_holds_every_row_once(shards_dir):
    data = _loader(shards_dir, batch_size=4)
    seen = []
    for p in range(data.batches_per_epoch):
        shard, rows = data.rows_at(p)
        seen += list(zip(shard.tolist(), rows.tolist(), strict=True))
        b = data.batch(p)
        assert b["input_ids"].shape == (4, 64)  # fixed: the set's max_seq_length
        assert len(b["nsp_labels"]) == len(b["cls_positions"]) == len(rows)
    assert len(seen) == len(set(seen))
    # Only the last, incomplete global batch of packed sequences is left out.
    assert data.total_rows - len(seen) <= 3 * 4
    assert data.rows_per_unit > 1.2 and data.batches_per_epoch == data.total_units // 4


def test_packed_order_is_a_pure_function_of_seed_epoch_and_position(shards_dir):
    a, b = _loader(shards_dir, batch_size=4), _loader(shards_dir, batch_size=4, remask=True)
    n = a.batches_per_epoch
    fresh = _loader(shards_dir, batch_size=4)
    for p in (0, 5, n + 5, 2 * n):
        assert _same(a.batch(p), fresh.batch(p))
        assert np.array_equal(a.rows_at(p)[1], b.rows_at(p)[1])
    assert not np.array_equal(a.rows_at(5)[1], a.rows_at(n + 5)[1])  # epochs differ
    other = _loader(shards_dir, batch_size=4, seed=1)
    assert not np.array_equal(a.rows_at(0)[1], other.rows_at(0)[1])
    # Resuming at a position, or with DataLoader workers: the same batches.
    whole = list(batches(a, 0, 8))
    assert all(_same(x, y) for x, y in zip(whole[3:], batches(a, 3, 8), strict=True))
    assert all(_same(x, y) for x, y in zip(whole, batches(a, 0, 8, workers=2), strict=True))


def _same(x: dict, y: dict) -> bool:
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_packed_ranks_never_overlap(shards_dir):
    ranks = [_loader(shards_dir, batch_size=2, rank=r, world_size=2) for r in range(2)]
    for p in range(3):
        a, b = (set(zip(*(x.tolist() for x in r.rows_at(p)), strict=True)) for r in ranks)
        assert a and b and not a & b
