"""A step's rollout batch: its prompts drawn, their groups sampled and graded, and DAPO's two rollout options
(arXiv 2503.14476, sec. 3.2 and 3.4), which every algorithm can use:

- `rollout.dynamic_sampling`: a group whose task rewards are all equal (all right or all wrong: the paper's
  accuracy filter, as verl's, on the task's reward before any shaping) teaches nothing. Under an estimator that
  reads the reward's components (GDPO) a group teaches nothing only when every component is constant in it (all
  right with some answers well formed and some not still teaches format), so that is the filter there. Such groups
  are dropped and more prompts drawn, round k of a step from (seed, step, k) and sampled with its own
  seed, until train.prompts_per_step groups are kept or `rollout.max_draws` rounds are spent. A batch still
  short is completed with the first dropped groups (unshaped, constant in whatever the filter read: advantage 0,
  under GDPO for every component), so every batch has
  its configured shape. Logged: sampling/groups_drawn, sampling/groups_kept (informative groups in the
  batch), sampling/groups_dropped, sampling/draws (rounds) and sampling/groups_refilled (dropped groups put
  back to complete a short batch).
- `rollout.overlong_buffer`: gspo.algos.overlong_penalty added to every reward, after the filter above (so an
  all-correct group whose answers differ only in length is dropped, not trained on its lengths). The shaped
  reward is the one the advantages see; reward/<task> and reward/mean stay the task's own, and
  reward/overlong_penalty is the batch's mean penalty.

Round 0 is what a step without the options draws (the same prompts and seeds), so turning them off gives
the runs of before bit for bit. [distributed] Without dynamic sampling each rank generates and grades its own
whole groups and the ranks' rows are gathered; dynamic sampling runs in one process (distributed.check_layout).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gspo.algos import constant_components, constant_groups, get_estimator, overlong_penalty
from gspo.trainer.engines.rollout import Rollout, concat_rollouts
from gspo.trainer.parallel import distributed
from gspo.trainer.parallel.distributed import World
from gspo.trainer.run.seeds import step_seed
from gspo.trainer.tasks.task_types import Item, Task, prompt_text
from gspo.vocab.metrics import (
    DRAWS,
    GROUPS_DRAWN,
    GROUPS_DROPPED,
    GROUPS_KEPT,
    GROUPS_REFILLED,
    OVERLONG_PENALTY,
)


def format_prompts(tokenizer, items: list[Item], *, chat: bool, repeat: int = 1) -> list[str]:
    """Prompt texts, each repeated `repeat` times; with `chat`, in the tokenizer's chat template with the
    item's system message, as `gspo eval` builds benchmark prompts."""
    texts = [prompt_text(tokenizer, it.prompt, it.system, chat=chat) for it in items]
    return [t for t in texts for _ in range(repeat)]


@dataclass
class Sampled:
    """A step's batch: B groups of G completions, group-major."""

    items: list[Item]  # [B] the groups' prompts
    prompts: list[str]  # [N] formatted, each repeated G times
    rollout: Rollout  # [N]
    task_rewards: torch.Tensor  # [N] the task's rewards
    rewards: torch.Tensor  # [N] what the advantages see: the task's plus the overlong penalty
    metrics: dict[str, float]  # sampling/* and reward/overlong_penalty, where the options are on
    times: dict[str, float]  # seconds spent generating and grading, over every round


def sample_batch(step: int, conf, engine, task: Task, device: torch.device, world: World) -> Sampled:
    """The step's batch under `conf` (a trainer.context.StepContext: seed, train, sampling = cfg.rollout, chat)."""
    B, sampling = conf.train.prompts_per_step, conf.sampling
    rounds = sampling.max_draws if sampling.dynamic_sampling else 1
    kept: list[tuple[Sampled, list[int]]] = []  # (round, its groups kept)
    dropped: list[tuple[Sampled, int]] = []
    n_kept = draws = 0
    times = {"generate": 0.0, "grade": 0.0}
    for k in range(rounds):
        part = _draw(step, k, conf, engine, task, device, world)
        draws += 1
        times = {key: times[key] + part.times[key] for key in times}
        if not sampling.dynamic_sampling:
            return _shaped(part, sampling)
        empty = _silent_groups(part, conf, task)  # [B], on correctness (or every component), unshaped
        good = [g for g in range(B) if not empty[g]][: B - n_kept]
        kept.append((part, good))
        dropped += [(part, g) for g in range(B) if empty[g]]
        n_kept += len(good)
        if n_kept == B:
            break
    refill = dropped[: B - n_kept]
    batch = _join([*kept, *((part, [g]) for part, g in refill)], conf.train.group_size, engine.tokenizer.pad_token_id)
    batch = _shaped(batch, sampling, n_rows=n_kept * conf.train.group_size)  # refilled groups: unshaped, advantage 0
    batch.metrics = {GROUPS_DRAWN: float(draws * B), GROUPS_KEPT: float(n_kept),
                     GROUPS_DROPPED: float(len(dropped)), DRAWS: float(draws),
                     GROUPS_REFILLED: float(len(refill)), **batch.metrics}
    batch.times = times
    return batch


