"""DAPO's rollout options in the trainer (trainer/step/sampling.py), on a tiny random Qwen3 and the real hf engine:
dynamic sampling keeps informative groups and refills the batch from further draws, and the overlong penalty
reaches the rewards the advantages see.

The task's reward is made to produce all-equal groups: a prompt whose gold is odd always gets 1 (its group
is constant, so it is dropped); an even one gets the parity of the completion's length (a group of 4 sampled
completions is usually mixed). The expected batch is rebuilt here round by round from the same draws.
"""

from __future__ import annotations

import pytest
import torch

from gspo.conf import compose_config
from gspo.trainer.parallel.distributed import World
from gspo.trainer.run.seeds import step_seed
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.sampling import sample_batch
from gspo.trainer.tasks.task_types import Item, Task, uniform_draw
from tests.conftest import TINY
from tests.trainer.engines.test_rollout import _engine, _tiny

B, G, STEP = 4, 4, 3
ITEMS = [Item(prompt=f"{i}+1=", gold=str(i)) for i in range(20)]


def reward(text: str, gold: str) -> float:
    return 1.0 if int(gold) % 2 else float(len(text) % 2)


def make_task(score=reward) -> Task:
    return Task("t", [], uniform_draw(ITEMS), lambda texts, golds: [score(t, g) for t, g in zip(texts, golds, strict=True)],
                "arith")


def conf(*overrides: str) -> StepContext:
    cfg = compose_config([*TINY, f"train.prompts_per_step={B}", f"train.group_size={G}", "train.minibatches=1",
                          "rollout.max_new_tokens=12", *overrides])
    return StepContext.of(cfg)


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = _tiny(seed=1)
    return _engine(model, tokenizer, max_new_tokens=12)


def rounds(engine, task, conf, n):
    """Round k as the contract says: B prompts from (seed, step, k), sampled with the round's own seed."""
    out = []
    for k in range(n):
        items = task.train_items(seed=conf.seed, step=STEP, n=B, draw=k)
        prompts = [it.prompt for it in items for _ in range(G)]
        rollout = engine.generate(prompts, seed=step_seed(conf.seed, STEP, "rollout" if k == 0 else f"rollout:{k}"))
        rewards = [reward(t, g) for t, g in zip(rollout.texts, [it.gold for it in items for _ in range(G)], strict=True)]
        groups = [(items[g], rollout.texts[g * G:(g + 1) * G], rewards[g * G:(g + 1) * G]) for g in range(B)]
        out.append(groups)
    return out


def test_all_equal_groups_are_dropped_and_the_batch_refilled(engine):
    task, c = make_task(), conf("rollout.dynamic_sampling=true", "rollout.max_draws=3")
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    drawn = rounds(engine, task, c, 3)
    # which draws were needed: as few rounds as fill the batch
    need = next((k + 1 for k in range(3) if sum(len(set(g[2])) > 1 for r in drawn[:k + 1] for g in r) >= B), 3)
    informative = [g for r in drawn[:need] for g in r if len(set(g[2])) > 1][:B]
    dropped = [g for r in drawn[:need] for g in r if len(set(g[2])) == 1]
    want = informative + dropped[: B - len(informative)]
    assert any(len(set(g[2])) == 1 for g in drawn[0]), "the reward must make an all-equal group in round 0"
    assert [it.gold for it in got.items] == [g[0].gold for g in want]
    assert got.rollout.texts == [t for g in want for t in g[1]]
    assert got.task_rewards.tolist() == [r for g in want for r in g[2]]
    assert got.metrics == {"sampling/groups_drawn": float(need * B), "sampling/groups_kept": float(len(informative)),
                           "sampling/groups_dropped": float(len(dropped)), "sampling/draws": float(need),
                           "sampling/groups_refilled": float(B - len(informative))}
    assert got.rollout.completion_mask.shape[0] == B * G and len(got.prompts) == B * G
    assert need > 1 and len(informative) == B, "this seed must need a second round and fill the batch"


