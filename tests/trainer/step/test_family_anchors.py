"""Where the trainer hands the family's members the sampler's log-probs (issue 47): OPSM's mask under a correction
and DPPO's default anchor read rollout.engine_logp through the update, not the pi_old `corrected` hands the loss;
the engine is asked for its log-probs whenever the algorithm reads them; GDPO's dynamic sampling filters on every
reward component; the pre-run checks for OPSM at token level and DPPO with a correction.

The update runs on test_update's tiny fp32 model and hand-made batch; its old log-probs are the model's own (the
update has not moved: r = 1 on the first and only minibatch), the sampler's are set apart from them.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from gspo.algos import gdpo_advantages, policy_loss
from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.engines import registry as engines
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel.distributed import World
from gspo.trainer.step.advantages import check_algorithm, corrected
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.reduction import to_host
from gspo.trainer.step.sampling import sample_batch
from gspo.trainer.step.update import Batch, run_updates
from gspo.trainer.tasks.registry import build_task
from gspo.trainer.tasks.task_types import Task, uniform_draw
from tests.conftest import TINY
from tests.trainer.step.test_sampling import ITEMS, STEP, B, G, engine, rounds  # noqa: F401  (engine: a fixture)
from tests.trainer.step.test_sampling import conf as sampling_conf
from tests.trainer.step.test_update import LENGTHS, SAMPLING, TOL, N, P, T, V, _model, _train

ADV = torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, 0.3, -0.2, -0.4])  # 4 of 8 sequences negative


def _algo(*overrides: str):
    return compose_config([*TINY, *overrides]).algo


def _update(algo, batch: Batch) -> dict:
    """run_updates with lr 0 on a fresh copy of the tiny model: the step's metrics on the host."""
    model = _model()
    precision = Precision(model, "fp32", torch.device("cpu"))
    opt = torch.optim.SGD(precision.master, lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _i: 1.0)
    ctx = StepContext(algo, _train(), SAMPLING, model=model, precision=precision, optimizer=opt, scheduler=sched)
    return to_host(run_updates(ctx, batch, seed=0))


