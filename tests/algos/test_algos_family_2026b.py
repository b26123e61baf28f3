"""Issue 62: the thin nets made thick (DPPO Binary-KL's safe side, GSPO-token's stop-gradient) and the new members
and options by hand in float64, each from its paper's (or its peer's documented) formula, written with math.exp:
CISPO anchored at the sampler, the trust-region sequence mask with a token veto (k3_rs), Geo-RS and TIS at once
(geo_rs_tis), LUSPO, VESPO and the leave-one-out advantage.
"""

from math import exp, log

import pytest
import torch

from gspo.algos import correction_weights, policy_loss
from gspo.algos.advantages import loo_advantages
from tests.algos.algos_batches import F64
from tests.algos.test_algos_corrections import batch as correction_batch


def one_token_rows(p, q, adv, name="dppo_kl", **options):
    """Sequences of one token each: probabilities p (policy) and q (old / anchor), advantages adv."""
    logp = torch.tensor([[log(x)] for x in p], dtype=F64).requires_grad_(True)
    old = torch.tensor([[log(x)] for x in q], dtype=F64)
    loss, metrics = policy_loss(name, logp=logp, old_logp=old, advantages=torch.tensor(adv, dtype=F64),
                                mask=torch.ones((len(p), 1), dtype=F64), **options)
    loss.backward()
    return loss, logp.grad[:, 0], metrics


KL = {"clip_low": 0.01, "clip_high": 0.01, "aggregation": "token_mean"}  # thresholds far below D = 0.223 below


def bernoulli_kl(p, q):
    return q * log(q / p) + (1 - q) * log((1 - q + 1e-8) / (1 - p + 1e-8))


def test_binary_kl_keeps_a_positive_advantage_token_that_fell_whatever_its_divergence():
    # A > 0: p 0.5 -> 0.2 moved against the push (the safe side): kept, weight p / q = 0.4; p 0.5 -> 0.8 moved with
    # it past the threshold: dropped. Both have D = 0.223 >> 0.01.
    assert bernoulli_kl(0.2, 0.5) > 0.2 and bernoulli_kl(0.8, 0.5) > 0.2
    loss, grad, _ = one_token_rows([0.2, 0.8], [0.5, 0.5], [1.0, 1.0], **KL)
    torch.testing.assert_close(grad, torch.tensor([-0.4 / 2, 0.0], dtype=F64), atol=1e-12, rtol=0)
    assert loss.item() == pytest.approx(-(0.4 * log(0.2)) / 2, abs=1e-12)


def test_binary_kl_keeps_a_negative_advantage_token_that_rose_whatever_its_divergence():
    # A < 0: p 0.5 -> 0.8 moved against the push down (the safe side): kept, weight 1.6; p 0.5 -> 0.2: dropped.
    loss, grad, _ = one_token_rows([0.8, 0.2], [0.5, 0.5], [-1.0, -1.0], **KL)
    torch.testing.assert_close(grad, torch.tensor([1.6 / 2, 0.0], dtype=F64), atol=1e-12, rtol=0)
    assert loss.item() == pytest.approx(-(1.6 * -1.0 * log(0.8)) / 2, abs=1e-12)


def test_binary_kl_both_sides_in_one_batch_value_gradient_and_metrics():
    loss, grad, m = one_token_rows([0.2, 0.8, 0.8, 0.2], [0.5] * 4, [1.0, 1.0, -1.0, -1.0], **KL)
    torch.testing.assert_close(grad, torch.tensor([-0.4 / 4, 0.0, 1.6 / 4, 0.0], dtype=F64), atol=1e-12, rtol=0)
    assert loss.item() == pytest.approx(-(0.4 * log(0.2) - 1.6 * log(0.8)) / 4, abs=1e-12)
    # dropped: row 1 (A > 0: high), row 3 (A <= 0: low); every row is past a threshold in its direction of move
    assert (m["clip/high_frac"].item(), m["clip/low_frac"].item()) == pytest.approx((0.25, 0.25), abs=1e-15)
    assert m["clip/ratio_out_of_band_frac"].item() == 1.0


def gspo_token(log_ratios, adv, width, lo, hi):
    from tests.algos.algos_batches import make_batch

    logp, old, mask = make_batch(log_ratios, width)
    loss, _ = policy_loss("gspo_token", logp=logp, old_logp=old, advantages=torch.tensor(adv, dtype=F64), mask=mask,
                          clip_low=lo, clip_high=hi)
    loss.backward()
    return loss, logp.grad


