"""gspo's losses equal TRL's (1.16.0, the bench extra) on the same inputs, value and gradient, for every objective
both ship (tests/algos/trl_parity.py says how TRL's loss runs without a model). Skipped where TRL is absent."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")

from tests.algos.trl_parity import F64, batch, cases, parity, trl_is_ratio  # noqa: E402

# TRL builds SAPO's temperatures with torch.where on Python floats: a float32 tensor whatever the log-probs' dtype
# (1.05 -> 1.0499999523), so its float64 loss differs from the exact one at 1e-7
TOLERANCE = {"SAPO": 1e-6}


@pytest.mark.parametrize("name", [c[0] for c in cases()])
def test_loss_and_gradient_equal_trls(name):
    for seed in (0, 1):
        row = next(r for r in parity(seed, F64) if r[0] == name)
        tol = TOLERANCE.get(name, 1e-12)
        assert row[1] < tol and row[2] < tol, row


def test_cispo_cap_means_another_number_in_trl():
    # the same number is another estimator: gspo's clip_high=5 caps the weight at 6, TRL's epsilon_high=5 at 5.
    # One token, A = 1, old log-prob log 0.1, log-prob log 0.55: r = 5.5, kept whole by gspo, cut to 5 by TRL.
    from gspo.algos import policy_loss
    from tests.algos.trl_parity import trl_loss, trl_trainer

    logp = torch.tensor([[0.55]], dtype=F64).log().requires_grad_(True)
    old, mask, adv = torch.tensor([[0.1]], dtype=F64).log(), torch.ones((1, 1), dtype=F64), torch.ones(1, dtype=F64)
    ours = policy_loss("cispo", logp=logp, old_logp=old, advantages=adv, mask=mask, clip_low=1.0, clip_high=5.0)[0]
    theirs = trl_loss(trl_trainer("cispo", epsilon=(0.2, 5.0)), logp, old, mask, adv)
    assert torch.autograd.grad(ours, logp)[0].item() == pytest.approx(-5.5, abs=1e-12)
    assert torch.autograd.grad(theirs, logp)[0].item() == pytest.approx(-5.0, abs=1e-12)


def test_the_ratio_is_the_product_at_trls_sequence_level():
    logp, old, sampler, mask, _ = batch(0)
    got = trl_is_ratio(old, sampler, mask, "sequence_truncate", clip_max=100.0)
    torch.testing.assert_close(got.squeeze(-1), torch.exp(((old - sampler) * mask).sum(-1)), atol=1e-15, rtol=0)
