"""The GPU's code paths, run on the CPU: `--compile` (inductor generates C++), bf16 autocast, fp16
autocast with loss scaling, and fused AdamW, in pre-training and in fine-tuning, each against the
plain fp32 path.

Inductor's first compilation in a process costs most of a minute on a small machine (its C++
toolchain starts; later graphs cost less, and a warm cache little), so every inductor
compilation of the suite is here, in one process: pre-training, padded and packed, and
flex attention (the route of packed batches on CUDA); fine-tuning's model, whose encoder layers
are the same, is compiled by dynamo and AOTAutograd with the `aot_eager` backend (the same
tracing, graph breaks, guards and recompilation, without generating C++ again).

Tolerances: the compiled model and the fused optimizer compute the same arithmetic in another
order, so their losses stay within 1e-4 of the plain path over a few steps (the compiled model
draws dropout from torch's own generator, `fallback_random`, as eager does); bf16 autocast rounds
every matmul to 8 bits of mantissa, fp16 to 11, so their losses stay within 0.05.
"""

from __future__ import annotations

import os

import pytest
import torch

import model.training as training
from model.bert import Layer, attend, block_mask
from model.cli import main
from model.finetune.config import FinetuneConfig
from model.finetune.encoder import build_model, encoder_record, read_encoder
from model.finetune.loop import Finetuning, _batches, kind_of
from model.run_dir import load_checkpoint
from model.training import Stepper, adamw, amp_dtype, warmup_linear
from tests.model.helpers import finetune_args, metrics, resumed_and_whole, without_timing

SST2 = os.path.join(os.path.dirname(__file__), "..", "..", "sample", "finetune", "sst2")
STEPS = 6
LOSSES = ("loss", "mlm_loss", "nsp_loss")


def _pretrain(shards: str, run: str, *extra: str) -> list[dict]:
    args = ["pretrain", "--shards", shards, "--run", run, "--steps", str(STEPS)]
    args += ["--batch-size", "8", "--log-every", "1", "--ckpt-every", "100", "--eval-batches", "1"]
    assert main([*args, *extra]) == 0
    return metrics(run)


def _close(a: list[dict], b: list[dict], tol: float) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b, strict=True):
        for k in LOSSES:
            assert x[k] == pytest.approx(y[k], abs=tol), (x["step"], k)


@pytest.fixture(scope="module")
def plain(shards_dir, tmp_path_factory) -> list[dict]:
    """The reference: eager fp32, fused AdamW (pre-training's optimizer on every device)."""
    return _pretrain(shards_dir, str(tmp_path_factory.mktemp("plain") / "run"))


@pytest.fixture
def counters():
    """Dynamo's counters (graphs compiled, recompilations), cleared; dynamo is imported here,
    not at collection, which every test process would pay for."""
    from torch._dynamo.utils import counters

    counters.clear()
    return counters


