"""Where the family's members anchor (issue 47): OPSM's mask and DPPO's trust region read the sampler's own log-probs
(LossInputs.sampler_logp) whichever pi_old the loss's ratio gets; DPPO's defaults as its authors run it; DPPO's clip
fraction counts every dropped token; GDPO's advantage of a group constant in every component. Values by hand, float64.
"""

from math import exp, log

import pytest
import torch

from gspo.algos import constant_components, gdpo_advantages, policy_loss
from gspo.algos.dppo import DppoOptions
from tests.algos.algos_batches import F64

# four sequences of two tokens; the update has not moved from the trainer's old policy (logp = old_logp), and the
# sampler's log-probs lie 0.6 above the trainer's on every token (a mismatched sampler, as vLLM or bf16 can give)
OLD = torch.tensor([[-1.0, -2.0], [-1.5, -0.5], [-0.7, -1.2], [-2.0, -1.0]], dtype=F64)
SAMPLER = OLD + 0.6
MASK = torch.ones((4, 2), dtype=F64)
ADV = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=F64)
CLIP = {"clip_low": 0.2, "clip_high": 0.27}


def _opsm(advantages, *, sampler):
    logp = OLD.clone().requires_grad_(True)
    loss, m = policy_loss("opsm", logp=logp, old_logp=OLD, advantages=advantages, mask=MASK, delta=0.5,
                          aggregation="seq_mean_token_mean", sampler_logp=sampler, **CLIP)
    loss.backward()
    return loss, logp.grad, m


def test_opsm_under_token_tis_masks_on_the_sampler_logprobs_as_trl():
    # kind=tis at token level (TRL's token_truncate beside its OPSM): c_it = min(exp(old - sampler), 2) = e^-0.6 on
    # every token, the advantages A_i c_it [N, T]; the loss's old log-probs are the trainer's, so r = 1.
    # The mask: 1/|y_i| sum_t (sampler - logp) = 0.6 > delta 0.5 for every sequence: both A < 0 ones dropped.
    c = exp(-0.6)
    loss, grad, m = _opsm(ADV[:, None] * c * MASK, sampler=SAMPLER)
    assert m["clip/opsm_masked_frac"].item() == 0.5  # TRL's, from sampling_per_token_logps; 0.00 on old_logp
    # J = 1/4 sum_i M_i 1/2 sum_t A_i c r = 1/4 (1 + 0.5) c;  d(-J)/d logp_it = -M_i A_i c / 8 (r = 1, unclipped)
    assert loss.item() == pytest.approx(-1.5 * c / 4, abs=1e-15)
    want = torch.tensor([[-c / 8] * 2, [0.0] * 2, [-0.5 * c / 8] * 2, [0.0] * 2], dtype=F64)
    torch.testing.assert_close(grad, want, atol=1e-15, rtol=0)
    # without sampler log-probs pi_old stands in: the update's drift alone (0 here) masks nothing
    assert _opsm(ADV, sampler=None)[2]["clip/opsm_masked_frac"].item() == 0.0


def test_opsm_reads_the_sign_of_a_sequence_from_its_token_advantages():
    # a sequence's token advantages A_i c_it with some c = 0 (a token masked by MIS): its sign is A_i's
    adv = ADV[:, None] * torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=F64)
    # seq 3's every weight 0: nothing to drop (its terms are 0 anyway), so only seq 1 counts as negative
    assert _opsm(adv, sampler=SAMPLER)[2]["clip/opsm_masked_frac"].item() == 0.25


# DPPO-TV with thresholds 0.15 / 0.15, token_mean over 6 tokens; p = pi, the trainer's old policy equal to pi (on
# policy for the trainer), the sampler's probabilities apart on the first token of each sequence:
P = [[0.5, 0.3], [0.2, 0.6], [0.4, 0.5]]
S = [[0.3, 0.3], [0.4, 0.6], [0.6, 0.5]]
DPPO_ADV = [1.0, -1.0, 0.0]


def _dppo(**options):
    logp = torch.tensor([[log(x) for x in row] for row in P], dtype=F64, requires_grad=True)
    sampler = torch.tensor([[log(x) for x in row] for row in S], dtype=F64)
    loss, m = policy_loss("dppo_tv", logp=logp, old_logp=logp.detach().clone(),
                          advantages=torch.tensor(DPPO_ADV, dtype=F64),
                          mask=torch.ones((3, 2), dtype=F64), clip_low=0.15, clip_high=0.15, sampler_logp=sampler,
                          aggregation="token_mean", **options)
    loss.backward()
    return loss, logp.grad, m


