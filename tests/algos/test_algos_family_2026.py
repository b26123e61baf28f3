"""The family's 2026 members (DPPO Binary-TV / Binary-KL, OPSM, MaxRL's and GDPO's advantages): value and gradient
by hand on the family's small off-policy batch (tests/algos/test_algos_family.py), and the advantages by hand.

The batch: three sequences of lengths 4, 2, 3 padded to T = 5, old_logp_it = -1 - 0.25 t - 0.5 i, logp = old + l:
  seq 0, A = +1.0: l = [0.3, -0.3, 0.05, 0.0]    old = [-1, -1.25, -1.5, -1.75]
  seq 1, A = -0.5: l = [-0.3, 0.3]               old = [-1.5, -1.75]
  seq 2, A =  0.0: l = [0.3, -0.3, 0.1]          old = [-2, -2.25, -2.5]
DPPO reads probabilities: p - q per token, and D = q log(q/p) + (1-q) log((1-q)/(1-p)), written out below.
"""

from math import exp, log, sqrt

import pytest
import torch

from gspo.algos import gdpo_advantages, group_advantages
from tests.algos.algos_batches import F64
from tests.algos.test_algos_family import ADV, LOG_RATIOS, LOGP, run, table

OLD = [[-1.0, -1.25, -1.5, -1.75], [-1.5, -1.75]]


def diff(i, t):
    """p - q of token t of sequence i."""
    return exp(OLD[i][t] + LOG_RATIOS[i][t]) - exp(OLD[i][t])


def bernoulli_kl(i, t):
    q, p = exp(OLD[i][t]), exp(OLD[i][t] + LOG_RATIOS[i][t])
    return q * log(q / p) + (1 - q) * log((1 - q + 1e-8) / (1 - p + 1e-8))


def dppo_expected(keep, cap=20.0):
    """(loss, grad) of J = 1/9 sum keep min(r, c) A logp, token_mean over the 9 tokens."""
    w = [[min(exp(x), cap) for x in row] for row in LOG_RATIOS[:2]]
    j = sum(keep[i][t] * w[i][t] * ADV[i] * LOGP[i][t] for i in range(2) for t in range(len(LOGP[i])))
    grad = table([[-keep[i][t] * w[i][t] * ADV[i] / 9 for t in range(len(LOGP[i]))] for i in range(2)] + [[0.0] * 3])
    return -j / 9, grad


def test_dppo_tv_drops_a_token_only_past_its_probability_threshold():
    # seq 0 (A > 0): p - q = [0.1287, -0.0743, 0.0115, 0] -> t0 above d_hi = 0.1: dropped
    # seq 1 (A < 0): p - q = [-0.0578, 0.0608]            -> t0 below -d_lo = -0.05: dropped
    assert diff(0, 0) > 0.1 > diff(0, 2) and diff(1, 0) < -0.05 < diff(1, 1)
    keep = [[0, 1, 1, 1], [0, 1]]
    loss, grad, m = run("dppo_tv", clip_low=0.05, clip_high=0.1, aggregation="token_mean")
    want_loss, want_grad = dppo_expected(keep)
    assert loss.item() == pytest.approx(want_loss, abs=1e-12)
    torch.testing.assert_close(grad, want_grad, atol=1e-12, rtol=0)
    assert (m["clip/high_frac"].item(), m["clip/low_frac"].item()) == pytest.approx((1 / 9, 1 / 9), abs=1e-12)
    # the same token ratios under PPO's band [0.8, 1.27]: e^0.3 is clipped either way, e^-0.3 = 0.74 is not here


def test_dppo_tis_cap_truncates_the_weight_not_the_gradient_path():
    keep = [[0, 1, 1, 1], [0, 1]]
    loss, grad, _ = run("dppo_tv", clip_low=0.05, clip_high=0.1, tis_cap=1.2, aggregation="token_mean")
    want_loss, want_grad = dppo_expected(keep, cap=1.2)  # seq 1 t1: e^0.3 = 1.35 -> 1.2
    assert loss.item() == pytest.approx(want_loss, abs=1e-12)
    torch.testing.assert_close(grad, want_grad, atol=1e-12, rtol=0)


def test_dppo_kl_keeps_moves_toward_the_safe_side():
    # seq 0 (A > 0): t0 p > q, D = 0.0336 > 0.01: dropped; t1 p < q: kept whatever D; t2 D = 0.0004: kept
    # seq 1 (A < 0): t0 p < q, D = 0.0112 > 0.01: dropped; t1 p > q: kept whatever D
    assert bernoulli_kl(0, 0) > 0.01 > bernoulli_kl(0, 2) and bernoulli_kl(1, 0) > 0.01 and bernoulli_kl(0, 1) > 0.01
    keep = [[0, 1, 1, 1], [0, 1]]
    loss, grad, m = run("dppo_kl", clip_low=0.01, clip_high=0.01, aggregation="token_mean")
    want_loss, want_grad = dppo_expected(keep)
    assert loss.item() == pytest.approx(want_loss, abs=1e-12)
    torch.testing.assert_close(grad, want_grad, atol=1e-12, rtol=0)
    # a looser threshold (0.02) keeps seq 1's token 0 (D = 0.0112)
    _, grad, _ = run("dppo_kl", clip_low=0.02, clip_high=0.02, aggregation="token_mean")
    assert grad[1, 0].item() == pytest.approx(0.5 * exp(-0.3) / 9, abs=1e-12)


