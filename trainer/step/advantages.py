"""Advantages for a rollout batch: the estimator `algo.advantage` names (gspo.algos.advantages), fed by
the task's step grades when it needs them; and the checks that the algorithm, its options, the
estimator and the task fit together, made before a run directory is written.

The `step` estimator needs each worked step's reward on the step's last token: the task grades steps
in characters of the completion text (`Task.steps`), and `step_tensors` maps those to completion tokens
by decoding growing prefixes (a token is the step's end when its prefix first reaches the step's end).
The last step always ends on the completion's last token (end-of-sequence included), so no token of an
answer goes without credit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.algos import correction_weights, estimate, get, get_estimator
from gspo.algos.registry import check_clip
from gspo.conf.errors import GspoError
from gspo.trainer.engines.logp_origin import ENGINE, old_logp_origin
from gspo.trainer.tasks.task_types import Task
from gspo.vocab.choices import (
    CORRECTION_BOUNDS,
    ICEPOP_BAND,
    KIND_BOUNDS,
    Advantage,
    AdvScale,
    Correction,
    Level,
    Ratio,
)
from gspo.vocab.lazy import lazy_module

if TYPE_CHECKING:  # the loss card (gspo explain) reads the checks here without torch
    from torch import Tensor

    from gspo.trainer.engines.rollout import Rollout

torch = lazy_module("torch")  # runs at its first use (vocab/lazy.py)


def check_algorithm(algo, task: Task) -> None:
    """The algorithm is registered, its options are its own and valid, and the estimator fits both the
    algorithm (per-token advantages) and the task (graded steps). One GspoError line otherwise."""
    try:
        spec, estimator = get(algo.name), get_estimator(algo.advantage)
    except ValueError as e:
        raise GspoError(f"{e} (gspo.algos registers it)") from None
    try:
        options = spec.make_options(dict(algo.options))
    except (TypeError, ValueError) as e:
        raise GspoError(f"algo.options: {e}") from None
    try:
        check_clip(spec, algo.clip_low, algo.clip_high)
    except ValueError as e:
        raise GspoError(f"algo.clip_low={algo.clip_low}: {algo.name} {e} (only a weight's clip, as cispo's, may drop "
                        "its lower bound)") from None
    if estimator.per_token and not spec.token_advantages:
        raise GspoError(f"algo.advantage={algo.advantage} gives per-token advantages, which {algo.name} does not take: "
                        "use algo=gspo_token_step (GSPO-token)")
    c = algo.correction
    if c.kind != Correction.NONE and old_logp_origin(algo) != ENGINE:
        raise GspoError(f"algo.correction.kind={c.kind} corrects the sampler's log-probs toward the trainer's: it needs "
                        f"algo.old_logp_source=engine (got {algo.old_logp_source})")
    if c.kind != Correction.NONE and getattr(options, "anchored_at_sampler", False):
        raise GspoError(f"algo.correction.kind={c.kind} with {algo.name} anchored at the sampler: its ratio pi / pi_s "
                        "already weighs the sampler-trainer mismatch, a correction would weigh it twice (use "
                        "algo.options.anchor=trainer for the decoupled form, or algo.correction.kind=none)")
    if c.kind != Correction.NONE and c.level == Level.TOKEN and not spec.token_advantages:
        raise GspoError(f"algo.correction.level=token weights each token's term, and {algo.name} weights whole "
                        "sequences: use algo.correction.level=auto, sequence or geometric")
    if c.kind in Correction.SEQUENCE_ONLY and c.level not in (Level.AUTO, Level.SEQUENCE):
        raise GspoError(f"algo.correction.kind={c.kind} gives one weight per sequence: algo.correction.level={c.level} "
                        "cannot apply (use auto or sequence)")
    if c.kind == Correction.GEO_RS and c.level not in (Level.AUTO, Level.GEOMETRIC):
        raise GspoError(f"algo.correction.kind=geo_rs masks by the geometric-mean ratio: algo.correction.level="
                        f"{c.level} cannot apply (use auto or geometric)")
    if estimator.needs_components and not task.has_components:
        raise GspoError(f"algo.advantage={algo.advantage} normalises each reward component apart, and task "
                        f"{task.name} has one reward (task=arith gives correctness and format)")
    if algo.adv_scale == AdvScale.MEAN and algo.advantage != Advantage.GROUP:
        raise GspoError(f"algo.adv_scale=mean (MaxRL) applies to algo.advantage=group, not {algo.advantage}")
    if estimator.needs_steps and not task.has_steps:
        raise GspoError(f"algo.advantage={algo.advantage} needs a task whose worked steps are graded "
                        f"(task=arith); task {task.name} grades whole answers")


def rollout_advantages(algo, rewards: Tensor, group_size: int, *, task: Task, prompts: list[str],
                       rollout: Rollout, tokenizer, golds: list[str] | None = None,
                       task_rewards: Tensor | None = None) -> Tensor:
    """[N] or [N, T] advantages of a rollout batch (prompts: the task's raw prompts, one per completion; golds and
    the unshaped task_rewards: for an estimator that reads the reward's components, where a shaping penalty
    (rewards - task_rewards) is one more component)."""
    steps = components = None
    estimator = get_estimator(algo.advantage)
    if estimator.needs_steps:
        graded = task.steps(prompts, rollout.texts)
        steps = step_tensors(graded, rollout, tokenizer)
    if estimator.needs_components:
        components = torch.tensor(task.components(rollout.texts, golds), dtype=rewards.dtype,
                                  device=rewards.device)  # [N, K]
        if task_rewards is not None and not torch.equal(rewards, task_rewards):
            components = torch.cat([components, (rewards - task_rewards).unsqueeze(-1)], dim=-1)
    return estimate(algo.advantage, rewards, group_size, eps=algo.adv_eps, scale=algo.adv_scale, steps=steps,
                    components=components)


def step_tensors(graded: list[list[tuple[int, float]]], rollout: Rollout, tokenizer) -> tuple[Tensor, Tensor]:
    """(step_rewards, step_ends), [N, T] each on the rollout's device: each step's reward on its last token."""
    mask = rollout.completion_mask
    rewards, ends = torch.zeros(mask.shape), torch.zeros(mask.shape, dtype=torch.bool)
    completion = rollout.input_ids[:, rollout.input_ids.shape[1] - rollout.n_completion :].cpu()
    lengths = mask.sum(-1).long().tolist()
    for i, steps in enumerate(graded):
        if not lengths[i]:
            continue
        ids = completion[i, : lengths[i]].tolist()
        reach = [len(tokenizer.decode(ids[: t + 1], skip_special_tokens=True)) for t in range(len(ids))]
        for k, (end, reward) in enumerate(steps):
            last = k == len(steps) - 1
            t = len(ids) - 1 if last else next((j for j, n in enumerate(reach) if n >= end), len(ids) - 1)
            rewards[i, t] += reward if not ends[i, t] else 0.0
            ends[i, t] = True
    return rewards.to(mask.device), ends.to(mask.device)


@dataclass(frozen=True)
class CorrectionBounds:
    """A correction as it will act: its kind, level (auto resolved) and bounds (unset ones: the level's default)."""

    kind: str
    level: str  # token, sequence (product of the token ratios) or geometric (their geometric mean)
    cap: float
    low: float
    high: float


def correction_bounds(algo) -> CorrectionBounds:
    """algo.correction resolved: level auto is the algorithm's own ratio level (geometric for gspo, gspo_token and
    gmpo, token otherwise; geometric for geo_rs), and each unset bound is its level's (gspo.vocab.choices CORRECTION_BOUNDS; mis at token
    level: IcePop's band)."""
    c = algo.correction
    level = c.level
    if level == Level.AUTO:
        spec = get(algo.name)  # a token weight needs per-token advantages: an algorithm without them gets geometric
        level = (Level.GEOMETRIC if c.kind == Correction.GEO_RS or spec.ratio == Ratio.GEOMETRIC or not spec.token_advantages
                 else Level.TOKEN)
    cap, low, high = CORRECTION_BOUNDS[level]
    if c.kind in Correction.SEQUENCE_ONLY:  # one weight per sequence, with the kind's own numbers
        level, (cap, low, high) = Level.SEQUENCE, KIND_BOUNDS[c.kind]
    if c.kind == Correction.MIS and level == Level.TOKEN:
        low, high = ICEPOP_BAND
    return CorrectionBounds(c.kind, level, cap if c.cap is None else c.cap, low if c.low is None else c.low,
                            high if c.high is None else c.high)


def corrected(algo, advantages: Tensor, old_logp: Tensor, rollout: Rollout) -> tuple[Tensor, Tensor, dict]:
    """(advantages, the old log-probs the loss uses, correction/* metrics) under `algo.correction`.

    Without a correction the loss's old log-probs are the sampler's where algo.old_logp_source=engine, else
    the trainer's. With one they are the trainer's (`old_logp`), and the sampler's enter the ratio only through the
    weights c (gspo.algos.corrections), which scale the advantages: per token ([N, T]) or per sequence
    (`correction_bounds` resolves the level and bounds). Whatever is returned here, the update also hands the loss
    the sampler's own log-probs (rollout.engine_logp, as LossInputs.sampler_logp) where they exist: OPSM's mask and
    DPPO's default anchor read them, not these.
    """
    c = algo.correction
    if c.kind == Correction.NONE:
        return advantages, rollout.engine_logp if old_logp_origin(algo) == ENGINE else old_logp, {}
    b = correction_bounds(algo)
    weights, metrics = correction_weights(old_logp=old_logp, engine_logp=rollout.engine_logp,
                                          mask=rollout.completion_mask, kind=b.kind, level=b.level, cap=b.cap,
                                          low=b.low, high=b.high)  # [N, T] (token) or [N] (sequence, geometric)
    if weights.dim() == 2 and advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # [N, 1]: one advantage per sequence, spread over its tokens
    elif weights.dim() == 1 and advantages.dim() == 2:
        weights = weights.unsqueeze(-1)
    return advantages * weights, old_logp, metrics
