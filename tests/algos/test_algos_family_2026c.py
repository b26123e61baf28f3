"""Issue 62, the rest of the family, by hand in float64 from each peer's written formula (math.log / math.exp, never
the implementation's helpers): prime-rl's default loss (DPPO's sign-free IPO mask and its squared-log-ratio term to
the sampler), verl's DRO, IcePop at the sampler, verl's seq-mean-token-sum aggregation and the entropy bonus."""

from math import log

import pytest
import torch

from gspo.algos import policy_loss
from tests.algos.algos_batches import F64, make_batch

# Six one-token rows, q = 0.5 everywhere (the sampler's), A = +-1:
#   row   p    A    p - q   DPPO's sign mask (0.2 / 0.2)     prime-rl's IPO mask (sign-free)
#   0    0.2   +1   -0.3    kept (A > 0 gates only a rise)   dropped (fell past 0.2)
#   1    0.8   +1   +0.3    dropped                          dropped
#   2    0.8   -1   +0.3    kept (A < 0 gates only a fall)   dropped
#   3    0.2   -1   -0.3    dropped                          dropped
#   4    0.6   +1   +0.1    kept                             kept
#   5    0.4   -1   -0.1    kept                             kept
P, Q, A = [0.2, 0.8, 0.8, 0.2, 0.6, 0.4], 0.5, [1.0, 1.0, -1.0, -1.0, 1.0, -1.0]
KEPT = {"sign": [0, 2, 4, 5], "ipo": [4, 5]}
# Binary-KL: D(0.2 or 0.8, 0.5) = 0.223 > 0.05 (past it), D(0.6 or 0.4, 0.5) = 0.0204 < 0.05: the same rows kept
BOUNDS = {"dppo_tv": 0.2, "dppo_kl": 0.05}


def dppo_rows(name, mask, kl_tau, old=0.3):
    """The rows through `name` anchored at the sampler (q = 0.5), pi_old another number (0.3) that must not enter."""
    logp = torch.tensor([[log(p)] for p in P], dtype=F64, requires_grad=True)
    loss, m = policy_loss(name, logp=logp, old_logp=torch.full((6, 1), log(old), dtype=F64),
                          sampler_logp=torch.full((6, 1), log(Q), dtype=F64), advantages=torch.tensor(A, dtype=F64),
                          mask=torch.ones((6, 1), dtype=F64), clip_low=BOUNDS[name], clip_high=BOUNDS[name],
                          aggregation="token_mean", sides=mask, kl_tau=kl_tau)
    loss.backward()
    return loss.item(), logp.grad[:, 0].tolist(), m


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
@pytest.mark.parametrize("mask", ["sign", "ipo"])
@pytest.mark.parametrize("kl_tau", [0.0, 0.1])
def test_prime_rl_default_loss_ipo_mask_and_squared_log_ratio_by_hand(name, mask, kl_tau):
    # prime-rl: loss = 1/T sum_t [-keep_t r_t A_t + tau (log p_t - log q_t)^2]; gspo's policy term holds
    # sg(r) A log p (the same gradient, r < 10000): value -1/6 sum_kept r A log p, gradient -r A / 6 per kept row,
    # and the squared term's gradient 2 tau log(p / q) / 6 on every row
    kept = KEPT[mask]
    value = -sum(P[i] / Q * A[i] * log(P[i]) for i in kept) / 6 + kl_tau * sum(log(p / Q) ** 2 for p in P) / 6
    grad = [(-(P[i] / Q) * A[i] if i in kept else 0.0) / 6 + 2 * kl_tau * log(P[i] / Q) / 6 for i in range(6)]
    loss, got, m = dppo_rows(name, mask, kl_tau)
    assert loss == pytest.approx(value, abs=1e-12)
    assert got == pytest.approx(grad, abs=1e-12)
    # drops by the branch that dropped them: sign, low A <= 0 (row 3), high A > 0 (row 1); ipo, by the direction
    # moved: low p < q (rows 0, 3), high p > q (rows 1, 2)
    low, high = {"sign": (1 / 6, 1 / 6), "ipo": (2 / 6, 2 / 6)}[mask]
    assert (m["clip/low_frac"].item(), m["clip/high_frac"].item()) == pytest.approx((low, high), abs=1e-15)


