"""Issue 62's members as a user meets them: each preset composes and passes the pre-run checks, its card (`gspo
explain`) states the new rule with the preset's numbers, and preset=family2026b composes and plans its 33 runs
(not run: no reference page this session)."""

from __future__ import annotations

import pytest
import torch

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.conf.overrides import planned_jobs
from gspo.study.presets import presets, sweep_params
from gspo.trainer.parallel.distributed import World
from gspo.trainer.preflight import check_run
from gspo.trainer.step.advantages import check_algorithm, correction_bounds
from gspo.trainer.step.explain import estimator_card
from gspo.trainer.tasks.registry import build_task

ARMS = ["grpo", "luspo", "vespo", "rloo", "cispo", "cispo_sampler", "grpo_trust_region", "grpo_geo_rs_tis", "dppo_ipo",
        "icepop", "dro"]


def card(*overrides: str) -> str:
    return estimator_card(compose_config(list(overrides)))


def test_each_new_preset_has_its_card():
    assert "J_i = |y_i| min(s_i A_i, clip(s_i, 0.9997, 1.0004) A_i)" in card("algo=luspo")
    assert "aggregate  seq_mean_token_sum: J = 1/N sum_i J_i" in card("algo=luspo")
    vespo = card("algo=vespo")
    assert "k, lam = 2, 3\n" in vespo and "or 3, 2 (A < 0)" in vespo and "w_i = exp(sum_t" in vespo
    rloo = card("algo=rloo")
    assert "advantage  loo: A_i = r_i - the mean of the other G - 1 = " in rloo and "Bessel" not in rloo
    assert "q = sampler: trainer = pi_old" in card("algo=cispo_sampler")
    k3rs = card("algo=grpo_trust_region")
    assert "correction k3_rs at sequence level: c = 1 if 1/|y_i| sum_t k3(rho_it) <= 0.005 and no rho_it < 0.0001" in k3rs
    both = card("algo=grpo_geo_rs_tis")
    assert "correction geo_rs_tis at sequence level: c = sg(min(rho, 2)) if 0.999 <= rho_geo_i <= 1.001" in both


def test_sequence_only_corrections_resolve_to_their_own_numbers_and_refuse_another_level():
    b = correction_bounds(compose_config(["algo=grpo_trust_region"]).algo)
    assert (b.level, b.cap, b.low) == ("sequence", 0.005, 1e-4)
    b = correction_bounds(compose_config(["algo=gspo", "algo.old_logp_source=engine",
                                          "algo.correction.kind=geo_rs_tis", "algo.correction.cap=3"]).algo)
    assert (b.level, b.cap, b.low, b.high) == ("sequence", 3.0, 0.999, 1.001)
    cfg = compose_config(["algo=grpo_trust_region", "algo.correction.level=token"])
    with pytest.raises(GspoError, match="one weight per sequence"):
        check_algorithm(cfg.algo, build_task(cfg.task))
    cfg = compose_config(["algo=cispo_sampler", "algo.old_logp_source=engine", "algo.correction.kind=tis"])
    with pytest.raises(GspoError, match="weigh it twice"):
        check_algorithm(cfg.algo, build_task(cfg.task))
    cfg = compose_config(["algo=rloo", "algo.adv_scale=mean"])
    with pytest.raises(GspoError, match="adv_scale=mean"):
        check_algorithm(cfg.algo, build_task(cfg.task))


@pytest.mark.slow  # 11 s at load 8-9 on the 2 shared cores: eight configs composed and pre-run checked
def test_family2026b_composes_and_plans_every_arm():
    params = sweep_params("family2026b")
    assert "family2026b" in presets() and params["algo"].split(",") == ARMS
    jobs = planned_jobs([], params)
    assert len(jobs) == 3 * len(ARMS) and jobs[0] == "seed=0 algo=grpo" and jobs[-1] == "seed=2 algo=dro"
    for job in jobs[: len(ARMS)]:
        cfg = compose_config(["+sweep=family2026b", *job.split()])
        assert cfg.rollout.dtype == "bfloat16" and cfg.rollout.lag == 2 and cfg.train.steps == 60
        check_run(cfg, build_task(cfg.task), World(), torch.device("cpu"))  # every arm passes the pre-run checks
