"""`--optimizer lamb`: LAMB's steps as the paper's algorithm gives them, pre-training with it
resumed to an uninterrupted run's weights, and a resume or a value that would mix optimizers
refused."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from model.cli import main
from model.lamb import Lamb
from model.pretrain import pretrain
from model.run_dir import load_checkpoint
from tests.model.helpers import config, metrics, one_line_error, resumed_and_whole


def reference(w, grads, lr, b1, b2, eps, decay, adapt):
    """Algorithm 2 of You et al. (2020), in numpy, one tensor over the given gradients."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + decay * w
        wn, rn = np.linalg.norm(w), np.linalg.norm(r)
        ratio = wn / rn if adapt and wn > 0 and rn > 0 else 1.0
        w = w - lr * ratio * r
    return w


def test_lamb_steps_as_the_papers_algorithm():
    rng = np.random.default_rng(0)
    matrix, bias = rng.normal(size=(4, 3)), rng.normal(size=3)
    zero = np.zeros((2, 2))  # ||w|| = 0: the trust ratio is 1
    grads = [[rng.normal(size=a.shape) for a in (matrix, bias, zero)] for _ in range(3)]
    params = [
        torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (matrix, bias, zero)
    ]
    groups = [
        {"params": [params[0], params[2]], "weight_decay": 0.01},
        {"params": [params[1]], "weight_decay": 0.0, "adapt": False},
    ]
    optimizer = Lamb(groups, lr=0.1, betas=(0.9, 0.999), eps=1e-6)
    for step in grads:
        for p, g in zip(params, step, strict=True):
            p.grad = torch.tensor(g)
        optimizer.step()
    settings = dict(lr=0.1, b1=0.9, b2=0.999, eps=1e-6)
    want = [
        reference(matrix, [g[0] for g in grads], decay=0.01, adapt=True, **settings),
        reference(bias, [g[1] for g in grads], decay=0.0, adapt=False, **settings),
        reference(zero, [g[2] for g in grads], decay=0.01, adapt=True, **settings),
    ]
    for p, w in zip(params, want, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-12, atol=1e-12)
    assert optimizer.state[params[0]]["step"] == 3


def test_pretraining_with_lamb_resumes_to_the_uninterrupted_run(shards_dir, tmp_path, monkeypatch):
    split, whole = resumed_and_whole(shards_dir, tmp_path, monkeypatch, optimizer="lamb")
    a = load_checkpoint(os.path.join(whole, "last.pt"))
    assert a["train_config"]["optimizer"] == "lamb" and metrics(whole)[-1]["loss"] < 20
    # AdamW's run differs: the optimizer is LAMB, not AdamW under another name
    adamw = config(shards_dir, str(tmp_path / "adamw"))
    pretrain(adamw)
    c = load_checkpoint(os.path.join(adamw.run, "last.pt"))
    name = "bert.layers.0.ffn_in.weight"
    assert not torch.equal(a["model"][name], c["model"][name])
    resume = config(shards_dir, split, optimizer="adamw", resume=True, steps=9)
    with pytest.raises(ValueError, match="the run trains with --optimizer lamb; resume with"):
        pretrain(resume)


def test_an_unknown_optimizer_is_refused_in_one_line(shards_dir, tmp_path, capsys):
    args = ["pretrain", "--shards", shards_dir, "--run", str(tmp_path / "r"), "--optimizer", "sgd"]
    assert main(args) == 2
    assert "error: --optimizer must be one of adamw, lamb (got 'sgd')" in one_line_error(capsys)
    assert not (tmp_path / "r").exists()
