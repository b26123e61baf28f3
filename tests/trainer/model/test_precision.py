"""Mixed precision: fp32 master weights under half-precision storage, the fp16 loss scale, the CLI's checks."""

from __future__ import annotations

import json

import pytest
import torch

from gspo.conf.errors import GspoError
from gspo.trainer.model.precision import Precision, check_precision, resolve_precision

CPU = torch.device("cpu")


def _ones_model(dtype: torch.dtype) -> torch.nn.Module:
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    return model.to(dtype)


def _sgd_steps(model, precision: Precision, n: int, lr: float = 1e-3) -> None:
    optimizer = torch.optim.SGD(precision.master, lr=lr)
    for _ in range(n):
        model.weight.grad = torch.ones_like(model.weight)  # d loss / d w = 1: each step subtracts lr
        precision.step(optimizer, max_grad_norm=1e9)


def test_master_weights_are_fp32_and_keep_an_update_below_bf16_resolution():
    model = _ones_model(torch.bfloat16)
    precision = Precision(model, "bf16", CPU)
    assert precision.separate_master and precision.master[0].dtype == torch.float32
    _sgd_steps(model, precision, 1)
    # 1 - 1e-3 is below bf16's resolution at 1 (spacing 2^-8 under 1): the master keeps it, the model rounds
    assert precision.master[0].tolist() == [[pytest.approx(0.999, abs=1e-7)] * 2]
    assert model.weight.tolist() == [[1.0, 1.0]]
    _sgd_steps(model, precision, 3)
    # 0.996 in the master; the stored bf16 weight is its nearest bf16, 1 - 2^-8 = 0.99609375
    assert precision.master[0].tolist() == [[pytest.approx(0.996, abs=1e-6)] * 2]
    assert model.weight.tolist() == [[0.99609375, 0.99609375]]


def test_without_a_master_copy_the_same_updates_vanish_in_bf16():
    model = _ones_model(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(4):
        model.weight.grad = torch.ones_like(model.weight)
        optimizer.step()
    assert model.weight.tolist() == [[1.0, 1.0]]  # the defect the master copy fixes


def test_a_float32_model_is_its_own_master_and_fp16_skips_an_overflowing_step():
    model = _ones_model(torch.float32)
    assert Precision(model, "bf16", CPU).master[0] is model.weight
    precision = Precision(model, "fp16", CPU)
    optimizer = torch.optim.SGD(precision.master, lr=1.0)
    precision.backward(model(torch.tensor([float("inf"), 1.0])).sum())  # d/dw = [inf, 1], scaled by 2^16
    precision.step(optimizer, max_grad_norm=1e9)
    assert model.weight.tolist() == [[1.0, 1.0]]  # skipped, and the loss scale halved
    assert precision.scaler.get_scale() == pytest.approx(2.0**16 * 0.5)


def test_precision_auto_follows_storage_and_fp32_compute_on_half_weights_is_refused():
    assert resolve_precision("auto", torch.bfloat16) == "bf16"
    assert resolve_precision("fp16", torch.float32) == "fp16"
    with pytest.raises(GspoError, match="train.precision=fp32 with model.dtype=bfloat16"):
        check_precision("fp32", torch.bfloat16, CPU)
    with pytest.raises(GspoError, match="no autocast on device 'meta'"):
        check_precision("bf16", torch.float32, torch.device("meta"))


def test_bf16_on_a_gpu_without_bf16_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _device: "Tesla V100-SXM2-16GB")
    with pytest.raises(GspoError) as e:
        check_precision("bf16", torch.float32, torch.device("cuda"))
    assert str(e.value) == ("train.precision=bf16: Tesla V100-SXM2-16GB cannot run bfloat16; "
                            "use train.precision=fp16 or fp32")
    check_precision("fp16", torch.float32, torch.device("cuda"))  # fp16 autocast exists on such a GPU


def test_bf16_trains_the_embedded_default_with_bf16_storage_and_resumes(gspo, tmp_path):
    run = gspo.train(tmp_path, "bf16", "model.dtype=bfloat16", "train.steps=2", "train.save_every=1")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    state = torch.load(run / "checkpoints" / "step_000002" / "optimizer.pt", weights_only=True)
    assert {m.dtype for m in state["precision"]["master"]} == {torch.float32}
    gspo.train(tmp_path, "bf16", "model.dtype=bfloat16", "train.steps=3", "resume=true")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]


def test_clip_grads_is_torchs_clipping_with_a_float64_norm():
    """clip_grads returns the norm before clipping, summed in float64 (a hand computation), and leaves the
    gradients torch.nn.utils.clip_grad_norm_ leaves; below the threshold it changes nothing."""
    from gspo.trainer.model.precision import clip_grads

    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    for a, b in zip(ours, theirs, strict=True):
        a.grad = torch.randn_like(a)
        b.grad = a.grad.clone()
    by_hand = sum(float(g) ** 2 for p in ours for g in p.grad.double().flatten()) ** 0.5
    norm = clip_grads(ours, max_norm=1.0)
    reference = torch.nn.utils.clip_grad_norm_(theirs, max_norm=1.0)
    assert norm.dtype == torch.float32 and abs(norm.item() - by_hand) < 1e-6 * by_hand and by_hand > 1
    torch.testing.assert_close(norm, reference)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    before = [p.grad.clone() for p in ours]
    clip_grads(ours, max_norm=1e9)
    assert all(torch.equal(p.grad, g) for p, g in zip(ours, before, strict=True))
