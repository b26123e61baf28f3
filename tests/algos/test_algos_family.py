"""The family's new objectives (CISPO, SAPO, GMPO, DAPO, Dr. GRPO): value and gradient by hand on a small
off-policy batch, and the on-policy identity every member shares.

The batch (tests/algos_batches.make_batch): three sequences of lengths 4, 2, 3 padded to T = 5, with
old_logp_it = -1 - 0.25 t - 0.5 i and logp = old_logp + l, the chosen token log-ratios
  seq 0, A = +1.0: l = [0.3, -0.3, 0.05, 0.0]
  seq 1, A = -0.5: l = [-0.3, 0.3]
  seq 2, A =  0.0: l = [0.3, -0.3, 0.1]
Every expected number below is written from the paper's formula with math.exp, not from the code.
"""

from math import exp

import pytest
import torch

from gspo.algos import available, get, policy_loss
from tests.algos.algos_batches import F64, make_batch

LOG_RATIOS = [[0.3, -0.3, 0.05, 0.0], [-0.3, 0.3], [0.3, -0.3, 0.1]]
ADV = [1.0, -0.5, 0.0]
WIDTH = 5
# logp_it = old_logp_it + l_it, by hand
LOGP = [[-1.0 + 0.3, -1.25 - 0.3, -1.5 + 0.05, -1.75], [-1.5 - 0.3, -1.75 + 0.3]]


def run(name, log_ratios=LOG_RATIOS, adv=ADV, width=WIDTH, **kwargs):
    logp, old, mask = make_batch(log_ratios, width)
    loss, metrics = policy_loss(name, logp=logp, old_logp=old, advantages=torch.tensor(adv, dtype=F64),
                                mask=mask, **kwargs)
    loss.backward()
    return loss, logp.grad, metrics


def table(rows):
    out = torch.zeros((3, WIDTH), dtype=F64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=F64)
    return out


def sigmoid(x):
    return 1.0 / (1.0 + exp(-x))


def test_cispo_value_and_gradient_by_hand():
    # Weights clip(r, 0.8, 1.27), detached: seq 0: r = e^0.3 -> 1.27, e^-0.3 -> 0.8, e^0.05, 1;
    # seq 1: e^-0.3 -> 0.8, e^0.3 -> 1.27 (both signs clipped: CISPO clips the weight, not the objective).
    w = [[1.27, 0.8, exp(0.05), 1.0], [0.8, 1.27]]
    loss, grad, m = run("cispo", clip_low=0.2, clip_high=0.27)
    # J = 1/9 sum_i sum_t w_it A_i logp_it
    j = sum(w[0][t] * 1.0 * LOGP[0][t] for t in range(4)) + sum(w[1][t] * -0.5 * LOGP[1][t] for t in range(2))
    assert loss.item() == pytest.approx(-j / 9, abs=1e-12)
    # d loss / d logp_it = -w_it A_i / 9 on EVERY token, clipped ones included
    expected = table([[-x / 9 for x in w[0]], [0.5 * x / 9 for x in w[1]], [0.0] * 3])
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)
    # truncated weights: seq 0 tok 0 (high), tok 1 (low); seq 1 tok 0 (low), tok 1 (high); seq 2 tok 0, 1
    assert (m["clip/high_frac"].item(), m["clip/low_frac"].item()) == pytest.approx((3 / 9, 3 / 9), abs=1e-12)


def test_cispo_without_a_lower_bound():
    # clip_low = 1: the weight is clipped below at 0, i.e. never; e^-0.3 keeps its value
    _, grad, m = run("cispo", clip_low=1.0, clip_high=0.27)
    assert grad[0, 1].item() == pytest.approx(-exp(-0.3) / 9, abs=1e-12)
    assert m["clip/low_frac"].item() == 0.0
    with pytest.raises(ValueError, match="clip_low"):
        run("cispo", clip_low=1.01, clip_high=0.27)
    with pytest.raises(ValueError, match="clip_low"):
        run("grpo", clip_low=1.0, clip_high=0.27)  # only CISPO's bound may vanish


def test_sapo_value_and_gradient_by_hand():
    # f(r) = 4/tau sigmoid(tau (r - 1)), tau = 1.0 (A > 0) or 1.05 (A <= 0); J = 1/3 sum_i 1/|y_i| sum_t f A_i
    tp, tn = 1.0, 1.05
    r0, r1 = [exp(x) for x in LOG_RATIOS[0]], [exp(x) for x in LOG_RATIOS[1]]
    f0 = [4 / tp * sigmoid(tp * (r - 1)) for r in r0]
    f1 = [4 / tn * sigmoid(tn * (r - 1)) for r in r1]
    loss, grad, m = run("sapo", clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-(sum(f0) * 1.0 / 4 + sum(f1) * -0.5 / 2) / 3, abs=1e-12)
    # d f(r) / d logp = f'(r) r = 4 sigmoid(tau (r-1)) (1 - sigmoid(tau (r-1))) r
    g0 = [4 * sigmoid(tp * (r - 1)) * (1 - sigmoid(tp * (r - 1))) * r for r in r0]
    g1 = [4 * sigmoid(tn * (r - 1)) * (1 - sigmoid(tn * (r - 1))) * r for r in r1]
    expected = table([[-x * 1.0 / 12 for x in g0], [-x * -0.5 / 6 for x in g1], [0.0] * 3])
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)
    # no hard clip; the band [0.8, 1.28] only for the report: out of it e^0.3 (x3) and e^-0.3 (x3)
    assert m["clip/token_frac"].item() == 0.0
    assert m["clip/ratio_out_of_band_frac"].item() == pytest.approx(6 / 9, abs=1e-12)


