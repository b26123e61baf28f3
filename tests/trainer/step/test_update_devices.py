"""The update on a non-CPU device, with gradient checkpointing, and Dr. GRPO's normaliser.

The `meta` device stands in for a GPU on a CPU-only machine: a meta tensor has a shape and a device but
no data, so any tensor the update creates on the CPU and mixes with the model's raises, and any host
sync (`.item()`) raises too. The model uses eager attention because transformers' sdpa mask helper
reads a value from the mask.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gspo.algos import group_advantages
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.models import build_tiny_qwen3
from gspo.trainer.model.precision import Precision
from gspo.trainer.state import make_optimizer
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.reduction import to_host
from gspo.trainer.step.scoring import score
from gspo.trainer.step.update import Batch, run_updates

P, T = 3, 4  # prompt and completion widths
LENGTHS = [2, 4, 1, 3]  # completion lengths of the four sequences


def _model(device: str, *, checkpointing: bool = False) -> torch.nn.Module:
    model = build_tiny_qwen3(12, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, num_kv_heads=1,
                             seed=0)
    model.config._attn_implementation = "eager"
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.to(device).eval()


def _rollout(device: str) -> Rollout:
    completion_mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in LENGTHS])  # [N, T]
    ids = torch.arange(4 * (P + T)).reshape(4, P + T) % 10 + 2
    attention = torch.cat([torch.ones(4, P, dtype=torch.long), completion_mask.long()], dim=1)
    return Rollout(input_ids=ids, attention_mask=attention, completion_mask=completion_mask, texts=["x"] * 4,
                   truncated=torch.tensor([False, True, False, False]), engine_logp=torch.zeros(4, T)).to(device)


def _config(algo: str, *, kl_beta: float = 0.0, aggregation: str = "seq_mean_token_mean", minibatches: int = 2):
    return SimpleNamespace(
        algo=SimpleNamespace(name=algo, clip_low=0.2, clip_high=0.27, options={"aggregation": aggregation} if algo == "grpo" else {},
                             kl_beta=kl_beta, kl_unbiased=False, entropy_coef=0.0),
        train=SimpleNamespace(epochs=1, minibatches=minibatches, micro_batch_size=1, max_grad_norm=1.0,
                              logprob_chunk=5, lr=1e-3, adam_betas=[0.9, 0.99], weight_decay=0.0, steps=1,
                              warmup_steps=0, lr_schedule="constant"),
        rollout=SimpleNamespace(temperature=0.7, top_p=1.0, max_new_tokens=8),
    )


def _run_update(model, cfg, rollout, advantages, *, old_logp=None, ref_logp=None):
    precision = Precision(model, "fp32", next(model.parameters()).device)
    optimizer, scheduler = make_optimizer(precision.master, cfg.train)
    old = old_logp if old_logp is not None else torch.zeros_like(rollout.completion_mask)
    batch = Batch(rollout, advantages, old, ref_logp, LENGTHS)
    ctx = StepContext(cfg.algo, cfg.train, cfg.rollout, model=model, precision=precision, optimizer=optimizer,
                      scheduler=scheduler)
    return run_updates(ctx, batch, seed=0)


@pytest.mark.parametrize("algo", ["grpo", "gspo", "gspo_token"])
def test_scoring_update_and_losses_stay_on_the_models_device(algo):
    model, rollout = _model("meta"), _rollout("meta")
    cfg = _config(algo, kl_beta=0.1)
    precision = Precision(model, "fp32", torch.device("meta"))
    old_logp, entropy = score(model, rollout, precision=precision, train=cfg.train, sampling=cfg.rollout,
                            with_entropy=True)
    assert old_logp.device.type == entropy.device.type == "meta"
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0], device="meta"), 2)
    metrics = _run_update(model, cfg, rollout, advantages, old_logp=old_logp, ref_logp=old_logp.clone())
    assert {"loss/policy", "policy/kl_ref", "optim/grad_norm", "optim/lr"} <= set(metrics)
    assert {v.device.type for v in metrics.values()} == {"meta"}
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_a_rollout_built_on_the_cpu_moves_to_the_trainers_device_whole():
    moved = _rollout("cpu").to(torch.device("meta"))  # what the loop does with vLLM's CPU rollout
    tensors = [moved.input_ids, moved.attention_mask, moved.completion_mask, moved.truncated, moved.engine_logp]
    assert [t.device.type for t in tensors] == ["meta"] * 5
    assert moved.texts == ["x"] * 4 and moved.input_ids.dtype == torch.long


def test_gradient_checkpointing_recomputes_the_layers_during_the_update_and_only_there():
    calls = {}
    for checkpointing in (False, True):
        model = _model("cpu", checkpointing=checkpointing)
        count = []
        layer = model.model.layers[0]
        layer.self_attn.q_proj.register_forward_pre_hook(lambda *_, c=count, m=layer: c.append(m.training))
        cfg = _config("gspo")
        _run_update(model, cfg, _rollout("cpu"), torch.tensor([1.0, -1.0, 0.5, -0.5]))
        calls[checkpointing] = count
        assert not model.training  # back in eval mode for rollouts and scoring
    # four micro-batches of one sequence: one forward of the layer's q_proj each, and with checkpointing one
    # recomputation in its backward (transformers checkpoints a layer only in training mode)
    assert calls[False] == [True] * 4
    assert calls[True] == [True] * 8


def test_dr_grpo_divides_by_the_configured_max_new_tokens_not_the_batch_width():
    model, rollout = _model("cpu"), _rollout("cpu")
    cfg = _config("grpo", aggregation="seq_mean_token_sum_norm", minibatches=1)
    precision = Precision(model, "fp32", torch.device("cpu"))
    old_logp, _ = score(model, rollout, precision=precision, train=cfg.train, sampling=cfg.rollout)  # on-policy: ratios 1
    advantages = torch.tensor([1.0, -1.0, 2.0, 0.0])
    metrics = to_host(_run_update(model, cfg, rollout, advantages, old_logp=old_logp))
    # -1/N sum_i 1/max_new_tokens sum_t A_i = -(2*1 + 4*(-1) + 1*2 + 3*0) / 8 / 4 = 0
    assert metrics["loss/policy"] == pytest.approx(0.0, abs=1e-7)
    advantages = torch.tensor([1.0, 0.0, 0.0, 0.0])
    metrics = to_host(_run_update(_model("cpu"), cfg, rollout, advantages, old_logp=old_logp))
    # -(2 * 1) / 8 / 4 = -0.0625; dividing by the batch's width (T = 4) would give -0.125
    assert metrics["loss/policy"] == pytest.approx(-0.0625, rel=1e-6)