def test_gspo_token_gradient_reaches_each_token_through_its_own_log_prob_only():
    # One sequence, l = [0.1, -0.05, 0.05]: s = exp(0.1 / 3), inside [0.5, 1.5]; A = [1, -1, 2].
    # J = 1/3 sum_t s_t A_t; ds_t / dlogp_u = s 1[t = u] (sg[s_i]), so d loss / d logp_t = -s A_t / 3. Without the
    # stop-gradient every token would also get -s/3 * 1/3 sum_u A_u = -2s/9; without pi_t / sg[pi_t], nothing.
    s = exp(0.1 / 3)
    loss, grad = gspo_token([[0.1, -0.05, 0.05]], [[1.0, -1.0, 2.0]], 3, 0.5, 0.5)
    assert loss.item() == pytest.approx(-s * 2.0 / 3, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-s / 3, s / 3, -2 * s / 3]], dtype=F64), atol=1e-12, rtol=0)


def test_gspo_token_a_clipped_token_gets_no_gradient_from_its_neighbours_terms():
    # seq 0: l = [0.3, 0.3], s = e^0.3 > 1.2; A = [1, -1]: token 0 clipped (A > 0, s > 1 + 0.2), token 1 keeps -s.
    # seq 1: l = [0], s = 1, A = 0.5. J = 1/2 [(1.2 - s) / 2 + 0.5]; grads: seq 0 [0, s/4], seq 1 -1/4.
    s = exp(0.3)
    loss, grad = gspo_token([[0.3, 0.3], [0.0]], [[1.0, -1.0], [0.5, 9.0]], 2, 0.2, 0.2)
    assert loss.item() == pytest.approx(-((1.2 - s) / 2 + 0.5) / 2, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[0.0, s / 4], [-0.25, 0.0]], dtype=F64), atol=1e-12, rtol=0)


def test_cispo_anchored_at_the_sampler_weighs_pi_over_pi_s():
    # One sequence of two tokens, A = 1, cap 1 + 0.5: pi = [0.5, 0.2], pi_old = [0.4, 0.25], pi_s = [0.1, 0.25].
    # trainer: w = clip([1.25, 0.8]) = [1.25, 0.8]; sampler: w = clip([5, 0.8]) = [1.5, 0.8]; grad = -w / 2.
    logp = torch.tensor([[log(0.5), log(0.2)]], dtype=F64)
    old, sampler = torch.tensor([[log(0.4), log(0.25)]], dtype=F64), torch.tensor([[log(0.1), log(0.25)]], dtype=F64)
    for anchor, w in (("trainer", [1.25, 0.8]), ("sampler", [1.5, 0.8])):
        leaf = logp.clone().requires_grad_(True)
        loss, m = policy_loss("cispo", logp=leaf, old_logp=old, advantages=torch.ones(1, dtype=F64),
                              mask=torch.ones((1, 2), dtype=F64), clip_low=1.0, clip_high=0.5, sampler_logp=sampler,
                              anchor=anchor)
        loss.backward()
        torch.testing.assert_close(leaf.grad, -torch.tensor([w], dtype=F64) / 2, atol=1e-12, rtol=0)
        assert loss.item() == pytest.approx(-(w[0] * log(0.5) + w[1] * log(0.2)) / 2, abs=1e-12)
        assert m["clip/high_frac"].item() == (0.5 if anchor == "sampler" else 0.0)
    with pytest.raises(ValueError, match="anchor"):
        policy_loss("cispo", logp=logp, old_logp=old, advantages=torch.ones(1, dtype=F64),
                    mask=torch.ones((1, 2), dtype=F64), clip_low=1.0, clip_high=0.5, anchor="engine")


# The corrections' batch (tests/algos/test_algos_corrections.py): d = old - engine per token,
#   seq 0: d = [0.9, -0.1, -0.5];  seq 1: d = [0.2, -0.9]
def k3(d):
    return exp(d) - 1 - d


def sequence_weights(kind, **bounds):
    old, engine, mask = correction_batch()
    return correction_weights(old_logp=old, engine_logp=engine, mask=mask, kind=kind, level="sequence", **bounds)


@pytest.mark.parametrize("cap, veto, kept", [(0.2, 1e-4, [0.0, 1.0]), (0.2, 0.45, [0.0, 0.0]), (0.3, 0.45, [1.0, 0.0]),
                                             (0.3, 0.0, [1.0, 1.0])])
def test_k3_rs_masks_by_the_mean_k3_and_the_token_veto(cap, veto, kept):
    # mean k3: seq 0 (k3(0.9) + k3(-0.1) + k3(-0.5)) / 3 = 0.2237, seq 1 (k3(0.2) + k3(-0.9)) / 2 = 0.1640;
    # the veto: seq 1's rho e^-0.9 = 0.4066 < 0.45, seq 0's smallest e^-0.5 = 0.6065 is not.
    means = [(k3(0.9) + k3(-0.1) + k3(-0.5)) / 3, (k3(0.2) + k3(-0.9)) / 2]
    assert means[1] < 0.2 < means[0] < 0.3 and exp(-0.9) < 0.45 < exp(-0.5)
    c, m = sequence_weights("k3_rs", cap=cap, low=veto, high=1.0)
    torch.testing.assert_close(c, torch.tensor(kept, dtype=F64), atol=0, rtol=0)
    # masked share over tokens: seq 0 has 3 of the 5 tokens, seq 1 has 2
    assert m["correction/masked_frac"].item() == pytest.approx((3 * (1 - kept[0]) + 2 * (1 - kept[1])) / 5, abs=1e-15)