def _silent_groups(part: Sampled, conf, task: Task) -> list[bool]:
    """[B]: the groups that teach the estimator nothing: task rewards all equal; for an estimator that normalises
    each reward component apart (GDPO), every component constant (the overlong penalty, added later, aside)."""
    G = conf.train.group_size
    if not get_estimator(conf.algo.advantage).needs_components:
        return constant_groups(part.task_rewards, G).tolist()
    golds = [it.gold for it in part.items for _ in range(G)]
    components = torch.tensor(task.components(part.rollout.texts, golds), dtype=part.task_rewards.dtype)  # [N, K]
    return constant_components(components, G).tolist()


def _draw(step: int, k: int, conf, engine, task: Task, device: torch.device, world: World) -> Sampled:
    """Round k of the step: B prompts, G completions each, graded, not yet shaped (the whole batch on every rank)."""
    G, B = conf.train.group_size, conf.train.prompts_per_step
    items = task.train_items(seed=conf.seed, step=step, n=B, draw=k)
    prompts = format_prompts(engine.tokenizer, items, chat=conf.chat, repeat=G)
    golds = [it.gold for it in items for _ in range(G)]
    groups = distributed.group_range(B, world)  # [distributed] this rank's groups
    mine = slice(groups.start * G, groups.stop * G)
    # row i of the step samples with seed + i whichever rank generates it; round k > 0 has its own seed
    seed = step_seed(conf.seed, step, "rollout" if k == 0 else f"rollout:{k}") + mine.start
    t0 = time.perf_counter()
    rollout = engine.generate(prompts[mine], seed=seed).to(device)
    t1 = time.perf_counter()
    rewards = torch.tensor(task.rewards(rollout.texts, golds[mine]), device=device)  # [N]
    rollout, rewards = _whole_batch(rollout, rewards, world, engine.tokenizer.pad_token_id)  # [distributed]
    times = {"generate": t1 - t0, "grade": time.perf_counter() - t1}
    return Sampled(items, prompts, rollout, rewards, rewards, {}, times)


def _shaped(batch: Sampled, sampling, n_rows: int | None = None) -> Sampled:
    """The batch with the overlong penalty added to its rewards (the advantages' input) and its metric; with
    `n_rows`, to its first n_rows only (the kept groups: a dropped group put back to fill the batch keeps its
    equal task rewards, so its advantage stays 0 rather than a length signal)."""
    if not sampling.overlong_buffer:
        return batch
    lengths = batch.rollout.completion_mask.sum(-1)  # [N]
    penalty = overlong_penalty(lengths, max_len=sampling.max_new_tokens, buffer=sampling.overlong_buffer)
    if n_rows is not None:
        penalty[n_rows:] = 0.0
    batch.rewards = batch.task_rewards + penalty.to(batch.task_rewards.dtype)
    batch.metrics = {**batch.metrics, OVERLONG_PENALTY: penalty.mean().item()}
    return batch


def _join(parts: list[tuple[Sampled, list[int]]], G: int, pad_id: int) -> Sampled:
    """The groups `parts` names ((round, its group indices)), in that order, as one batch."""
    parts = [(p, groups) for p, groups in parts if groups]
    rows = [[g * G + j for g in groups for j in range(G)] for _, groups in parts]
    rollouts = [p.rollout.select(r) for (p, _), r in zip(parts, rows, strict=True)]
    return Sampled(
        items=[p.items[g] for p, groups in parts for g in groups],
        prompts=[p.prompts[i] for (p, _), r in zip(parts, rows, strict=True) for i in r],
        rollout=rollouts[0] if len(rollouts) == 1 else concat_rollouts(rollouts, pad_id),
        task_rewards=torch.cat([p.task_rewards[r] for (p, _), r in zip(parts, rows, strict=True)]),
        rewards=torch.cat([p.rewards[r] for (p, _), r in zip(parts, rows, strict=True)]),
        metrics={},
        times={},
    )


def _whole_batch(rollout: Rollout, rewards: torch.Tensor, world: World, pad_id: int) -> tuple[Rollout, torch.Tensor]:
    """[distributed] Every rank's graded rows, in rank (= row) order, padded as one process pads its
    generation chunks (prompts left to the widest, completions right): the step's whole batch on every rank."""
    if world.size == 1:
        return rollout, rewards
    parts = distributed.gather_objects((rollout.to(torch.device("cpu")), rewards.cpu()), world)
    whole = concat_rollouts([r for r, _ in parts], pad_id).to(rewards.device)
    return whole, torch.cat([w for _, w in parts]).to(rewards.device)