@pytest.mark.parametrize(("sides", "low", "high"), [("sign", 1 / 3, 0.0), ("ipo", 1 / 3, 2 / 3)])
def test_ipo_counts_its_drops_by_the_direction_moved_not_the_advantage(sides, low, high):
    # three A = -1 rows, q = 0.5: p = 0.8, 0.8 rose (DPPO keeps them: the safe side for A < 0; IPO drops them, high),
    # p = 0.2 fell (both drop it, low)
    logp = torch.tensor([[log(0.8)], [log(0.8)], [log(0.2)]], dtype=F64)
    _, m = policy_loss("dppo_tv", logp=logp, old_logp=torch.full((3, 1), log(0.5), dtype=F64),
                       advantages=-torch.ones(3, dtype=F64), mask=torch.ones((3, 1), dtype=F64), clip_low=0.2,
                       clip_high=0.2, sides=sides)
    assert (m["clip/low_frac"].item(), m["clip/high_frac"].item()) == pytest.approx((low, high), abs=1e-15)


def test_dppo_mask_and_kl_tau_are_checked():
    for bad, match in (({"mask": "both"}, "sides must be one of sign, ipo"), ({"kl_tau": -1.0}, "kl_tau must be >= 0")):
        with pytest.raises(ValueError, match=match):
            dppo_rows("dppo_tv", **{"mask": "sign", "kl_tau": 0.0, **bad})


def test_dro_value_and_gradient_by_hand():
    # seq 0: l = [0.2, -0.1], A = 1; seq 1: l = [0.4], A = -0.5; beta 0.1, token_mean over 3 tokens.
    # J = 1/3 sum_t (A log p - beta/2 l^2); d loss / d logp = -(A - beta l) / 3
    logp, old, mask = make_batch([[0.2, -0.1], [0.4]], 2)
    adv = torch.tensor([1.0, -0.5], dtype=F64)
    loss, m = policy_loss("dro", logp=logp, old_logp=old, advantages=adv, mask=mask, clip_low=0.2, clip_high=0.28,
                          beta=0.1)
    loss.backward()
    v = logp.detach()
    rows = [(0, 0, 1.0, 0.2), (0, 1, 1.0, -0.1), (1, 0, -0.5, 0.4)]
    j = sum(a * v[i, t].item() - 0.05 * d * d for i, t, a, d in rows) / 3
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    want = torch.zeros_like(v)
    for i, t, a, d in rows:
        want[i, t] = -(a - 0.1 * d) / 3
    torch.testing.assert_close(logp.grad, want, atol=1e-12, rtol=0)
    # ratios e^0.2, e^-0.1, e^0.4: only e^0.4 = 1.49 leaves the reported band [0.8, 1.28]; nothing is clipped
    assert m["clip/ratio_out_of_band_frac"].item() == pytest.approx(1 / 3, abs=1e-15)
    assert m["clip/token_frac"].item() == 0.0
    with pytest.raises(ValueError, match="beta must be > 0"):
        policy_loss("dro", logp=logp, old_logp=old, advantages=adv, mask=mask, clip_low=0.2, clip_high=0.28, beta=0.0)


def test_icepop_at_the_sampler_masks_outside_the_band_whatever_the_sign():
    # one sequence of four tokens, r = pi / pi_s = [0.4, 1.1, 1.5, 6.0], A = [1, 1, 1, -1] (per token), pi_old = pi
    # (so a ratio against pi_old would be 1 everywhere); band [0.5, 5], clip [0.8, 1.27], seq_mean_token_mean:
    #   token 0: r = 0.4 < 0.5, masked (A > 0: GRPO would have kept min(0.4, 0.8) = 0.4, with its gradient)
    #   token 1: r = 1.1 inside both: J = 1.1, d/dlogp = 1.1
    #   token 2: r = 1.5 > 1.27, A > 0: clipped, J = 1.27, no gradient
    #   token 3: r = 6 > 5, masked (A < 0: GRPO would have taken -6 with its gradient)
    ratios, adv = [0.4, 1.1, 1.5, 6.0], [1.0, 1.0, 1.0, -1.0]
    logp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=F64, requires_grad=True)
    sampler = logp.detach() - torch.tensor([[log(r) for r in ratios]], dtype=F64)
    loss, m = policy_loss("icepop", logp=logp, old_logp=logp.detach(), sampler_logp=sampler,
                          advantages=torch.tensor([adv], dtype=F64), mask=torch.ones((1, 4), dtype=F64),
                          clip_low=0.2, clip_high=0.27)
    loss.backward()
    assert loss.item() == pytest.approx(-(1.1 + 1.27) / 4, abs=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.1 / 4, 0.0, 0.0]], dtype=F64), atol=1e-12, rtol=0)
    assert m["clip/ratio_out_of_band_frac"].item() == pytest.approx(2 / 4, abs=1e-15)  # the band's two
    assert m["clip/high_frac"].item() == pytest.approx(1 / 4, abs=1e-15)  # token 2 only (token 3 was masked)
    # a narrower band masks token 2 as well
    loss, _ = policy_loss("icepop", logp=logp.detach(), old_logp=logp.detach(), sampler_logp=sampler,
                          advantages=torch.tensor([adv], dtype=F64), mask=torch.ones((1, 4), dtype=F64),
                          clip_low=0.2, clip_high=0.27, band_low=0.5, band_high=1.4)
    assert loss.item() == pytest.approx(-1.1 / 4, abs=1e-12)
    with pytest.raises(ValueError, match="band_low <= 1 <= band_high"):
        policy_loss("icepop", logp=logp.detach(), old_logp=logp.detach(), advantages=torch.ones(1, dtype=F64),
                    mask=torch.ones((1, 4), dtype=F64), clip_low=0.2, clip_high=0.27, band_high=0.9)