def test_a_budget_spent_on_constant_groups_keeps_the_batch_shape(engine):
    task, c = make_task(lambda text, gold: 1.0), conf("rollout.dynamic_sampling=true", "rollout.max_draws=2")
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    first = rounds(engine, task, c, 1)[0]
    assert got.rollout.texts == [t for g in first for t in g[1]]  # the first dropped groups, in order
    assert got.metrics == {"sampling/groups_drawn": 8.0, "sampling/groups_kept": 0.0, "sampling/groups_dropped": 8.0,
                           "sampling/draws": 2.0, "sampling/groups_refilled": 4.0}


def test_without_the_options_the_batch_is_round_zero(engine):
    task, c = make_task(), conf()
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    first = rounds(engine, task, c, 1)[0]
    assert got.rollout.texts == [t for g in first for t in g[1]] and got.metrics == {}
    assert torch.equal(got.rewards, got.task_rewards)


def test_overlong_penalty_reaches_the_rewards_the_advantages_see(engine):
    # max_new_tokens 12, buffer 0.5: L_cache 6, the ramp after 6 tokens: penalty (6 - |y|) / 6, at most -1
    task, c = make_task(), conf("rollout.overlong_buffer=0.5")
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    lengths = got.rollout.completion_mask.sum(-1).tolist()
    want = [min(0.0, max(-1.0, (6 - n) / 6)) for n in lengths]
    assert any(w < 0 for w in want), "some completion must run into the buffer"
    torch.testing.assert_close(got.rewards - got.task_rewards, torch.tensor(want), atol=1e-6, rtol=0)
    assert got.metrics["reward/overlong_penalty"] == pytest.approx(sum(want) / len(want), abs=1e-6)


def test_the_filter_reads_correctness_so_all_right_groups_of_unequal_length_are_dropped(engine):
    # every answer right (reward 1), the overlong ramp over the last half of 12 tokens: the shaped rewards of a
    # group differ by length, its task rewards do not. DAPO (sec. 3.2) and verl filter on accuracy: all dropped.
    task = make_task(lambda text, gold: 1.0)
    c = conf("rollout.dynamic_sampling=true", "rollout.max_draws=2", "rollout.overlong_buffer=0.5")
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    penalty = torch.tensor([min(0.0, max(-1.0, (6 - n) / 6)) for n in got.rollout.completion_mask.sum(-1).tolist()])
    shaped = (got.task_rewards + penalty).view(B, G)  # what a filter on the shaped reward would have seen
    assert (shaped.amax(-1) > shaped.amin(-1)).any(), "some group's lengths must differ inside the buffer"
    assert got.metrics["sampling/groups_kept"] == 0.0 and got.metrics["sampling/groups_dropped"] == 8.0
    assert got.metrics["sampling/groups_refilled"] == 4.0  # the batch keeps its shape with dropped groups
    assert torch.equal(got.task_rewards, torch.ones(B * G))
    # groups put back to fill the batch stay unshaped: equal rewards, advantage 0, no length signal
    assert torch.equal(got.rewards, got.task_rewards) and got.metrics["reward/overlong_penalty"] == 0.0


def test_shaping_comes_after_the_filter_on_the_kept_groups(engine):
    # the parity reward makes mixed groups (kept) and constant ones (dropped); the kept rows carry the penalty
    task = make_task()
    c = conf("rollout.dynamic_sampling=true", "rollout.max_draws=3", "rollout.overlong_buffer=0.5")
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    kept = int(got.metrics["sampling/groups_kept"]) * G
    lengths = got.rollout.completion_mask.sum(-1).tolist()
    want = [min(0.0, max(-1.0, (6 - n) / 6)) if i < kept else 0.0 for i, n in enumerate(lengths)]
    assert kept > 0 and any(w < 0 for w in want)
    torch.testing.assert_close(got.rewards - got.task_rewards, torch.tensor(want), atol=1e-6, rtol=0)
