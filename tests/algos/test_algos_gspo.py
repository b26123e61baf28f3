"""GSPO and GSPO-token losses: hand-computed values, gradients and clip counts.

GSPO batch: four sequences of lengths 4, 2, 3, 1 padded to T = 5, clip bounds 0.02 / 0.04
(band [0.98, 1.04]); s_i = exp(mean_t l_it).
  seq 0, A = +1: l = [0.3, -0.1, 0.0, 0.0]  mean  0.05 -> s = 1.0513 > 1.04, A > 0: clipped high
  seq 1, A = -0.5: l = [-0.1, 0.02]         mean -0.04 -> s = 0.9608 < 0.98, A < 0: clipped low
  seq 2, A = +2: l = [0.03, -0.03, 0.03]    mean  0.01 -> s = 1.0101 in band
  seq 3, A = -1: l = [0.5]                  mean  0.5  -> s = 1.6487 above the band, A < 0: unclipped
"""

import math
from math import exp

import pytest
import torch

from gspo.algos import policy_loss
from tests.algos.algos_batches import F64, make_batch

LO, HI = 0.02, 0.04
LOG_RATIOS = [[0.3, -0.1, 0.0, 0.0], [-0.1, 0.02], [0.03, -0.03, 0.03], [0.5]]
ADV = [1.0, -0.5, 2.0, -1.0]
WIDTH = 5


def run(algo, log_ratios=LOG_RATIOS, adv=ADV, width=WIDTH, lo=LO, hi=HI, **options):
    logp, old, mask = make_batch(log_ratios, width)
    loss, metrics = policy_loss(algo, logp=logp, old_logp=old, advantages=torch.tensor(adv, dtype=F64),
                                mask=mask, clip_low=lo, clip_high=hi, **options)
    loss.backward()
    return loss, logp.grad, metrics


def table(rows, width=WIDTH):
    out = torch.zeros((len(rows), width), dtype=F64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=F64)
    return out


# J = 1/4 [1.04 * 1 + 0.98 * (-0.5) + 2 exp(0.01) + (-1) exp(0.5)]
GSPO_LOSS = -(1.04 - 0.49 + 2 * exp(0.01) - exp(0.5)) / 4
# ds_i/dlogp_it = s_i / |y_i|, so dloss/dlogp_it = -(1/4) A_i s_i / |y_i| where unclipped
GSPO_GRAD = table([
    [0.0] * 4,
    [0.0] * 2,
    [-(1 / 4) * 2 * exp(0.01) / 3] * 3,
    [-(1 / 4) * -1 * exp(0.5) / 1],
])


@pytest.mark.parametrize("algo", ["gspo", "gspo_token"])
def test_value_and_grad_by_hand(algo):
    # GSPO-token with A_it = A_i ([N] advantages broadcast) must reproduce GSPO exactly.
    loss, grad, _ = run(algo)
    assert loss.item() == pytest.approx(GSPO_LOSS, abs=1e-12)
    torch.testing.assert_close(grad, GSPO_GRAD, atol=1e-12, rtol=0)


@pytest.mark.parametrize("algo", ["gspo", "gspo_token"])
def test_clip_metrics_count_every_token_of_a_clipped_sequence(algo):
    _, _, m = run(algo)
    # 10 valid tokens; seq 0 (4 tokens) clipped high, seq 1 (2 tokens) clipped low; seq 3 is out of
    # band but not clipped (A < 0 above the band). GRPO-style per-token counting would differ.
    assert m["clip/token_frac"].item() == pytest.approx(6 / 10, abs=1e-15)
    assert m["clip/high_frac"].item() == pytest.approx(4 / 10, abs=1e-15)
    assert m["clip/low_frac"].item() == pytest.approx(2 / 10, abs=1e-15)
    assert m["clip/ratio_out_of_band_frac"].item() == pytest.approx(7 / 10, abs=1e-15)
    assert m["clip/seq_frac"].item() == pytest.approx(2 / 4, abs=1e-15)


def test_ratio_metrics_by_hand():
    _, _, m = run("gspo")
    seq = [exp(0.05), exp(-0.04), exp(0.01), exp(0.5)]
    assert m["ratio/seq_mean"].item() == pytest.approx(sum(seq) / 4, abs=1e-12)
    assert m["ratio/seq_min"].item() == pytest.approx(exp(-0.04), abs=1e-12)
    assert m["ratio/seq_max"].item() == pytest.approx(exp(0.5), abs=1e-12)
    flat = [v for row in LOG_RATIOS for v in row]
    assert m["ratio/token_mean"].item() == pytest.approx(sum(exp(v) for v in flat) / 10, abs=1e-12)
    assert m["ratio/token_min"].item() == pytest.approx(exp(-0.1), abs=1e-12)
    assert m["ratio/token_max"].item() == pytest.approx(exp(0.5), abs=1e-12)


def test_a_zero_advantage_is_never_clipped():
    # Far outside the band on both sides, but A = 0: both branches are 0, nothing is clipped.
    for algo in ("gspo", "gspo_token", "grpo"):
        _, grad, m = run(algo, log_ratios=[[0.5, 0.5], [-0.5]], adv=[0.0, 0.0], width=2)
        assert m["clip/token_frac"].item() == 0.0 and m["clip/seq_frac"].item() == 0.0
        assert m["clip/ratio_out_of_band_frac"].item() == 1.0
        assert torch.equal(grad, torch.zeros_like(grad))