def test_seq_mean_token_sum_aggregation_by_hand():
    # GRPO, on-policy (r = 1, nothing clipped): J_it = A_i. seq 0: 3 tokens, A = 1; seq 1: 1 token, A = -2.
    # seq_mean_token_sum (verl): 1/2 (3 * 1 + 1 * -2) = 0.5; d loss / d logp_it = -A_i / 2 (no length normaliser:
    # seq_mean_token_mean's would be -A_i / (2 |y_i|), token_mean's -A_i / 4)
    logp, old, mask = make_batch([[0.0, 0.0, 0.0], [0.0]], 3)
    loss, _ = policy_loss("grpo", logp=logp, old_logp=old, advantages=torch.tensor([1.0, -2.0], dtype=F64), mask=mask,
                          clip_low=0.2, clip_high=0.27, aggregation="seq_mean_token_sum")
    loss.backward()
    assert loss.item() == pytest.approx(-0.5, abs=1e-15)
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, -0.5, -0.5], [1.0, 0.0, 0.0]], dtype=F64), atol=1e-15,
                               rtol=0)
    # micro-batches: seq_denominator replaces the local count, so the two rows' losses sum to the whole's
    parts = [policy_loss("grpo", logp=logp.detach()[i:i + 1], old_logp=old[i:i + 1],
                         advantages=torch.tensor([[1.0, -2.0][i]], dtype=F64), mask=mask[i:i + 1], clip_low=0.2,
                         clip_high=0.27, aggregation="seq_mean_token_sum", seq_denominator=2.0)[0].item()
             for i in range(2)]
    assert sum(parts) == pytest.approx(-0.5, abs=1e-15)


@pytest.mark.parametrize("name", ["grpo", "gspo", "cispo"])
def test_entropy_bonus_subtracts_the_reduced_entropy_and_its_gradient(name):
    # H = [[1.2, 0.7, 9.0 (padding)], [0.3, ...]]: the bonus c = 0.05 reduced as the algorithm's J: grpo and gspo
    # 1/N sum_i 1/|y_i| sum_t (seq 0: 1.9 / 2, seq 1: 0.3 / 1), cispo 1/T sum (2.2 / 3). dloss/dH_it = -c x weight.
    logp, old, mask = make_batch([[0.1, -0.1], [0.05]], 3)
    entropy = torch.tensor([[1.2, 0.7, 9.0], [0.3, 9.0, 9.0]], dtype=F64, requires_grad=True)
    args = {"logp": logp, "old_logp": old, "advantages": torch.tensor([1.0, -1.0], dtype=F64), "mask": mask,
            "clip_low": 0.2, "clip_high": 0.27}
    base, _ = policy_loss(name, **args)
    loss, _ = policy_loss(name, **args, entropy=entropy, entropy_coef=0.05)
    loss.backward()
    if name == "cispo":
        bonus, weights = 2.2 / 3, [[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]]
    else:
        bonus, weights = (1.9 / 2 + 0.3) / 2, [[1 / 4, 1 / 4, 0.0], [1 / 2, 0.0, 0.0]]
    assert loss.item() - base.item() == pytest.approx(-0.05 * bonus, abs=1e-14)
    torch.testing.assert_close(entropy.grad, -0.05 * torch.tensor(weights, dtype=F64), atol=1e-15, rtol=0)
    # zero: the loss tensor is the same, to the last digit, and entropy_coef without an entropy is refused
    assert policy_loss(name, **args, entropy=entropy, entropy_coef=0.0)[0].item() == base.item()
    with pytest.raises(ValueError, match="entropy_coef=0.05 needs entropy"):
        policy_loss(name, **args, entropy_coef=0.05)
