"""DeepSeek-V3.2's unbiased KL (arXiv 2512.02556, eq. 7; TRL's use_bias_correction_kl): the k3 term weighted by the
token ratio r = pi / pi_old, its gradient included, by hand in float64; and the card and the config carry it."""

from math import exp

import pytest
import torch

from gspo.algos import policy_loss
from gspo.conf import compose_config
from gspo.trainer.step.explain import estimator_card

F64 = torch.float64


def kl_grad(unbiased):
    # One sequence of two tokens, A = 0 (the policy term adds nothing): logp = [-1, -2], pi_old = [-1.2, -1.9],
    # ref = [-1.1, -2.5]; GRPO's seq_mean_token_mean, beta 0.1: the term is 0.1 / 2 sum_t w_t k3_t with
    # k3_t = e^(ref - logp) - (ref - logp) - 1 and w_t = 1 (plain) or r_t = e^(logp - old) (unbiased).
    logp = torch.tensor([[-1.0, -2.0]], dtype=F64, requires_grad=True)
    loss, m = policy_loss("grpo", logp=logp, old_logp=torch.tensor([[-1.2, -1.9]], dtype=F64),
                          advantages=torch.zeros(1, dtype=F64), mask=torch.ones((1, 2), dtype=F64), clip_low=0.2,
                          clip_high=0.27, ref_logp=torch.tensor([[-1.1, -2.5]], dtype=F64), kl_beta=0.1,
                          kl_unbiased=unbiased)
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), m["policy/kl_ref"].item()


@pytest.mark.parametrize("unbiased", [False, True])
def test_the_unbiased_kl_weighs_k3_by_the_ratio_value_and_gradient(unbiased):
    d = [-1.1 + 1.0, -2.5 + 2.0]  # ref - logp
    r = [exp(0.2), exp(-0.1)]  # pi / pi_old
    k3 = [exp(x) - x - 1 for x in d]
    w = r if unbiased else [1.0, 1.0]
    # d(w k3)/dlogp = w (1 - e^d) + (w k3 if unbiased, from dr/dlogp = r)
    grads = [0.05 * (w[t] * (1 - exp(d[t])) + (w[t] * k3[t] if unbiased else 0.0)) for t in range(2)]
    loss, grad, logged = kl_grad(unbiased)
    assert loss == pytest.approx(0.05 * (w[0] * k3[0] + w[1] * k3[1]), abs=1e-14)
    assert grad == pytest.approx(grads, abs=1e-14)
    assert logged == pytest.approx((k3[0] + k3[1]) / 2, abs=1e-14)  # the logged KL is the plain k3 mean either way


def test_the_config_and_the_card_carry_it():
    cfg = compose_config(["algo=grpo", "algo.kl_beta=0.04", "algo.kl_unbiased=true"])
    assert "weighted by r_it = pi / pi_old per token, DeepSeek-V3.2's unbiased KL" in estimator_card(cfg)
    assert "unbiased" not in estimator_card(compose_config(["algo=grpo", "algo.kl_beta=0.04"]))