def test_gspo_asymmetric_bounds_and_sign():
    # lo = 0.02, hi = 0.04. s = 1.03 is inside for A > 0 but would be clipped if hi were 0.02;
    # s = 0.97 is clipped for A < 0 (below 0.98) and not for A > 0 (pessimistic branch is s A).
    up, down = math.log(1.03), math.log(0.97)
    loss, grad, m = run("gspo", log_ratios=[[up, up], [down], [down]], adv=[1.0, -1.0, 1.0], width=2)
    # J = 1/3 [1.03 * 1 + 0.98 * (-1) + 0.97 * 1]
    assert loss.item() == pytest.approx(-(1.03 - 0.98 + 0.97) / 3, abs=1e-12)
    expected = table([[-1.03 / 3 / 2] * 2, [0.0], [-0.97 / 3]], width=2)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)
    assert m["clip/low_frac"].item() == pytest.approx(1 / 4, abs=1e-15)
    assert m["clip/high_frac"].item() == 0.0


# GSPO-token with per-token advantages, clip 0.05 / 0.08 (band [0.95, 1.08]):
#   seq 0: l = [0.2, 0.1, 0.0] -> s = exp(0.1) = 1.1052 > 1.08; A = [1, -2, 0.5]: tokens 0 and 2
#          are clipped high (A > 0), token 1 (A < 0) keeps s A and its gradient
#   seq 1: l = [-0.2] -> s = exp(-0.2) = 0.8187 < 0.95; A = [-1]: clipped low
#   seq 2: l = [0.01, 0.01] -> s = exp(0.01) in band; A = [0.5, -0.5]
TOKEN_LOG_RATIOS = [[0.2, 0.1, 0.0], [-0.2], [0.01, 0.01]]
TOKEN_ADV = [[1.0, -2.0, 0.5], [-1.0, 9.0, 9.0], [0.5, -0.5, 9.0]]  # 9.0: padding, must be ignored


def test_gspo_token_per_token_advantages_by_hand():
    loss, grad, m = run("gspo_token", log_ratios=TOKEN_LOG_RATIOS, adv=TOKEN_ADV, width=3, lo=0.05, hi=0.08)
    s0, s2 = exp(0.1), exp(0.01)
    # J = 1/3 [ (1.08 - 2 s0 + 0.5 * 1.08) / 3 + (-0.95) / 1 + (0.5 s2 - 0.5 s2) / 2 ]
    expected = -((1.08 - 2 * s0 + 0.54) / 3 - 0.95 + 0.0) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    # ds_it/dlogp_it = s_i (only through the token's own log-prob), so
    # dloss/dlogp_it = -(1/3)(1/|y_i|) A_it s_i where unclipped
    expected_grad = table([
        [0.0, -(1 / 3) * (1 / 3) * -2.0 * s0, 0.0],
        [0.0],
        [-(1 / 3) * (1 / 2) * 0.5 * s2, -(1 / 3) * (1 / 2) * -0.5 * s2],
    ], width=3)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)
    # Sign-aware per token: 3 of 6 tokens clipped (2 high, 1 low); 4 tokens in out-of-band sequences.
    assert m["clip/token_frac"].item() == pytest.approx(3 / 6, abs=1e-15)
    assert m["clip/high_frac"].item() == pytest.approx(2 / 6, abs=1e-15)
    assert m["clip/low_frac"].item() == pytest.approx(1 / 6, abs=1e-15)
    assert m["clip/ratio_out_of_band_frac"].item() == pytest.approx(4 / 6, abs=1e-15)
    assert m["clip/seq_frac"].item() == pytest.approx(2 / 3, abs=1e-15)


def test_gspo_rejects_per_token_advantages():
    # GSPO has one advantage per sequence; a [N, T] tensor would silently broadcast wrongly.
    with pytest.raises(ValueError, match="advantages"):
        run("gspo", log_ratios=TOKEN_LOG_RATIOS, adv=TOKEN_ADV, width=3)


@pytest.mark.parametrize("algo", ["grpo", "gspo", "gspo_token"])
def test_log_ratio_is_bounded_before_exp(algo):
    # A log-ratio of 50 would overflow float32 exp(); it is bounded at 10 (ratio e^10) and the
    # bounded tokens have no gradient. A < 0 so the unclipped branch r A is the one taken.
    logp, old, mask = make_batch([[50.0, 50.0], [0.0]], 2)
    logp32 = logp.detach().float().requires_grad_(True)
    loss, m = policy_loss(algo, logp=logp32, old_logp=old.float(), advantages=torch.tensor([-1.0, 1.0]),
                          mask=mask.float(), clip_low=LO, clip_high=HI)
    loss.backward()
    assert loss.item() == pytest.approx(-(-exp(10.0) + 1.0) / 2, rel=1e-6)
    assert torch.isfinite(logp32.grad).all() and logp32.grad[0].abs().sum().item() == 0.0
    assert m["ratio/seq_max"].item() == pytest.approx(exp(10.0), rel=1e-6)
