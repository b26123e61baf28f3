"""Group-relative advantages (GRPO, Shao et al. 2024, arXiv 2402.03300; GSPO paper, arXiv 2507.18071, eq. 6).

    A_i = (r_i - mean({r_j}_{j=1..G})) / (std({r_j}_{j=1..G}) + eps)

Convention, pinned by a test: std is the Bessel-corrected (unbiased, divide by G - 1) sample std,
as torch.std and TRL use; nano-aha-moment uses the population std (divide by G), which gives
advantages larger by sqrt(G / (G - 1)). eps is added to the std, not under a square root.
Departures and choices:
- A group whose rewards are all equal gets exactly 0, never rounding noise (mean of [0.1] * 3 is not
  exactly 0.1) and never NaN; `frac_zero_std_groups` reports how many such groups a batch had.
- scale="none" skips the std division (Dr. GRPO, arXiv 2503.20783): A_i = r_i - mean.
- scale="mean" divides by the group mean instead (MaxRL, arXiv 2602.02710): A_i = (r_i - mean) / mean, for
  rewards in [0, 1] (a success rate: the gradient of log of the pass probability). The mean is bounded below by
  eps, so a group of negative rewards cannot flip or blow up its sign (the trainer refuses the combination with
  rewards below 0, such as the overlong penalty).
- G < 2 is rejected: a group of one has no baseline and no sample std.

Estimators, by the name `algo.advantage` gives (ESTIMATORS): "group" (the above, one value per
sequence), "step" (`step_advantages`: per-token credit from graded scratchpad steps, for algorithms
that take token advantages, i.e. GSPO-token) and "gdpo" (`gdpo_advantages`: several reward components, each
normalised within its group, summed, then normalised over the batch; GDPO, arXiv 2601.05242) and "loo"
(`loo_advantages`: the leave-one-out baseline, RLOO; SkyRL's, TRL's and tunix's rloo).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import Advantage, AdvScale
from gspo.vocab.lazy import lazy_module

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """Rewards as a float [B, G] view: from [N] in group-major order (N = B * G) or from [B, G]."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a group baseline, got {group_size}")
    if not torch.is_floating_point(rewards):
        rewards = rewards.to(torch.get_default_dtype())
    if rewards.dim() == 2 and rewards.shape[1] == group_size:
        return rewards
    if rewards.dim() == 1 and rewards.numel() % group_size == 0:
        return rewards.reshape(-1, group_size)
    raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not form groups of {group_size}: "
                     f"expected [B * {group_size}] (group-major) or [B, {group_size}]")


def _constant_groups(grouped: Tensor) -> Tensor:
    """[B] booleans: every reward in the group is equal (the group's std is 0)."""
    return grouped.amax(dim=-1) == grouped.amin(dim=-1)


def constant_groups(rewards: Tensor, group_size: int) -> Tensor:
    """[B] booleans from rewards [N] (group-major) or [B, G]: the group's rewards are all equal, so every
    advantage in it is 0 (the groups DAPO's dynamic sampling drops)."""
    return _constant_groups(_grouped(rewards, group_size))


def constant_components(components: Tensor, group_size: int) -> Tensor:
    """[B] booleans from reward components [N, K] (group-major): every component is constant in the group, so every
    component's group advantage is 0 (the groups dynamic sampling drops under a multi-reward estimator, GDPO: a group
    whose correctness is constant and format varies still teaches format)."""
    if components.dim() != 2:
        raise ValueError(f"reward components must be [N, K], got shape {tuple(components.shape)}")
    return torch.stack([constant_groups(components[:, k], group_size) for k in range(components.shape[1])]).all(0)


def group_advantages(rewards: Tensor, group_size: int, *, eps: float = 1e-6, scale: str = AdvScale.STD) -> Tensor:
    """Group-normalised advantages, same shape as `rewards` ([N] group-major, or [B, G]).

    scale: "std" (GRPO/GSPO, Bessel std), "none" (Dr. GRPO, mean-centred only) or "mean" (MaxRL).
    """
    if scale not in AdvScale.values:
        raise ValueError(f"unknown advantage scale {scale!r}; known: {', '.join(AdvScale.values)}")
    grouped = _grouped(rewards, group_size)  # [B, G]
    # r_i - mean_group(r)
    adv = grouped - grouped.mean(dim=-1, keepdim=True)
    if scale == AdvScale.STD:
        # std_group(r) = sqrt(sum_j (r_j - mean)^2 / (G - 1))   (Bessel)
        std = grouped.std(dim=-1, keepdim=True, correction=1)
        # A_i = (r_i - mean) / (std + eps)
        adv = adv / (std + eps)
    elif scale == AdvScale.MEAN:
        # A_i = (r_i - mean) / mean   (MaxRL; the mean bounded below by eps)
        adv = adv / grouped.mean(dim=-1, keepdim=True).clamp(min=eps)
    # Equal rewards carry no signal: exactly 0
    adv = torch.where(_constant_groups(grouped).unsqueeze(-1), torch.zeros_like(adv), adv)
    return adv.reshape(rewards.shape)


