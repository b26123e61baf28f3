"""preset=staleness plans GRPO, GSPO and GSPO+TIS at four lags, each job composing to what it says; the launcher
counts a lagged job's sampler thread; the report's staleness verdicts and interaction are right on numbers made up
so that the answer is known."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import scipy.stats as sps

from gspo.conf import compose_config
from gspo.report.runs import Run
from gspo.report.staleness import activity, interaction, lag_table, objective, scores, slope
from gspo.study.plan import make_plan
from gspo.study.presets import sweep_params
from gspo.trainer.step.advantages import correction_bounds
from gspo.vocab import metrics as M


def test_the_preset_plans_three_objectives_at_four_lags_and_each_job_composes():
    plan = make_plan(["+sweep=staleness"], preset="staleness", params=sweep_params("staleness"))
    assert plan.swept == ("seed", "rollout.lag", "algo")
    jobs = plan.jobs
    assert len(jobs) == 36 and jobs[0].startswith("seed=0")  # seeds slowest: a stopped compare leaves whole seeds
    arms = set()
    for job in jobs[:12]:  # seed 0's arms
        cfg = compose_config(["+sweep=staleness", *job.split()])
        assert (cfg.train.steps, cfg.task.eval_size, cfg.algo.old_logp_source) == (30, 128, "engine")
        arms.add((cfg.algo.name, cfg.algo.correction.kind, cfg.rollout.lag))
        if cfg.algo.correction.kind == "tis":
            bounds = correction_bounds(cfg.algo)
            assert (bounds.level, bounds.cap) == ("geometric", 1.001)  # sequence level: GSPO's own ratio
    assert arms == {(a, k, lag) for a, k in (("grpo", "none"), ("gspo", "none"), ("gspo", "tis")) for lag in (0, 1, 2, 4)}


def test_the_launcher_counts_a_lagged_job_for_two_cores(monkeypatch):
    import torch

    from gspo.study import launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(launch, "memory_gib", lambda: 64.0)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    def at_once(preset: str, *more: str) -> int:
        return launch.jobs_at_once(make_plan([f"+sweep={preset}", *more], preset=preset, params=sweep_params(preset)))

    assert at_once("compare") == 6
    assert at_once("compare", "rollout.lag=1") == 4  # 8 cores, 2 workers a job
    assert at_once("staleness") == 4
    assert at_once("compare", "rollout.lag=0") == 6
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert at_once("staleness") == 1  # its two threads fill 2 cores


def _run(algo: str, correction: str, lag: int, seed: int, acc: float, **means: list[float]) -> Run:
    steps = max([len(v) for v in means.values()] + [1])
    frame = pd.DataFrame({"step": list(range(1, steps + 1)), **means})
    frame.loc[len(frame) - 1, "eval/arith/accuracy"] = acc
    return Run(path=None, config={"algo.name": algo, "algo.correction.kind": correction, "rollout.lag": lag,
                                  "seed": seed}, status={}, metrics=frame, torn_lines=0,
               final_steps={"eval/arith/accuracy": steps})


# GRPO_s(k) = 0.5 + 0.01 s - 0.02 k; GSPO_s(k) = GRPO_s(k) + 0.05 + b_s k with per-seed slopes b_s
SLOPES = {0: -0.010, 1: -0.006, 2: -0.011, 3: -0.009}
LAGS = (0, 1, 2, 4)


def _grid() -> list[Run]:
    runs = []
    for s, b in SLOPES.items():
        for k in LAGS:
            grpo = 0.5 + 0.01 * s - 0.02 * k
            runs += [_run("grpo", "none", k, s, grpo), _run("gspo", "none", k, s, grpo + 0.05 + b * k),
                     _run("gspo", "tis", k, s, grpo + 0.05 + b * k + 0.001 * s)]
    return runs


def test_the_interaction_is_the_mean_per_seed_slope_of_gspo_minus_grpo_with_its_t_interval():
    table = scores(_grid(), "eval/arith/accuracy")
    assert sorted(table) == list(LAGS) and sorted(table[2]) == ["GRPO", "GSPO", "GSPO+tis"]
    ci, contrasts, seeds = interaction(table)
    b = list(SLOPES.values())
    mean, sd = sum(b) / 4, math.sqrt(sum((x - sum(b) / 4) ** 2 for x in b) / 3)
    half = sps.t.ppf(0.975, 3) * sd / 2
    assert seeds == [0, 1, 2, 3]
    assert (ci.mean, ci.low, ci.high) == pytest.approx((mean, mean - half, mean + half), abs=1e-12)
    assert ci.high < 0  # GSPO's lead shrinks with the lag in every seed: resolved
    # lag 4 minus lag 0: 4 b_s per seed
    four = [4 * x for x in b]
    assert contrasts[4].mean == pytest.approx(sum(four) / 4, abs=1e-12)
    assert contrasts[4].high - contrasts[4].mean == pytest.approx(sps.t.ppf(0.975, 3) * 4 * sd / 2, rel=1e-9)
    assert sorted(contrasts) == [1, 2, 4]


def test_no_interaction_when_the_difference_does_not_move_and_too_few_lags_say_so():
    flat = [r for r in _grid()]
    for r in flat:  # GSPO = GRPO + 0.05 at every lag
        if objective(r) == "GSPO":
            k, s = r.config["rollout.lag"], r.config["seed"]
            r.metrics.loc[len(r.metrics) - 1, "eval/arith/accuracy"] = 0.55 + 0.01 * s - 0.02 * k
    ci, _, _ = interaction(scores(flat, "eval/arith/accuracy"))
    assert ci.mean == pytest.approx(0.0, abs=1e-12)
    one_lag = scores([r for r in flat if r.config["rollout.lag"] == 0], "eval/arith/accuracy")
    ci, contrasts, _ = interaction(one_lag)
    assert math.isnan(ci.mean) and contrasts == {}
    assert slope([0.0, 1.0, 2.0, 4.0], [1.0, 3.0, 5.0, 9.0]) == pytest.approx(2.0)


def test_the_lag_table_pairs_each_objective_with_its_own_baseline_and_activity_is_per_lag():
    table = lag_table(scores(_grid(), "eval/arith/accuracy"))
    assert list(table["lag"]) == list(LAGS)
    # GSPO - GRPO at lag 2: 0.05 + 2 b_s, mean over seeds; GSPO+tis against GSPO: 0.001 s, mean 0.0015
    assert table.loc[2, "GSPO - GRPO"].startswith(f"{0.05 + 2 * sum(SLOPES.values()) / 4:+.3f} [")
    assert table.loc[2, "GSPO+tis - GSPO"].startswith("+0.002 [")  # 0.0015 rounded
    runs = [_run("gspo", "tis", 1, 0, 0.5, **{M.LAG_BEHIND: [0.0, 1.0, 1.0], M.CORRECTION_TRUNCATED: [0.0, 0.2, 0.4]}),
            _run("gspo", "tis", 1, 1, 0.5, **{M.LAG_BEHIND: [0.0, 1.0, 1.0], M.CORRECTION_TRUNCATED: [0.0, 0.4, 0.2]})]
    act = activity(runs)
    assert act.loc[0, M.CORRECTION_TRUNCATED] == pytest.approx(0.2)
    assert act.loc[0, M.LAG_BEHIND] == pytest.approx(2 / 3)
