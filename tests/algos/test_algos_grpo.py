"""GRPO loss: hand-computed value, gradient and metrics under each aggregation.

The batch: three sequences of lengths 4, 2, 3 padded to T = 5, with chosen token log-ratios
l = logp - old_logp. Clip bounds 0.2 / 0.27 (band [0.8, 1.27]).
  seq 0, A = +1.0: l = [0.3, -0.3, 0.05, 0.0]  -> tok 0 clipped high; tok 1 below the band but A > 0
  seq 1, A = -0.5: l = [-0.3, 0.3]             -> tok 0 clipped low;  tok 1 above the band but A < 0
  seq 2, A =  0.0: l = [0.3, -0.3, 0.1]        -> out of band, never clipped (A = 0)
"""

import math
from math import exp

import pytest
import torch

from gspo.algos import policy_loss
from tests.algos.algos_batches import F64, make_batch

LO, HI = 0.2, 0.27
LOG_RATIOS = [[0.3, -0.3, 0.05, 0.0], [-0.3, 0.3], [0.3, -0.3, 0.1]]
ADV = [1.0, -0.5, 0.0]
WIDTH = 5
N_TOKENS = 9


def run(log_ratios=LOG_RATIOS, adv=ADV, width=WIDTH, **options):
    logp, old, mask = make_batch(log_ratios, width)
    loss, metrics = policy_loss("grpo", logp=logp, old_logp=old, advantages=torch.tensor(adv, dtype=F64),
                                mask=mask, clip_low=LO, clip_high=HI, **options)
    loss.backward()
    return loss, logp.grad, metrics


# Per-token objectives min(w A, clip(w, 0.8, 1.27) A), by hand.
OBJ0 = [1.27 * 1.0, exp(-0.3), exp(0.05), 1.0]  # tok 0: w = 1.3499 > 1.27, A > 0 -> clipped 1.27
OBJ1 = [0.8 * -0.5, -0.5 * exp(0.3)]  # tok 0: w = 0.7408 < 0.8, A < 0 -> clipped 0.8 * A


def grad_table(rows):
    out = torch.zeros((3, WIDTH), dtype=F64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=F64)
    return out


def test_value_and_grad_seq_mean_token_mean():
    loss, grad, _ = run()
    # J = 1/3 [ (sum OBJ0) / 4 + (sum OBJ1) / 2 + 0 / 3 ]
    expected = -(sum(OBJ0) / 4 + sum(OBJ1) / 2) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    # dloss/dlogp_it = -(1/3)(1/|y_i|) A_i w_it where unclipped, 0 where clipped
    expected_grad = grad_table([
        [0.0, -exp(-0.3) / 12, -exp(0.05) / 12, -1.0 / 12],
        [0.0, -(1 / 6) * -0.5 * exp(0.3)],
        [0.0, 0.0, 0.0],
    ])
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)


def test_value_and_grad_token_mean():
    # DAPO: J = 1/9 sum_i sum_t J_it
    loss, grad, _ = run(aggregation="token_mean")
    assert loss.item() == pytest.approx(-(sum(OBJ0) + sum(OBJ1)) / 9, abs=1e-12)
    expected_grad = grad_table([
        [0.0, -exp(-0.3) / 9, -exp(0.05) / 9, -1.0 / 9],
        [0.0, 0.5 * exp(0.3) / 9],
        [0.0, 0.0, 0.0],
    ])
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)


@pytest.mark.parametrize("max_len, norm", [(None, WIDTH), (8, 8)])
def test_value_and_grad_seq_mean_token_sum_norm(max_len, norm):
    # Dr. GRPO: J = 1/3 sum_i 1/max_len sum_t J_it (default max_len: the padded width T = 5)
    options = {} if max_len is None else {"max_len": max_len}
    loss, grad, _ = run(aggregation="seq_mean_token_sum_norm", **options)
    assert loss.item() == pytest.approx(-(sum(OBJ0) + sum(OBJ1)) / (3 * norm), abs=1e-12)
    expected_grad = grad_table([
        [0.0, -exp(-0.3), -exp(0.05), -1.0],
        [0.0, 0.5 * exp(0.3)],
        [0.0, 0.0, 0.0],
    ]) / (3 * norm)
    torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=0)


def test_clip_metrics_counted_by_hand():
    _, _, m = run()
    # clipped (sign-aware): seq0 tok0 (high), seq1 tok0 (low); out of band: 2 tokens in each sequence
    assert m["clip/token_frac"].item() == pytest.approx(2 / N_TOKENS, abs=1e-15)
    assert m["clip/high_frac"].item() == pytest.approx(1 / N_TOKENS, abs=1e-15)
    assert m["clip/low_frac"].item() == pytest.approx(1 / N_TOKENS, abs=1e-15)
    assert m["clip/ratio_out_of_band_frac"].item() == pytest.approx(6 / N_TOKENS, abs=1e-15)
    assert m["clip/seq_frac"].item() == pytest.approx(2 / 3, abs=1e-15)


def test_ratio_and_kl_metrics_by_hand():
    loss, _, m = run()
    flat = [v for row in LOG_RATIOS for v in row]
    assert m["ratio/token_mean"].item() == pytest.approx(sum(exp(v) for v in flat) / 9, abs=1e-12)
    assert m["ratio/token_min"].item() == pytest.approx(exp(-0.3), abs=1e-12)
    assert m["ratio/token_max"].item() == pytest.approx(exp(0.3), abs=1e-12)
    seq = [exp(0.05 / 4), exp(0.0 / 2), exp(0.1 / 3)]  # s_i = exp(mean_t l_it)
    assert m["ratio/seq_mean"].item() == pytest.approx(sum(seq) / 3, abs=1e-12)
    assert m["ratio/seq_min"].item() == pytest.approx(1.0, abs=1e-12)
    assert m["ratio/seq_max"].item() == pytest.approx(exp(0.1 / 3), abs=1e-12)
    # k3 of KL(pi_old || pi), r = pi / pi_old: (r - 1) - log r. The reverse direction,
    # exp(-l) - 1 + l, would give 0.0408 instead of 0.0499 on l = 0.3.
    assert m["policy/kl_old"].item() == pytest.approx(sum(exp(v) - 1 - v for v in flat) / 9, abs=1e-12)
    assert m["loss/policy"].item() == loss.item()


def test_metrics_are_detached_scalars():
    _, _, m = run()
    assert all(v.dim() == 0 and not v.requires_grad for v in m.values())


def test_asymmetric_bounds_act_on_their_own_side():
    # lo = 0.2, hi = 0.27: a ratio of 0.78 (1 - 0.22) is clipped for A < 0, but a ratio of 1.22
    # (1 + 0.22) is inside the band for A > 0. Swapping lo and hi would flip both.
    up, down = math.log(1.22), math.log(0.78)
    loss, grad, m = run(log_ratios=[[up], [down]], adv=[1.0, -1.0], width=1)
    # J = 1/2 [1.22 * 1 + 0.8 * (-1)]
    assert loss.item() == pytest.approx(-(1.22 - 0.8) / 2, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-1.22 / 2], [0.0]], dtype=F64), atol=1e-12, rtol=0)
    assert m["clip/low_frac"].item() == 0.5 and m["clip/high_frac"].item() == 0.0
