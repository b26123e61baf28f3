"""Group-relative advantages: hand-computed values, the Bessel convention, equal-reward groups."""

import math

import pytest
import torch

from gspo.algos import frac_zero_std_groups, group_advantages

F64 = torch.float64
EPS = 1e-6


def test_bessel_std_pinned_by_hand():
    # Convention: Bessel (divide by G - 1) like TRL/torch.std, NOT the population std of
    # nano-aha-moment. Group [1, 0, 0]: mean 1/3, sum of squares 4/9 + 1/9 + 1/9 = 2/3.
    rewards = torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    bessel_std = math.sqrt((2 / 3) / 2)  # sqrt(1/3) = 0.57735
    population_std = math.sqrt((2 / 3) / 3)  # sqrt(2/9) = 0.47140, the other convention
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=F64) / (bessel_std + EPS)
    adv = group_advantages(rewards, 3)
    torch.testing.assert_close(adv, expected, atol=1e-12, rtol=0)
    assert abs(adv[0].item() - (2 / 3) / (population_std + EPS)) > 0.1


def test_two_groups_group_major_order():
    # [1, 2, 3, 4]: mean 2.5, Bessel var (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3.
    # [0, 0, 0, 2]: mean 0.5, Bessel var (0.25 * 3 + 2.25) / 3 = 1.
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 2.0], dtype=F64)
    s1, s2 = math.sqrt(5 / 3) + EPS, 1.0 + EPS
    expected = torch.tensor(
        [-1.5 / s1, -0.5 / s1, 0.5 / s1, 1.5 / s1, -0.5 / s2, -0.5 / s2, -0.5 / s2, 1.5 / s2], dtype=F64
    )
    torch.testing.assert_close(group_advantages(rewards, 4), expected, atol=1e-12, rtol=0)


def test_grouped_input_keeps_its_shape_and_values():
    flat = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 2.0], dtype=F64)
    grouped = group_advantages(flat.reshape(2, 4), 4)
    assert grouped.shape == (2, 4)
    torch.testing.assert_close(grouped.reshape(-1), group_advantages(flat, 4), atol=0, rtol=0)


@pytest.mark.parametrize("eps", [EPS, 0.0])
def test_equal_reward_groups_are_exactly_zero_never_nan(eps):
    # mean([0.1] * 3) is not exactly 0.1 in floating point; the result must still be exactly 0, and
    # with eps = 0 a naive 0 / 0 would be NaN.
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0], dtype=F64)
    adv = group_advantages(rewards, 3, eps=eps)
    assert torch.equal(adv[:6], torch.zeros(6, dtype=F64))
    assert torch.isfinite(adv).all()
    assert adv[7] > 0 > adv[6]


def test_scale_none_is_mean_centred_only():
    # Dr. GRPO: no std division.
    rewards = torch.tensor([1.0, 0.0, 0.0, 5.0, 5.0, 5.0], dtype=F64)
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0], dtype=F64)
    torch.testing.assert_close(group_advantages(rewards, 3, scale="none"), expected, atol=1e-15, rtol=0)


def test_integer_rewards_are_accepted():
    adv = group_advantages(torch.tensor([1, 0]), 2)
    # mean 0.5, Bessel std sqrt(0.5)
    expected = torch.tensor([0.5, -0.5]) / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)


def test_frac_zero_std_groups():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.1, 0.1, 0.1], [0.0, 0.0, 1.0]], dtype=F64)
    assert frac_zero_std_groups(rewards, 3).item() == 0.5
    assert frac_zero_std_groups(rewards.reshape(-1), 3).item() == 0.5


@pytest.mark.parametrize("group_size", [1, 0])
def test_group_smaller_than_two_raises(group_size):
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.tensor([1.0, 0.0]), group_size)
    with pytest.raises(ValueError, match="group_size"):
        frac_zero_std_groups(torch.tensor([1.0, 0.0]), group_size)


def test_bad_shapes_and_scale_raise():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(2, 4), 3)
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(4), 2, scale="mad")