@pytest.fixture
def fallback_random():
    """Compiled dropout draws from torch's generator, as eager dropout does."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    with inductor_config.patch(fallback_random=True):
        yield
    torch._dynamo.reset()


def restarted_analyses(monkeypatch) -> list[str]:
    """Dynamo's restarts of a frame's analysis (each traces the frame again), as it logs them."""
    from torch._dynamo import convert_frame

    seen: list[str] = []
    info = convert_frame.log.info

    def logged(msg, *args, **kwargs):
        if str(msg).startswith("Restarting analysis"):
            seen.append(str(msg) % args)
        info(msg, *args, **kwargs)

    monkeypatch.setattr(convert_frame.log, "info", logged)
    return seen


@pytest.mark.slow
def test_pretraining_compiles_and_does_not_recompile_after_warm_up(
    shards_dir, tmp_path, plain, monkeypatch, fallback_random, counters
):
    graphs: list[int] = []
    real_step = training.Trainer.step

    def step_and_count(self, micro_batches):
        stats = real_step(self, micro_batches)
        graphs.append(int(counters["stats"]["unique_graphs"]))
        return stats

    monkeypatch.setattr(training.Trainer, "step", step_and_count)
    restarts = restarted_analyses(monkeypatch)
    counters.clear()
    compiled = _pretrain(shards_dir, str(tmp_path / "compiled"), "--compile")
    # Batches vary in length (padding to a multiple of 8) and in masked positions: the one
    # dynamic-shape graph compiled at the first step serves them all.
    assert graphs[0] >= 1 and graphs == [graphs[0]] * STEPS
    assert not counters["recompiles"]
    assert not restarts, restarts  # traced once: the model's floats are constants
    _close(compiled, plain, 1e-4)


@pytest.mark.slow
def test_packed_pretraining_compiled_bf16_against_plain(
    shards_dir, tmp_path, fallback_random, counters
):
    """Packed batches have one shape, (batch, max_seq_length); only the counts of masked
    positions and of rows vary, which the dynamic graph takes without recompiling."""
    packed = ("--pack", "--batch-size", "4")
    plain = _pretrain(shards_dir, str(tmp_path / "plain"), *packed)
    counters.clear()
    compiled = _pretrain(shards_dir, str(tmp_path / "compiled"), "--compile", *packed)
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["recompiles"]
    _close(compiled, plain, 1e-4)
    bf16 = _pretrain(shards_dir, str(tmp_path / "bf16"), "--precision", "bf16", *packed)
    _close(bf16, plain, 0.05)


@pytest.mark.slow
def test_compiled_fp16_with_checkpointed_layers_against_plain(
    shards_dir, tmp_path, plain, monkeypatch, fallback_random, counters
):
    """A small GPU's recipe, compiled: fp16 autocast with loss scaling and every layer computed
    again in the backward pass, traced into the one graph."""
    import model.bert as bert

    traced: list[int] = []
    real_checkpoint = bert.checkpoint

    def checkpoint(layer, *args, **kwargs):
        traced.append(torch.compiler.is_compiling())  # dynamo replays the append each step
        return real_checkpoint(layer, *args, **kwargs)

    monkeypatch.setattr(bert, "checkpoint", checkpoint)
    run = str(tmp_path / "compiled")
    flags = ("--compile", "--precision", "fp16", "--checkpoint-activations")
    compiled = _pretrain(shards_dir, run, *flags)
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["recompiles"]
    assert not counters["graph_break"], dict(counters["graph_break"])
    layers = load_checkpoint(os.path.join(run, "last.pt"))["model_config"]["num_layers"]
    # every layer through torch's checkpoint at every step, inside the compiled graph
    assert traced == [True] * layers * STEPS
    assert [r["loss_scale"] for r in compiled] == [2.0**16] * STEPS
    _close(compiled, plain, 0.05)


@pytest.mark.slow
def test_compiled_flex_attention_equals_the_block_mask_on_the_cpu():
    """flex_attention as CUDA runs packed batches, compiled (its forward compiles for the CPU
    too), against SDPA under the dense block mask."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 64, 16, generator=g) for _ in range(3))
    rows = torch.sort(torch.randint(0, 5, (2, 64), generator=g), -1).values
    rows[1, 50:] = -1  # padding
    want = attend(q, k, v, block_mask(rows, "sdpa"), 0.0)
    got = torch.compile(attend)(q, k, v, block_mask(rows, "flex"), 0.0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch._dynamo.reset()


def test_pretraining_in_bf16_autocast_on_the_cpu(shards_dir, tmp_path, plain):
    bf16 = _pretrain(shards_dir, str(tmp_path / "bf16"), "--precision", "bf16")
    _close(bf16, plain, 0.05)
    assert bf16 != plain  # autocast did round


def test_pretraining_in_fp16_autocast_with_loss_scaling_on_the_cpu(shards_dir, tmp_path, plain):
    fp16 = _pretrain(shards_dir, str(tmp_path / "fp16"), "--precision", "fp16")
    _close(fp16, plain, 0.05)
    assert [r["loss_scale"] for r in fp16] == [2.0**16] * STEPS  # no overflow on these rows
    assert all("loss_scale" not in r for r in plain)


def test_an_fp16_step_whose_gradients_overflow_is_skipped_and_the_scale_halved():
    """torch's GradScaler under the step: an overflowed step leaves the weights as they were
    and halves the scale, the schedule steps all the same, and the next step applies."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 1)
    opt = adamw(layer, 1e-2, 0.0, fused=True)
    sched = warmup_linear(opt, 0, 4)
    scale = torch.tensor(1.0)

    def loss_of(model, batch):
        loss = (model(batch["x"]).float() * scale).pow(2).mean()
        return loss, loss.detach()[None]

    cpu = torch.device("cpu")
    stepper = Stepper(layer, opt, sched, loss_of, cpu, dtype=torch.float16, clip=1.0)
    before = [p.detach().clone() for p in layer.parameters()]
    scale.fill_(1e6)  # (1e6)^2 x 2^16 overflows
    stepper.step([{"x": torch.ones(2, 4)}])
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))
    assert stepper.scaler.get_scale() == 2.0**15 and sched.last_epoch == 1
    scale.fill_(1.0)
    stepper.step([{"x": torch.ones(2, 4)}])
    assert not torch.equal(before[0], layer.weight)


def test_an_fp16_run_resumes_with_its_loss_scale(shards_dir, tmp_path, monkeypatch):
    split, whole = resumed_and_whole(shards_dir, tmp_path, monkeypatch, precision="fp16")
    a, b = (load_checkpoint(os.path.join(run, "last.pt")) for run in (split, whole))
    assert a["scaler"] == b["scaler"] and a["scaler"]["_growth_tracker"] == 8  # steps unbroken


def test_auto_precision_is_fp16_on_a_gpu_without_bf16(monkeypatch):
    """The choice alone (no GPU here): bf16 where the GPU has it, fp16 on a V100 or T4."""
    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert amp_dtype("auto", gpu) == torch.float16 and amp_dtype("auto", cpu) is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert amp_dtype("auto", gpu) == torch.bfloat16
    assert amp_dtype("fp16", cpu) == torch.float16 and amp_dtype("fp32", gpu) is None


def layer_calls(monkeypatch) -> list[bool]:
    """Every encoder layer's forward from now on: whether it ran with gradients enabled."""
    calls, forward = [], Layer.forward

    def counted(self, x, mask):
        calls.append(torch.is_grad_enabled())
        return forward(self, x, mask)

    monkeypatch.setattr(Layer, "forward", counted)
    return calls


def test_checkpointed_activations_give_the_same_run(shards_dir, tmp_path, plain, monkeypatch):
    """Each layer computed again in the backward pass, its dropout draws replayed: the same
    losses and accuracies, bit for bit."""
    calls = layer_calls(monkeypatch)
    run = str(tmp_path / "recomputed")
    recomputed = _pretrain(shards_dir, run, "--checkpoint-activations")
    assert without_timing(recomputed) == without_timing(plain)
    layers = load_checkpoint(os.path.join(run, "last.pt"))["model_config"]["num_layers"]
    # per step a forward without keeping activations and one again in the backward pass; the
    # held-out evaluation, without gradients, once
    assert len(calls) == layers * (2 * STEPS + 1)


def test_fused_adamw_matches_the_loop_implementation(shards_dir, tmp_path, plain, monkeypatch):
    calls = []
    real = training.adamw

    def unfused(*args, fused=None, **kwargs):
        calls.append(fused)
        return real(*args, fused=False, **kwargs)

    monkeypatch.setattr(training, "adamw", unfused)
    loop = _pretrain(shards_dir, str(tmp_path / "loop"), "--seed", "0")
    assert calls == [True]  # pre-training asks for the fused kernel, on the CPU too
    _close(loop, plain, 1e-4)
    ckpt = load_checkpoint(os.path.join(tmp_path / "loop", "last.pt"))
    assert ckpt["step"] == STEPS


def _finetuning(pretrained_run: str, run: str) -> Finetuning:
    cfg = FinetuneConfig(
        task="sst2", data=SST2, ckpt=os.path.join(pretrained_run, "last.pt"), run=run, seed=3
    )
    ckpt, tok = read_encoder(cfg)
    task = kind_of("sst2").read(cfg, tok)
    torch.manual_seed(cfg.seed)
    model = build_model(ckpt, task.num_labels, cfg.seed, task.pooled, task.head_dropout)
    pad = ckpt["vocab"]["special_ids"]["pad"]
    return Finetuning(cfg, task, model, torch.device("cpu"), pad, encoder_record(ckpt))


def _finetune_losses(run: Finetuning, *, backend=None, dtype=None, fused=None) -> list:
    """Fine-tuning's step (`Stepper` on the task's loss), as `model.finetune.loop` runs it."""
    torch.manual_seed(run.cfg.seed)
    opt = adamw(run.model, 1e-4, 0.01, eps=1e-6, fused=fused)
    sched = warmup_linear(opt, 1, STEPS)
    model = None if backend is None else training.compiled(run.model, backend)
    stepper = Stepper(
        run.model, opt, sched, run.loss_of, run.device, dtype=dtype, clip=1.0, model=model
    )
    return [stepper.step(micro).item() for micro in _batches(run, STEPS)]


@pytest.fixture(scope="module")
def finetune_plain(pretrained_run, tmp_path_factory) -> list[float]:
    return _finetune_losses(_finetuning(pretrained_run, str(tmp_path_factory.mktemp("ft"))))


@pytest.mark.slow
def test_finetuning_compiled_fused_bf16_against_plain(
    pretrained_run, tmp_path, finetune_plain, fallback_random, counters, monkeypatch
):
    restarts = restarted_analyses(monkeypatch)
    counters.clear()
    run = _finetuning(pretrained_run, str(tmp_path))
    compiled = _finetune_losses(run, backend="aot_eager")
    assert compiled == pytest.approx(finetune_plain, abs=1e-4)
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["recompiles"]
    assert not restarts, restarts
    fused = _finetune_losses(_finetuning(pretrained_run, str(tmp_path)), fused=True)
    assert fused == pytest.approx(finetune_plain, abs=1e-4)
    bf16 = _finetune_losses(_finetuning(pretrained_run, str(tmp_path)), dtype=torch.bfloat16)
    assert bf16 == pytest.approx(finetune_plain, abs=0.05) and bf16 != finetune_plain


def _finetune_cli(pretrained_run: str, run: str, *extra: str) -> list[dict]:
    """`bert-model finetune` on the sample SST-2 (40 training rows, batch 8: 5 steps an epoch)
    for STEPS steps, every one logged, the dev set evaluated after the fifth and the sixth."""
    args = finetune_args("sst2", SST2, pretrained_run, run, "--epochs", "1.2", "--log-every", "1")
    assert main([*args, *extra]) == 0
    return metrics(run)


def _losses(records: list[dict]) -> list[float]:
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["step"] for r in records if "dev" in r] == [5, STEPS]
    return [r["loss"] for r in records]