def frac_zero_std_groups(rewards: Tensor, group_size: int) -> Tensor:
    """Share of groups whose rewards are all equal (metric reward/frac_zero_std_groups), 0-dim."""
    grouped = _grouped(rewards, group_size)
    return _constant_groups(grouped).to(grouped.dtype).mean()


def step_advantages(step_rewards: Tensor, step_ends: Tensor, group_size: int, *, eps: float = 1e-6,
                    scale: str = AdvScale.STD) -> Tensor:
    """Per-token advantages [N, T] from per-step rewards: process supervision (DeepSeekMath, arXiv
    2402.03300, sec. 4.1.3), the credit the `step` estimator gives each token.

    step_rewards: [N, T], the reward of a step placed on its last token (0 elsewhere); step_ends: [N, T]
    booleans marking those tokens; N = B * G in group-major order. Over all steps of a group,

        r~_k = (r_k - mean_group(r)) / (std_group(r) + eps)           (Bessel std; scale="none": r_k - mean)
        A_it = sum of r~_k over the steps k of sequence i that end at or after token t

    so a token carries the credit of its own step and of every later one; tokens after the last step
    end get 0. A group whose step rewards are all equal gets exactly 0, as in `group_advantages`.
    """
    if scale not in (AdvScale.STD, AdvScale.NONE):
        raise ValueError(f"advantage scale {scale!r} does not apply to step rewards; known: std, none")
    if step_rewards.shape != step_ends.shape or step_rewards.dim() != 2:
        raise ValueError(f"step_rewards and step_ends must both be [N, T], got {tuple(step_rewards.shape)} "
                         f"and {tuple(step_ends.shape)}")
    n, width = step_rewards.shape
    _grouped(torch.zeros(n), group_size)  # same shape rules as group_advantages
    rewards = step_rewards.to(torch.get_default_dtype()).reshape(-1, group_size * width)  # [B, G*T]
    ends = step_ends.reshape(-1, group_size * width)
    count = ends.sum(dim=-1, keepdim=True)  # [B, 1] steps per group
    # mean_group(r) over the group's steps
    mean = torch.where(ends, rewards, 0.0).sum(dim=-1, keepdim=True) / count.clamp(min=1)
    centred = torch.where(ends, rewards - mean, 0.0)
    if scale == AdvScale.STD:
        # std_group(r) = sqrt(sum_k (r_k - mean)^2 / (K - 1))   (Bessel)
        std = (centred.pow(2).sum(dim=-1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        centred = centred / (std + eps)
    inf = torch.full_like(rewards, float("inf"))
    constant = torch.where(ends, rewards, inf).amin(-1) == torch.where(ends, rewards, -inf).amax(-1)  # [B]
    normed = torch.where(constant.unsqueeze(-1), torch.zeros_like(centred), centred).reshape(n, width)
    # A_it = sum_{t' >= t} r~_it'   (a reverse cumulative sum along the tokens)
    return normed.flip(-1).cumsum(-1).flip(-1)


def loo_advantages(rewards: Tensor, group_size: int, *, eps: float = 1e-6, scale: str = AdvScale.NONE) -> Tensor:
    """Leave-one-out advantages, the shape of `rewards` ([N] group-major or [B, G]) (RLOO: Kool et al. 2019, "Buy 4
    REINFORCE samples, get a baseline for free!"; Ahmadian et al. 2024, arXiv 2402.14740; SkyRL's, TRL's and tunix's
    rloo):

        A_i = r_i - 1/(G - 1) sum_{j != i} r_j = G / (G - 1) (r_i - mean_group(r))

    each completion's baseline the mean of the others' rewards, so it does not depend on its own reward (an unbiased
    baseline). scale="none" (the default, RLOO's) leaves it; scale="std" divides by the group's Bessel std + eps as
    GRPO does. A group of equal rewards gets exactly 0.
    """
    if scale not in (AdvScale.NONE, AdvScale.STD):
        raise ValueError(f"advantage scale {scale!r} does not apply to leave-one-out; known: none, std")
    grouped = _grouped(rewards, group_size)  # [B, G]
    g = grouped.shape[-1]
    # A_i = r_i - (sum_j r_j - r_i) / (G - 1)
    adv = grouped - (grouped.sum(dim=-1, keepdim=True) - grouped) / (g - 1)
    if scale == AdvScale.STD:
        adv = adv / (grouped.std(dim=-1, keepdim=True, correction=1) + eps)
    adv = torch.where(_constant_groups(grouped).unsqueeze(-1), torch.zeros_like(adv), adv)
    return adv.reshape(rewards.shape)


def gdpo_advantages(components: Tensor, group_size: int, *, eps: float = 1e-6, scale: str = AdvScale.STD) -> Tensor:
    """GDPO's multi-reward advantages [N] (Liu et al. 2026, "GDPO: Group reward-Decoupled Normalization Policy
    Optimization", arXiv 2601.05242; TRL's multi_objective_aggregation="normalize_then_sum").

    components: [N, K], reward component k of completion i, N = B * G in group-major order. Then

        A_i^k = (r_i^k - mean_group(r^k)) / (std_group(r^k) + eps)      (each component in its own group)
        S_i   = sum_k A_i^k
        A_i   = (S_i - mean_batch(S)) / (std_batch(S) + eps)            (over the whole batch)

    so a component whose scale or variance differs cannot drown the others, as it does when the rewards are
    summed before one normalisation. Bessel std throughout, as `group_advantages`; a component constant in a
    group gives that group 0 for it, and a group constant in every component gets exactly 0 after the batch step
    too (S = 0 there; the batch mean of S is 0 only up to rounding). scale="none" skips the per-group std division
    (the batch step stays).
    """
    if scale not in (AdvScale.STD, AdvScale.NONE):
        raise ValueError(f"advantage scale {scale!r} does not apply to GDPO; known: std, none")
    if components.dim() != 2:
        raise ValueError(f"reward components must be [N, K], got shape {tuple(components.shape)}")
    per = torch.stack([group_advantages(components[:, k], group_size, eps=eps, scale=scale)
                       for k in range(components.shape[1])], dim=-1)  # [N, K]
    # S_i = sum_k A_i^k
    total = per.sum(dim=-1)
    # A_i = (S_i - mean_batch(S)) / (std_batch(S) + eps); a batch of equal sums: exactly 0
    adv = (total - total.mean()) / (total.std(correction=1) + eps)
    silent = constant_components(components, group_size).repeat_interleave(group_size)  # [N]
    return torch.where((total.amax() == total.amin()) | silent, torch.zeros_like(adv), adv)


# ---------------------------------------------------------------------------------------------------
# The estimator registry: `algo.advantage` names one.

EstimatorFn = Callable[..., "Tensor"]  # (rewards [N], group_size, *, eps, scale, steps, components) -> [N] or [N, T]


@dataclass(frozen=True)
class Estimator:
    fn: EstimatorFn
    per_token: bool  # gives [N, T] (only algorithms that take token advantages can use it)
    needs_steps: bool  # reads graded steps: (step_rewards, step_ends), [N, T] each, from the task
    needs_components: bool = False  # reads the reward's components, [N, K], from the task


def _group(rewards: Tensor, group_size: int, *, eps: float, scale: str, steps=None, components=None) -> Tensor:
    return group_advantages(rewards, group_size, eps=eps, scale=scale)


def _step(rewards: Tensor, group_size: int, *, eps: float, scale: str, steps=None, components=None) -> Tensor:
    if steps is None:
        raise ValueError("the step estimator needs graded steps (step_rewards, step_ends), [N, T] each")
    return step_advantages(*steps, group_size, eps=eps, scale=scale)


def _gdpo(rewards: Tensor, group_size: int, *, eps: float, scale: str, steps=None, components=None) -> Tensor:
    if components is None:
        raise ValueError("the gdpo estimator needs the reward's components, [N, K]")
    return gdpo_advantages(components, group_size, eps=eps, scale=scale)


def _loo(rewards: Tensor, group_size: int, *, eps: float, scale: str, steps=None, components=None) -> Tensor:
    return loo_advantages(rewards, group_size, eps=eps, scale=scale)


ESTIMATORS: dict[str, Estimator] = {
    Advantage.GROUP: Estimator(_group, per_token=False, needs_steps=False),
    Advantage.STEP: Estimator(_step, per_token=True, needs_steps=True),
    Advantage.GDPO: Estimator(_gdpo, per_token=False, needs_steps=False, needs_components=True),
    Advantage.LOO: Estimator(_loo, per_token=False, needs_steps=False),
}


def get_estimator(name: str) -> Estimator:
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]


def estimate(name: str, rewards: Tensor, group_size: int, *, eps: float, scale: str,
             steps: tuple[Tensor, Tensor] | None = None, components: Tensor | None = None) -> Tensor:
    """Advantages by the estimator registered as `name`: [N] ("group", "gdpo") or [N, T] ("step")."""
    return get_estimator(name).fn(rewards, group_size, eps=eps, scale=scale, steps=steps, components=components)