def test_geo_rs_tis_masks_by_the_geometric_mean_and_truncates_the_product():
    # geometric: seq 0 e^0.1 = 1.105, seq 1 e^-0.35 = 0.705; product: e^0.3 = 1.350, e^-0.7 = 0.497
    c, m = sequence_weights("geo_rs_tis", cap=1.2, low=0.7, high=1.2)
    torch.testing.assert_close(c, torch.tensor([1.2, exp(-0.7)], dtype=F64), atol=1e-15, rtol=0)
    c, m = sequence_weights("geo_rs_tis", cap=2.0, low=0.9, high=1.2)
    torch.testing.assert_close(c, torch.tensor([exp(0.3), 0.0], dtype=F64), atol=1e-15, rtol=0)
    assert m["correction/masked_frac"].item() == pytest.approx(2 / 5, abs=1e-15)
    with pytest.raises(ValueError, match="level must be sequence"):
        correction_weights(old_logp=torch.zeros(1, 1), engine_logp=torch.zeros(1, 1), mask=torch.ones(1, 1),
                           kind="geo_rs_tis", level="token", cap=2.0, low=0.5, high=2.0)


def test_luspo_weights_gspos_term_by_the_sequence_length():
    from tests.algos.algos_batches import make_batch

    # seq 0: l = [0.1, 0.0], s0 = e^0.05 inside [0.8, 1.2]; seq 1: l = [0.4], s1 = e^0.4 > 1.2, clipped (A = 1 > 0).
    # J = 1/2 (2 s0 + 1 * 1.2); d loss / d logp_0t = -1/2 * 2 * s0 / 2 = -s0 / 2 (GSPO's: -s0 / 4), seq 1: 0.
    logp, old, mask = make_batch([[0.1, 0.0], [0.4]], 2)
    loss, m = policy_loss("luspo", logp=logp, old_logp=old, advantages=torch.ones(2, dtype=F64), mask=mask,
                          clip_low=0.2, clip_high=0.2)
    loss.backward()
    s0 = exp(0.05)
    assert loss.item() == pytest.approx(-(2 * s0 + 1.2) / 2, abs=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[-s0 / 2, -s0 / 2], [0.0, 0.0]], dtype=F64), atol=1e-12, rtol=0)
    assert m["clip/high_frac"].item() == pytest.approx(1 / 3, abs=1e-15)


def phi(log_w, k, lam):
    return exp(lam + k * log_w - lam * exp(log_w))


def test_vespo_value_and_gradient_by_hand():
    from tests.algos.algos_batches import make_batch

    # seq 0: l = [0.2, -0.1], log w = 0.1, A = 1 > 0: phi(k 2, lam 3); seq 1: l = [-0.3], log w = -0.3, A = -0.5: phi(3, 2)
    logp, old, mask = make_batch([[0.2, -0.1], [-0.3]], 2)
    adv = torch.tensor([1.0, -0.5], dtype=F64)
    loss, m = policy_loss("vespo", logp=logp, old_logp=old, advantages=adv, mask=mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    p0, p1 = phi(0.1, 2.0, 3.0), phi(-0.3, 3.0, 2.0)
    values = logp.detach()
    # J = 1/3 [p0 * 1 * (logp_00 + logp_01) + p1 * (-0.5) * logp_10]   (token_mean over 3 tokens)
    j = (p0 * (values[0, 0] + values[0, 1]) - 0.5 * p1 * values[1, 0]).item() / 3
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[-p0 / 3, -p0 / 3], [0.5 * p1 / 3, 0.0]], dtype=F64),
                               atol=1e-12, rtol=0)
    assert m["clip/token_frac"].item() == 0.0
    assert phi(0.0, 2.0, 3.0) == pytest.approx(1.0)  # on-policy: the plain policy gradient


def test_leave_one_out_advantages_by_hand():
    # G = 4, rewards [1, 0, 0, 1]: A_0 = 1 - (0 + 0 + 1) / 3 = 2/3, A_1 = 0 - (1 + 0 + 1) / 3 = -2/3; a group of
    # equal rewards gets exactly 0; scale="std" divides by the Bessel std + eps (std of [1, 0, 0, 1] = sqrt(1/3)).
    got = loo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.3, 0.3, 0.3], dtype=F64), 4)
    torch.testing.assert_close(got, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0], dtype=F64), atol=1e-15,
                               rtol=0)
    got = loo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64), 4, scale="std", eps=0.0)
    torch.testing.assert_close(got, torch.tensor([2, -2, -2, 2], dtype=F64) / 3 / (1 / 3) ** 0.5, atol=1e-15, rtol=0)
    with pytest.raises(ValueError, match="leave-one-out"):
        loo_advantages(torch.ones(4), 4, scale="mean")