def _saved_config(run: str) -> dict:
    return torch.load(os.path.join(run, "model.pt"), weights_only=True)["config"]


@pytest.fixture(scope="module")
def finetune_cli_plain(pretrained_run, tmp_path_factory) -> list[dict]:
    """The reference: `bert-model finetune` with its defaults, eager fp32 on the CPU."""
    return _finetune_cli(pretrained_run, str(tmp_path_factory.mktemp("ft-cli") / "plain"))


@pytest.mark.slow
def test_finetune_cli_compiles_the_training_forward(
    pretrained_run, tmp_path, finetune_cli_plain, fallback_random, counters, monkeypatch
):
    asked: list[str] = []
    real = training.compiled

    def aot_eager(model, backend="inductor"):
        asked.append(backend)
        return real(model, backend="aot_eager")

    monkeypatch.setattr(training, "compiled", aot_eager)
    restarts = restarted_analyses(monkeypatch)
    counters.clear()
    run = str(tmp_path / "compiled")
    compiled = _finetune_cli(pretrained_run, run, "--compile")
    assert asked == ["inductor"]  # once, for the training forward
    # The dynamic-shape graph serves every batch length, and the evaluations between steps (the
    # eager model, switched to eval and back) do not make it recompile.
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["recompiles"]
    assert not restarts, restarts
    assert _losses(compiled) == pytest.approx(_losses(finetune_cli_plain), abs=1e-4)
    assert _saved_config(run)["compile"] is True


