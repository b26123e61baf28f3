"""Properties every loss must keep, and regression tests for the aggregation bugs peers shipped.

Random batches here are float64 and seeded; equalities are checked to 1e-12.
"""

import itertools
from functools import partial
from math import exp

import pytest
import torch

from gspo.algos import AGGREGATIONS, policy_loss

F64 = torch.float64
LENGTHS = [5, 2, 3, 1]
WIDTH = 5
CLIP = {"clip_low": 0.2, "clip_high": 0.27}
ALL_CASES = [*itertools.product(["grpo"], AGGREGATIONS), ("gspo", None), ("gspo_token", None),  # GRPO's option
             *[(name, None) for name in ("dapo", "dr_grpo", "cispo", "sapo", "gmpo", "dppo_tv", "dppo_kl", "opsm",
                                         "maxrl", "gdpo")]]  # their defaults


def own(algo, aggregation):
    """The algorithm's own options: GRPO's aggregation (GSPO has none)."""
    return {"aggregation": aggregation} if aggregation is not None else {}


def random_batch(seed=0, lengths=LENGTHS, width=WIDTH, spread=0.3):
    """Off-policy batch: logp, old_logp, ref_logp, mask [N, width], advantages [N]."""
    gen = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros((n, width), dtype=F64)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1.0
    logp = -torch.rand((n, width), generator=gen, dtype=F64) * 3
    old = logp + spread * torch.randn((n, width), generator=gen, dtype=F64)
    ref = logp + spread * torch.randn((n, width), generator=gen, dtype=F64)
    adv = torch.randn(n, generator=gen, dtype=F64)
    return logp, old, ref, mask, adv


def loss_and_grad(algo, logp, old, mask, adv, **options):
    leaf = logp.detach().clone().requires_grad_(True)
    loss, metrics = policy_loss(algo, logp=leaf, old_logp=old, advantages=adv, mask=mask, **{**CLIP, **options})
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def test_on_policy_grpo_and_gspo_give_the_same_gradient():
    # With old_logp = logp every ratio is 1: both gradients are -(1/N)(1/|y_i|) A_i per token, whatever the
    # lengths (the whole family, lengths equal: tests/algos/test_algos_family.py).
    logp, _, _, mask, adv = random_batch()
    results = [loss_and_grad(algo, logp, logp.detach(), mask, adv) for algo in ("grpo", "gspo", "gspo_token")]
    for loss, grad, _ in results[1:]:
        torch.testing.assert_close(loss, results[0][0], atol=1e-12, rtol=0)
        torch.testing.assert_close(grad, results[0][1], atol=1e-12, rtol=0)
    expected = -adv[:, None] * mask / torch.tensor(LENGTHS, dtype=F64)[:, None] / len(LENGTHS)
    torch.testing.assert_close(results[0][1], expected, atol=1e-12, rtol=0)


def test_gspo_token_equals_gspo_off_policy_with_equal_token_advantages():
    # Narrow bounds so that some sequences are clipped and some are not.
    logp, old, _, mask, adv = random_batch(seed=3, lengths=[5, 2, 3, 1, 4, 5], spread=0.1)
    options = {"clip_low": 0.03, "clip_high": 0.03}
    gspo_loss, gspo_grad, gspo_m = loss_and_grad("gspo", logp, old, mask, adv, **options)
    token_adv = adv[:, None].expand_as(mask).clone()
    tok_loss, tok_grad, tok_m = loss_and_grad("gspo_token", logp, old, mask, token_adv, **options)
    assert 0.0 < gspo_m["clip/seq_frac"].item() < 1.0
    torch.testing.assert_close(tok_loss, gspo_loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(tok_grad, gspo_grad, atol=1e-12, rtol=0)
    for name in gspo_m:
        torch.testing.assert_close(tok_m[name], gspo_m[name], atol=1e-12, rtol=0)


def garbage_columns(x, kind, gen):
    """`x` [N, T] with three more columns: large finite numbers (that would overflow exp() if they
    leaked into a ratio), or non-finite ones as a model may emit at masked positions."""
    if kind == "finite":
        extra = 80 * torch.randn((x.shape[0], 3), generator=gen, dtype=F64)
    else:
        extra = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=F64).expand(x.shape[0], 3)
    return torch.cat([x, extra], dim=1)