OPSM_RATIOS = [[0.3, -0.3, 0.05, 0.0], [-0.3, 0.1], [0.3, -0.3, 0.1]]  # seq 1: mean log(pi_old / pi) = 0.1


def test_opsm_drops_a_drifted_negative_sequence_by_hand():
    # delta 0.05: seq 1 (A < 0, drift 0.1) dropped; seq 0's drift is -0.0125 and A > 0 anyway: kept.
    # J = 1/3 [1/4 (min(e^.3, 1.27) + e^-.3 + e^.05 + 1)]; grad of token t of seq 0: -r_t / 12, 0 where clipped
    loss, grad, m = run("opsm", log_ratios=OPSM_RATIOS, clip_low=0.2, clip_high=0.27, delta=0.05)
    assert loss.item() == pytest.approx(-(1.27 + exp(-0.3) + exp(0.05) + 1.0) / 12, abs=1e-12)
    want = table([[0.0, -exp(-0.3) / 12, -exp(0.05) / 12, -1 / 12], [0.0, 0.0], [0.0] * 3])
    torch.testing.assert_close(grad, want, atol=1e-12, rtol=0)
    assert m["clip/opsm_masked_frac"].item() == pytest.approx(1 / 3, abs=1e-12)
    # delta 0.2 keeps it: seq 1's t1 term -0.5 e^0.1 has gradient 0.5 e^0.1 / 6 (t0 is clipped at 0.8)
    _, grad, m = run("opsm", log_ratios=OPSM_RATIOS, clip_low=0.2, clip_high=0.27, delta=0.2)
    assert grad[1, 1].item() == pytest.approx(0.5 * exp(0.1) / 6, abs=1e-12) and grad[1, 0].item() == 0.0
    assert m["clip/opsm_masked_frac"].item() == 0.0


def test_maxrl_divides_by_the_group_mean():
    rewards = torch.tensor([[1, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=F64)
    adv = group_advantages(rewards, 4, scale="mean")
    # (r - 0.5) / 0.5 and (r - 0.25) / 0.25; constant groups exactly 0
    want = torch.tensor([[1, -1, -1, 1], [3, -1, -1, -1], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=F64)
    torch.testing.assert_close(adv, want, atol=1e-12, rtol=0)
    # GRPO weights the hard prompt (p = 1/4) by 1/std = 2, MaxRL by 1/p = 4: (1 - 0.25) * 4 = 3 vs 0.75 * 2 = 1.5
    assert group_advantages(rewards, 4, eps=0.0)[1, 0].item() == pytest.approx(0.75 / 0.5, abs=1e-12)


def test_gdpo_normalises_each_component_in_its_group_then_the_sum_over_the_batch():
    # groups of 3; components (correctness, format):
    #   group 0: c = [1, 0, 0] -> [2, -1, -1]/sqrt(3);  f = [1, 1, 0] -> [1, 1, -2]/sqrt(3);  sum [3, 0, -3]/sqrt(3)
    #   group 1: c = [1, 1, 0] -> [1, 1, -2]/sqrt(3);   f = [1, 1, 1] -> 0 (constant);        sum [1, 1, -2]/sqrt(3)
    # S = [sqrt3, 0, -sqrt3, 1/sqrt3, 1/sqrt3, -2/sqrt3]: mean 0, Bessel variance (3+3+1/3+1/3+4/3) / 5 = 8/5
    comps = torch.tensor([[1, 1], [0, 1], [0, 0], [1, 1], [1, 1], [0, 1]], dtype=F64)
    adv = gdpo_advantages(comps, 3, eps=0.0)
    s = torch.tensor([sqrt(3), 0, -sqrt(3), 1 / sqrt(3), 1 / sqrt(3), -2 / sqrt(3)], dtype=F64)
    torch.testing.assert_close(adv, s / sqrt(8 / 5), atol=1e-12, rtol=0)
    # summing first (GRPO on r = c + f) gives group 0 [1, 0, -1]: another ordering of the same six answers
    grpo = group_advantages(comps.sum(-1), 3, eps=0.0)
    assert not torch.allclose(grpo, adv)
    assert torch.equal(gdpo_advantages(torch.ones((6, 2), dtype=F64), 3), torch.zeros(6, dtype=F64))