def test_dppo_is_anchored_at_the_sampler_by_default():
    # q = the sampler's: token 0 of seq 0 (A > 0) moved p - q = +0.2 > 0.15: dropped; of seq 1 (A < 0) -0.2 < -0.15:
    # dropped; of seq 2 (A = 0) -0.2: dropped by the A <= 0 branch. Tokens 1: p = q, r = 1, kept.
    # J = 1/6 [1 * log 0.3 - 1 * log 0.6 + 0]; d(-J)/d logp_it = -keep A r / 6
    loss, grad, m = _dppo()
    assert loss.item() == pytest.approx(-(log(0.3) - log(0.6)) / 6, abs=1e-15)
    want = torch.tensor([[0.0, -1 / 6], [0.0, 1 / 6], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(grad, want, atol=1e-15, rtol=0)
    # clip/token_frac counts every dropped token, the A = 0 one too (verl's clipfrac): 3 of 6, low (A <= 0) 2
    assert m["clip/token_frac"].item() == pytest.approx(0.5, abs=1e-15)
    assert (m["clip/low_frac"].item(), m["clip/high_frac"].item()) == pytest.approx((2 / 6, 1 / 6), abs=1e-15)
    # the ratio metrics are the loss's own ratio, pi / pi_s: seq 0 token 0 at 0.5 / 0.3
    assert m["ratio/token_max"].item() == pytest.approx(0.5 / 0.3, abs=1e-12)


def test_dppo_anchored_at_the_trainer_reads_pi_old():
    # q = pi_old = p: nothing moved, nothing dropped, r = 1: J = 1/6 sum_i A_i sum_t log p_it
    loss, grad, m = _dppo(anchor="trainer")
    j = sum(a * sum(log(x) for x in row) for a, row in zip(DPPO_ADV, P, strict=True)) / 6
    assert loss.item() == pytest.approx(-j, abs=1e-15) and m["clip/token_frac"].item() == 0.0
    torch.testing.assert_close(grad, torch.tensor([[-1 / 6] * 2, [1 / 6] * 2, [0.0] * 2], dtype=F64), atol=1e-15,
                               rtol=0)


def test_dppo_kl_reads_the_same_anchor():
    # Binary-KL at 0.05: seq 0 token 0, q = 0.3 -> p = 0.5 (A > 0, toward the unsafe side): D = 0.3 log(0.3/0.5) +
    # 0.7 log(0.7/0.5) = 0.0823 > 0.05: dropped; on the trainer's anchor (q = p) D = 0: kept
    d = 0.3 * log(0.3 / 0.5) + 0.7 * log(0.7 / 0.5)
    assert d > 0.05
    _, grad, _ = _dppo_kl()
    assert grad[0, 0].item() == 0.0 and grad[0, 1].item() == pytest.approx(-1 / 6, abs=1e-15)
    _, grad, _ = _dppo_kl(anchor="trainer")
    assert grad[0, 0].item() == pytest.approx(-1 / 6, abs=1e-15)


def _dppo_kl(**options):
    logp = torch.tensor([[log(x) for x in row] for row in P], dtype=F64, requires_grad=True)
    sampler = torch.tensor([[log(x) for x in row] for row in S], dtype=F64)
    loss, m = policy_loss("dppo_kl", logp=logp, old_logp=logp.detach().clone(),
                          advantages=torch.tensor(DPPO_ADV, dtype=F64), mask=torch.ones((3, 2), dtype=F64),
                          clip_low=0.05, clip_high=0.05, sampler_logp=sampler, aggregation="token_mean", **options)
    loss.backward()
    return loss, logp.grad, m


def test_dppo_default_cap_leaves_a_large_weight_untruncated_as_the_authors():
    # the authors' scripts: clip_ratio_c = 10000 ("disable dual-clip PPO and TIS"). A rare token the policy raised
    # against a negative advantage (q = 0.01 -> p = 0.5, A < 0: p - q >= -d_lo, kept) weighs r = 50, not 20
    logp = torch.tensor([[log(0.5)]], dtype=F64, requires_grad=True)
    loss, _ = policy_loss("dppo_tv", logp=logp, old_logp=torch.tensor([[log(0.01)]], dtype=F64),
                          advantages=torch.tensor([-1.0], dtype=F64), mask=torch.ones((1, 1), dtype=F64),
                          clip_low=0.15, clip_high=0.15, aggregation="token_mean")
    loss.backward()
    assert logp.grad.item() == pytest.approx(50.0, rel=1e-12)  # d(-J)/d logp = -keep min(r, c) A = 50
    assert DppoOptions().tis_cap == 10000.0 and DppoOptions().anchor == "sampler"


def test_a_group_constant_in_every_component_gets_exactly_zero():
    # group 0 teaches (correctness varies), group 1 is constant in both components (a group dynamic sampling put
    # back to fill the batch): its S = 0, and the batch mean of S is 0 only up to rounding, so it is set to 0
    comps = torch.tensor([[1, 1], [0, 1], [0, 0], [1, 0], [1, 0], [1, 0]], dtype=F64)
    assert constant_components(comps, 3).tolist() == [False, True]
    adv = gdpo_advantages(comps, 3)
    assert torch.equal(adv[3:], torch.zeros(3, dtype=F64)) and (adv[:3] != 0).all()
    # a group whose correctness is constant and format varies teaches format: not constant in every component
    assert constant_components(torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=F64), 3).tolist() == [False]
