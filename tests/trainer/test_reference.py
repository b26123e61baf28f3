"""The KL reference is the run's initial model, also after a resume (the checkpoint is the policy)."""

from __future__ import annotations

import torch
from conftest import TINY

from gspo.conf import compose_config
from gspo.trainer.loop import _reference
from gspo.trainer.policy import load_policy


def test_a_resumed_run_takes_the_initial_model_as_reference_not_the_checkpoint(finished_run):
    cfg = compose_config([*TINY, "algo.kl_beta=0.1"])
    checkpoint = sorted((finished_run / "checkpoints").glob("step_*"))[-1]
    policy = load_policy(cfg, path=str(checkpoint))[0]
    initial = load_policy(cfg)[0]
    ref = _reference(cfg, policy, print, resumed=True)
    names = [n for n, _ in initial.named_parameters()]
    assert any(not torch.equal(policy.get_parameter(n), initial.get_parameter(n)) for n in names)  # it trained
    assert all(torch.equal(ref.get_parameter(n), initial.get_parameter(n)) for n in names)
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert _reference(compose_config(TINY), policy, print, resumed=True) is None  # kl_beta = 0: no reference