@pytest.fixture(scope="module")
def rollout() -> Rollout:
    """test_update's batch shape: N = 8 completions of lengths LENGTHS after P prompt tokens."""
    ids = torch.randint(2, V, (N, P + T), generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor(LENGTHS)
    mask = (torch.arange(T) < lengths[:, None]).float()  # [N, T]
    return Rollout(ids, torch.cat([torch.ones(N, P, dtype=torch.long), mask.long()], 1), mask, [""] * N, lengths == T)


def _on_policy(r: Rollout, shift: torch.Tensor | float) -> tuple:
    """(rollout with engine_logp = trainer's + shift, the trainer's old log-probs): the model's own log-probs."""
    with torch.no_grad():
        logp, _ = completion_logprobs(_model(), r.input_ids, r.attention_mask, r.n_completion)
    old = logp * r.completion_mask
    return dataclasses.replace(r, engine_logp=(old + shift) * r.completion_mask), old


def test_opsm_under_tis_masks_on_the_sampler_logprobs_through_the_update(rollout):
    # algo=opsm, kind=tis (auto: token level), sampler 0.6 above the trainer on every token: the correction hands
    # the loss the trainer's old log-probs and c = min(e^-0.6, 2); the mask reads the sampler's: mean log(pi_s / pi)
    # = 0.6 > delta 0.5 for every sequence, so the 4 with A < 0 are dropped (TRL: 0.50; on pi_old it was 0.00)
    algo = _algo("algo=opsm", "algo.old_logp_source=engine", "algo.correction.kind=tis")
    rollout, old = _on_policy(rollout, 0.6)
    adv, loss_old, metrics = corrected(algo, ADV, old, rollout)
    assert torch.equal(loss_old, old) and adv.shape == old.shape  # [N, T]: a token weight
    assert metrics["correction/weight_mean"].item() == pytest.approx(math.exp(-0.6), rel=1e-6)
    got = _update(algo, Batch(rollout, adv, loss_old, None, LENGTHS))
    assert got["clip/opsm_masked_frac"] == 0.5
    # -J = -1/8 sum_{A_i > 0} A_i e^-0.6 (r = 1 up to float32, inside the band)
    want = -(1.2 + 0.4 + 0.9 + 0.3) * math.exp(-0.6) / 8
    assert got["loss/policy"] == pytest.approx(want, **TOL)


def test_dppo_is_anchored_at_a_bf16_sampler_through_the_update(rollout):
    # a bf16-like sampler: its log-probs are the trainer's rounded to bfloat16 and 0.1 apart on alternate rows; with
    # old_logp_source=auto the loss's old log-probs are the trainer's forward, DPPO's q the sampler's
    algo = _algo("algo=dppo_tv")
    r0, old = _on_policy(rollout, 0.0)
    shift = 0.1 * (torch.arange(8) % 2).double()[:, None].float()
    sampler = (old.to(torch.bfloat16).float() + shift) * r0.completion_mask
    rollout = dataclasses.replace(r0, engine_logp=sampler)
    got = _update(algo, Batch(rollout, ADV, old, None, LENGTHS))
    mask = rollout.completion_mask
    want = {}
    for anchor in ("sampler", "trainer"):
        _, m = policy_loss("dppo_tv", logp=old, old_logp=old, advantages=ADV, mask=mask, clip_low=algo.clip_low,
                           clip_high=algo.clip_high, **{**algo.options, "anchor": anchor}, max_len=SAMPLING.max_new_tokens,
                           seq_denominator=8.0, token_denominator=float(mask.sum()), sampler_logp=sampler)
        want[anchor] = {k: float(v) for k, v in m.items()}
    assert want["sampler"]["loss/policy"] != pytest.approx(want["trainer"]["loss/policy"], rel=1e-3)
    for key in ("loss/policy", "ratio/token_mean", "ratio/token_max", "clip/token_frac"):
        assert got[key] == pytest.approx(want["sampler"][key], **TOL), key
    # the ratio the loss used is pi / pi_s: 0.1 below 1 in log on the shifted rows
    assert got["ratio/token_min"] == pytest.approx(math.exp(-0.1), abs=1e-2)


@pytest.mark.parametrize("name, reads", [("opsm", True), ("dppo_kl", True), ("grpo", False)])
def test_the_engine_returns_its_logprobs_when_the_algorithm_reads_them(monkeypatch, name, reads):
    # under rollout=vllm with old_logp_source=auto the loss's old log-probs are a trainer forward, so only an
    # algorithm that reads the sampler's log-probs asks the engine for them
    asked = {}
    kind = dataclasses.replace(engines.engine_kind("vllm"), build=lambda cfg, m, t, *, want_logprobs: asked.update(
        want=want_logprobs))
    monkeypatch.setattr(engines, "engine_kind", lambda _name: kind)
    engines.make_engine(compose_config([*TINY, f"algo={name}", "rollout=vllm"]), None, None)
    assert asked["want"] is reads


def test_opsm_takes_a_token_level_correction_and_dppo_a_correction_only_on_the_trainer_anchor():
    task = build_task(compose_config(TINY).task)
    check_algorithm(_algo("algo=opsm", "algo.old_logp_source=engine", "algo.correction.kind=tis",
                          "algo.correction.level=token"), task)  # TRL combines OPSM with token-level TIS
    with pytest.raises(GspoError, match=re.escape("already weighs the sampler-trainer mismatch")):
        check_algorithm(_algo("algo=dppo_tv", "algo.old_logp_source=engine", "algo.correction.kind=tis"), task)
    check_algorithm(_algo("algo=dppo_tv", "algo.old_logp_source=engine", "algo.correction.kind=tis",
                          "algo.options.anchor=trainer"), task)
    with pytest.raises(GspoError, match=re.escape("anchor must be one of sampler, trainer")):
        check_algorithm(_algo("algo=dppo_tv", "algo.options.anchor=rollout"), task)


def _right_with_format_by_parity(text: str, gold: str) -> tuple[float, float]:
    """(correctness, format): every answer right; well formed for an odd gold (a group constant in both), else by
    the parity of its length (a group of 4 sampled completions usually varies)."""
    return 1.0, 1.0 if int(gold) % 2 else float(len(text) % 2)


def test_gdpo_dynamic_sampling_keeps_a_group_that_varies_in_any_component(engine):  # noqa: F811
    task = Task("t", [], uniform_draw(ITEMS), lambda texts, golds: [1.0] * len(texts), "arith",
                _components=_right_with_format_by_parity)
    c = sampling_conf("rollout.dynamic_sampling=true", "rollout.max_draws=2", "algo.advantage=gdpo")
    got = sample_batch(STEP, c, engine, task, torch.device("cpu"), World())
    drawn = rounds(engine, task, c, 2)  # every task reward is 1: a filter on correctness keeps no group
    varies = [len({_right_with_format_by_parity(t, g[0].gold) for t in g[1]}) > 1 for r in drawn for g in r]
    need = 1 if sum(varies[:B]) >= B else 2
    kept = min(B, sum(varies[: need * B]))
    assert 0 < kept and any(not v for v in varies[: need * B]), "this seed must draw both kinds of group"
    assert got.metrics["sampling/groups_kept"] == float(kept)
    assert got.metrics["sampling/groups_refilled"] == float(B - kept)
    # the batch's advantages under GDPO: the kept groups teach format, the refilled ones get exactly 0
    comps = torch.tensor(task.components(got.rollout.texts, [it.gold for it in got.items for _ in range(G)]))
    adv = gdpo_advantages(comps, G)
    assert (adv[: kept * G] != 0).any() and torch.equal(adv[kept * G:], torch.zeros((B - kept) * G))
    # GRPO's filter reads correctness: the same draws keep nothing
    grpo = sample_batch(STEP, sampling_conf("rollout.dynamic_sampling=true", "rollout.max_draws=2"), engine, task,
                        torch.device("cpu"), World())
    assert grpo.metrics["sampling/groups_kept"] == 0.0


def test_the_cards_say_what_runs():
    from gspo.trainer.step.explain import estimator_card

    card = estimator_card(compose_config(["algo=gdpo", "rollout.overlong_buffer=0.2"]))
    assert "the task's reward components (arith: correctness, format), and the overlong penalty as one more" in card
    assert "filter" not in card  # no dynamic sampling here: no filter, and no phantom "after the filter below"
    card = estimator_card(compose_config(["algo=gdpo", "rollout.dynamic_sampling=true"]))
    assert "groups whose every reward component (unshaped) is constant are dropped" in card
    card = estimator_card(compose_config(["algo=dapo"]))
    assert "a batch still short is refilled with dropped groups, unshaped, at advantage 0" in card
    card = estimator_card(compose_config(["algo=grpo_replay", "model=tiny-moe"]))
    assert "replay     routing replay: the experts the old policy's scoring forward chose (R2)" in card
    card = estimator_card(compose_config(["algo=opsm"]))
    assert "sum_t (sampler_logp_it - sg[logp_it]) > 0.5" in card
    card = estimator_card(compose_config(["algo=dppo_kl"]))
    assert "q = sampler: sampler = the sampler's own log-probs pi_s (the authors' Stable-RL code" in card
    assert "bypass_mode" not in card and "(verl's\n           form;" in card  # issue 62: verl's bypass_mode is PPO-clip
    assert "sg(min(r_it, 10000))" in card
    card = estimator_card(compose_config(["algo=grpo", "algo.old_logp_source=engine", "algo.correction.kind=mis"]))
    assert "c = sg(rho) if 0.5 <= rho <= 5, else 0 (IcePop)" in card
    # issue 62: IcePop names its band only; another band at token level is plain masked IS
    card = estimator_card(compose_config(["algo=grpo", "algo.old_logp_source=engine", "algo.correction.kind=mis",
                                          "algo.correction.high=2"]))
    assert "c = sg(rho) if 0.5 <= rho <= 2, else 0 (masked IS)" in card and "IcePop" not in card
    # under a correction pi_old is the trainer's; OPSM's mask still reads the sampler's, and the card says so
    card = estimator_card(compose_config(["algo=opsm", "algo.old_logp_source=engine", "algo.correction.kind=tis"]))
    assert "enter through the correction, and opsm's own line above reads them)" in card and " only)" not in card
    card = estimator_card(compose_config(["algo=grpo", "algo.old_logp_source=engine", "algo.correction.kind=tis"]))
    assert "enter through the correction only)" in card