def test_finetune_cli_precision_on_the_cpu(
    pretrained_run, tmp_path, finetune_cli_plain, monkeypatch
):
    fp32 = _finetune_cli(pretrained_run, str(tmp_path / "fp32"), "--precision", "fp32")
    assert fp32 == finetune_cli_plain  # auto is fp32 on the CPU, bit for bit
    run = str(tmp_path / "bf16")
    bf16 = _losses(_finetune_cli(pretrained_run, run, "--precision", "bf16"))
    plain = _losses(finetune_cli_plain)
    assert bf16 != plain  # autocast did round
    assert bf16 == pytest.approx(plain, abs=0.05)
    assert _saved_config(run)["precision"] == "bf16"
    assert _saved_config(str(tmp_path / "fp32"))["compile"] is False
    calls = layer_calls(monkeypatch)
    recomputed = _finetune_cli(pretrained_run, str(tmp_path / "re"), "--checkpoint-activations")
    assert _losses(recomputed) == plain  # each layer again in the backward pass: the same
    assert sum(calls) == 2 * 2 * STEPS  # tiny's 2 layers, twice a step; evaluation: no grad
    monkeypatch.undo()
    run = str(tmp_path / "fp16")
    fp16 = _losses(_finetune_cli(pretrained_run, run, "--precision", "fp16"))
    assert fp16 != plain and fp16 == pytest.approx(plain, abs=0.05)
    assert _saved_config(run)["precision"] == "fp16"
