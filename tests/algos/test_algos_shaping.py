"""DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13), by hand, and the group filter of dynamic sampling."""

import pytest
import torch

from gspo.algos import constant_groups, overlong_penalty


def test_overlong_penalty_at_three_lengths_by_hand():
    # L_max = 64, buffer 0.25 -> L_cache = 16, the ramp starts after L_max - L_cache = 48:
    #   |y| = 40: 0 (before the ramp); |y| = 56: (48 - 56) / 16 = -0.5; |y| = 64 (truncated): (48 - 64) / 16 = -1
    got = overlong_penalty(torch.tensor([40, 56, 64]), max_len=64, buffer=0.25)
    torch.testing.assert_close(got, torch.tensor([0.0, -0.5, -1.0]), atol=0, rtol=0)
    # the edges: exactly 48 is unpunished, 49 costs 1/16; past L_max (never sampled here) stays -1
    got = overlong_penalty(torch.tensor([48.0, 49.0, 80.0], dtype=torch.float64), max_len=64, buffer=0.25)
    torch.testing.assert_close(got, torch.tensor([0.0, -1 / 16, -1.0], dtype=torch.float64), atol=1e-15, rtol=0)


def test_overlong_penalty_off_and_bad_buffers():
    assert torch.equal(overlong_penalty(torch.tensor([1, 64]), max_len=64, buffer=0.0), torch.zeros(2))
    with pytest.raises(ValueError, match="share"):
        overlong_penalty(torch.tensor([1]), max_len=64, buffer=1.5)


def test_constant_groups_are_the_ones_dynamic_sampling_drops():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0])  # 3 groups of 4
    assert constant_groups(rewards, 4).tolist() == [False, True, True]