@pytest.mark.parametrize("kind", ["finite", "non_finite"])
@pytest.mark.parametrize("algo, aggregation", ALL_CASES)
def test_padding_columns_change_nothing(algo, aggregation, kind):
    logp, old, ref, mask, adv = random_batch(seed=1)
    options = {**own(algo, aggregation), "max_len": 7, "ref_logp": ref, "kl_beta": 0.1}
    loss, grad, metrics = loss_and_grad(algo, logp, old, mask, adv, **options)

    pad = partial(garbage_columns, kind=kind, gen=torch.Generator().manual_seed(2))
    wide_mask = torch.cat([mask, torch.zeros((mask.shape[0], 3), dtype=F64)], dim=1)
    wide = {**options, "ref_logp": pad(ref)}
    loss2, grad2, metrics2 = loss_and_grad(algo, pad(logp), pad(old), wide_mask, adv, **wide)

    torch.testing.assert_close(loss2, loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad2[:, :WIDTH], grad, atol=1e-12, rtol=0)
    assert torch.equal(grad2[:, WIDTH:], torch.zeros_like(grad2[:, WIDTH:]))
    for name in metrics:
        torch.testing.assert_close(metrics2[name], metrics[name], atol=1e-12, rtol=0)


@pytest.mark.parametrize("algo, aggregation", ALL_CASES)
def test_micro_batches_with_global_denominators_sum_to_the_minibatch(algo, aggregation):
    # Regression (dp-size / grad-accum scaling of means): each micro-batch must be divided by the
    # minibatch's sequence / token counts, not its own, and not by "number of micro-batches".
    logp, old, ref, mask, adv = random_batch(seed=4, lengths=[5, 1, 2, 4, 3])
    options = {**own(algo, aggregation), "max_len": WIDTH, "ref_logp": ref, "kl_beta": 0.1}
    full_loss, full_grad, _ = loss_and_grad(algo, logp, old, mask, adv, **options)

    global_counts = {"seq_denominator": 5, "token_denominator": mask.sum().item()}
    total, naive, grads = 0.0, 0.0, []
    for rows in ([0], [1, 2], [3, 4]):
        width = int(mask[rows].sum(-1).max())  # a micro-batch is padded only to its own longest row
        part = [x[rows, :width] for x in (logp, old, mask)]
        local = {**options, "ref_logp": ref[rows, :width]}
        loss, grad, _ = loss_and_grad(algo, *part, adv[rows], **local, **global_counts)
        total = total + loss
        naive = naive + loss_and_grad(algo, *part, adv[rows], **local)[0] / 3
        grads.append(torch.nn.functional.pad(grad, (0, WIDTH - width)))

    torch.testing.assert_close(total, full_loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.cat(grads), full_grad, atol=1e-12, rtol=0)
    assert abs((naive - full_loss).item()) > 1e-4  # the buggy scaling is visibly wrong here


@pytest.mark.parametrize("algo", ["gspo", "gspo_token"])
def test_gspo_never_weights_a_sequence_by_its_length(algo):
    # Regression (length-weighted sequence losses under token-sum / token-mean aggregation): two
    # sequences with the same per-token log-ratio 0.05 and A = 1, lengths 1 and 10. Each must get
    # the same total gradient on its log-likelihood, -(1/2) s with s = exp(0.05).
    mask = torch.zeros((2, 10), dtype=F64)
    mask[0, :1], mask[1, :] = 1.0, 1.0
    old = torch.full((2, 10), -2.0, dtype=F64)
    logp = (old + 0.05) * mask + 5.0 * (1 - mask)
    adv = torch.ones(2, dtype=F64)
    loss, grad, _ = loss_and_grad(algo, logp, old, mask, adv, max_len=10)
    s = exp(0.05)
    assert loss.item() == pytest.approx(-s, abs=1e-12)
    torch.testing.assert_close(grad.sum(-1), torch.tensor([-s / 2, -s / 2], dtype=F64), atol=1e-12, rtol=0)