def test_sapo_temperatures_are_its_options():
    # tau_neg = tau_pos = 2: seq 1's gate changes, seq 0's does not
    loss, _, _ = run("sapo", clip_low=0.2, clip_high=0.28, tau_pos=2.0, tau_neg=2.0)
    f0 = sum(2 * sigmoid(2 * (exp(x) - 1)) for x in LOG_RATIOS[0])
    f1 = sum(2 * sigmoid(2 * (exp(x) - 1)) for x in LOG_RATIOS[1])
    assert loss.item() == pytest.approx(-(f0 / 4 - 0.5 * f1 / 2) / 3, abs=1e-12)
    with pytest.raises(ValueError, match="tau"):
        get("sapo").make_options({"tau_neg": 0.0})


def test_gmpo_value_and_gradient_by_hand():
    # Log-space bounds (-0.2, 0.2). Seq 0 (A > 0): only the upper bound acts: l~ = [0.2, -0.3, 0.05, 0];
    # seq 1 (A < 0): only the lower one: l~ = [-0.2, 0.3]; seq 2 (A = 0) adds 0.
    s0 = exp((0.2 - 0.3 + 0.05 + 0.0) / 4)
    s1 = exp((-0.2 + 0.3) / 2)
    loss, grad, m = run("gmpo", clip_low=0.2, clip_high=0.2)
    # J = 1/3 (A_0 s_0 + A_1 s_1)
    assert loss.item() == pytest.approx(-(1.0 * s0 - 0.5 * s1) / 3, abs=1e-12)
    # unclipped tokens: d loss / d logp_it = -(1/3) A_i s_i / |y_i|; clipped ones: 0
    expected = table([[0.0] + [-s0 / 12] * 3, [0.0, 0.5 * s1 / 6], [0.0] * 3])
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)
    assert (m["clip/high_frac"].item(), m["clip/low_frac"].item()) == pytest.approx((1 / 9, 1 / 9), abs=1e-12)
    assert m["clip/seq_frac"].item() == pytest.approx(2 / 3, abs=1e-12)


def test_dapo_is_grpo_with_clip_higher_and_token_mean_by_hand():
    # clip(r, 0.8, 1.28): seq 0 tok 0 (e^0.3 = 1.3499 > 1.28, A > 0) -> 1.28; tok 1 (0.74 < 0.8) unclipped
    # since A > 0; seq 1 tok 0 (0.74, A < 0) -> 0.8 A; tok 1 (1.35, A < 0) unclipped.
    obj = [1.28, exp(-0.3), exp(0.05), 1.0, -0.5 * 0.8, -0.5 * exp(0.3)]
    loss, grad, _ = run("dapo", clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-sum(obj) / 9, abs=1e-12)
    expected = table([[0.0, -exp(-0.3) / 9, -exp(0.05) / 9, -1 / 9], [0.0, 0.5 * exp(0.3) / 9], [0.0] * 3])
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_dr_grpo_divides_by_the_budget_not_the_length():
    # 1/3 sum_i 1/max_len sum_t with max_len = 8 (the generation budget), clip 0.2 / 0.27
    obj = [1.27, exp(-0.3), exp(0.05), 1.0, -0.5 * 0.8, -0.5 * exp(0.3)]
    loss, grad, _ = run("dr_grpo", clip_low=0.2, clip_high=0.27, max_len=8)
    assert loss.item() == pytest.approx(-sum(obj) / 24, abs=1e-12)
    expected = table([[0.0, -exp(-0.3) / 24, -exp(0.05) / 24, -1 / 24], [0.0, 0.5 * exp(0.3) / 24], [0.0] * 3])
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", available())
def test_on_policy_every_member_is_the_plain_policy_gradient(name):
    # logp == old_logp, N = 4 sequences of equal length L = 3 (= the budget, Dr. GRPO's normaliser):
    # every member gives d loss / d logp_it = -A_i / (N L).
    n, length = 4, 3
    logp = (-1.0 - 0.1 * torch.arange(n * length, dtype=F64).reshape(n, length)).requires_grad_(True)
    adv = torch.tensor([1.5, -0.5, 0.0, -1.0], dtype=F64)
    bounds = {"clip_low": 0.2, "clip_high": 0.28}
    loss, _ = policy_loss(name, logp=logp, old_logp=logp.detach().clone(), advantages=adv,
                          mask=torch.ones((n, length), dtype=F64), max_len=length, **bounds)
    loss.backward()
    # LUSPO weights each sequence's term by its length |y_i| = L by design (arXiv 2602.05261): L times the others'
    expected = (-adv / (n * length) * (length if name == "luspo" else 1)).unsqueeze(-1).expand(n, length)
    torch.testing.assert_close(logp.grad, expected, atol=1e-12, rtol=0)