def test_gspo_token_normalises_by_each_sequence_length():
    # Regressions (per-token division bugs in GSPO-token): lengths 1 and 4, l = 0.1 everywhere,
    # A = [2, 1], wide clip. Correct: J = 1/2 [2 s + s] with s = exp(0.1), and every token of
    # sequence i gets dloss/dlogp = -(1/2)(1/|y_i|) A_i s.
    # - normalising by the batch's 5 tokens instead of each length gives J = (2 s + 4 s) / 5;
    # - dividing the token term of log s_it by |y_i| shrinks sequence 1's gradient to -s / 32.
    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1]], dtype=F64)
    old = torch.full((2, 4), -1.0, dtype=F64)
    logp = old + 0.1
    adv = torch.tensor([2.0, 1.0], dtype=F64)
    loss, grad, _ = loss_and_grad("gspo_token", logp, old, mask, adv, clip_low=0.5, clip_high=0.5)
    s = exp(0.1)
    assert loss.item() == pytest.approx(-1.5 * s, abs=1e-12)
    expected = torch.tensor([[-s, 0, 0, 0], [-s / 8] * 4], dtype=F64)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


# Reference KL by hand: on-policy (policy term -(1/N) sum A_i), d = ref - logp per token.
KL_D = [[0.2, -0.1], [0.3]]


def k3(d):
    return exp(d) - d - 1


def kl_batch():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=F64)
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 4.0]], dtype=F64)
    ref = logp + torch.tensor([[0.2, -0.1], [0.3, 60.0]], dtype=F64)  # 60: padding garbage
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    return logp, ref, mask, adv


@pytest.mark.parametrize("algo", ["grpo", "gspo", "gspo_token"])
def test_k3_reference_kl_value_and_gradient(algo):
    # Default aggregation: loss = -(1/2)(1 - 1) + beta * 1/2 [(k3(0.2) + k3(-0.1)) / 2 + k3(0.3)]
    logp, ref, mask, adv = kl_batch()
    loss, grad, m = loss_and_grad(algo, logp, logp.detach(), mask, adv, ref_logp=ref, kl_beta=0.5)
    kl_term = ((k3(0.2) + k3(-0.1)) / 2 + k3(0.3)) / 2
    assert loss.item() == pytest.approx(0.0 + 0.5 * kl_term, abs=1e-12)
    assert m["policy/kl_ref"].item() == pytest.approx((k3(0.2) + k3(-0.1) + k3(0.3)) / 3, abs=1e-12)
    assert m["loss/policy"].item() == pytest.approx(0.0, abs=1e-12)
    # dk3/dlogp = 1 - exp(d); policy part -(1/2)(1/|y_i|) A_i
    expected = torch.tensor([
        [-1 / 4 + 0.5 * (1 - exp(0.2)) / 4, -1 / 4 + 0.5 * (1 - exp(-0.1)) / 4],
        [1 / 2 + 0.5 * (1 - exp(0.3)) / 2, 0.0],
    ], dtype=F64)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_k3_kl_follows_grpo_aggregation():
    # token_mean: beta * (k3(0.2) + k3(-0.1) + k3(0.3)) / 3
    logp, ref, mask, adv = kl_batch()
    loss, _, _ = loss_and_grad("grpo", logp, logp.detach(), mask, adv, ref_logp=ref, kl_beta=0.5,
                               aggregation="token_mean")
    policy = -(1 + 1 - 1) / 3  # -(1/3) sum_i sum_t A_i
    assert loss.item() == pytest.approx(policy + 0.5 * (k3(0.2) + k3(-0.1) + k3(0.3)) / 3, abs=1e-12)


@pytest.mark.parametrize("algo", ["grpo", "gspo", "gspo_token"])
def test_zero_kl_beta_leaves_the_loss_untouched(algo):
    logp, old, ref, mask, adv = random_batch(seed=5)
    plain, plain_grad, _ = loss_and_grad(algo, logp, old, mask, adv)
    ref_leaf = ref.clone().requires_grad_(True)
    with_ref, ref_grad, m = loss_and_grad(algo, logp, old, mask, adv, ref_logp=ref_leaf, kl_beta=0.0)
    assert torch.equal(with_ref, plain) and torch.equal(ref_grad, plain_grad)
    assert m["policy/kl_ref"].item() > 0.0
    assert ref_leaf.grad is None  # not even a 0 * KL term in the graph
