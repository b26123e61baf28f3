"""The study's policies (study/plan.py fold_equal_arms, study/eta.py, study/launch.py, study/rounds.py): arms folded by the algorithm
registry, the ETAs a sweep prints, and the registries a developer extends: a launcher policy and a stopping rule are
each added in one file (this one: a throwaway of each, registered here, changes what the study does with no other
file touched)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gspo.conf.errors import GspoError
from gspo.conf.schema import VerdictConfig
from gspo.study import launch, rounds
from gspo.study.eta import early_eta, job_progress
from gspo.study.plan import Plan, fold_equal_arms, make_plan


def test_compare_folds_gspo_token_where_it_equals_gspo_and_refuses_on_policy():
    params = {"seed": "0,1,2", "algo": "grpo,gspo,gspo_token"}
    plan = make_plan(["train.steps=5"], params=params)
    assert plan.overrides == ("train.steps=5", "algo=grpo,gspo") and len(plan.notes) == 1
    assert "equals GSPO in value and gradient" in plan.notes[0] and plan.arms == ("algo=grpo", "algo=gspo")
    assert fold_equal_arms(Plan(("algo=gspo,gspo_token", "algo.advantage=step"))) == (
        ["algo=gspo,gspo_token", "algo.advantage=step"], [])  # per-token credit: they differ
    assert fold_equal_arms(Plan(("algo=grpo,gspo_token",)))[1] == []
    with pytest.raises(GspoError, match="train.minibatches=1 is on-policy"):
        make_plan(["algo=grpo,gspo", "++train.minibatches=1"])


def test_sweep_job_line_has_i_of_n_and_an_eta_from_the_jobs_so_far(tmp_path):
    (tmp_path / "runs").mkdir()
    jobs = ["seed=0 algo=grpo", "seed=0 algo=gspo", "seed=1 algo=grpo", "seed=1 algo=gspo"]
    assert job_progress(tmp_path, 0, jobs) == "sweep job 1/4, ETA once the job has logged 2 steps"
    (tmp_path / "runs" / "0.json").write_text(json.dumps({"run_dir": "x", "started": 100.0, "ended": 200.0,
                                                          "outcome": "finished"}))
    assert job_progress(tmp_path, 1, jobs) == ("sweep job 2/4, ETA 0:05:00 for the 3 left (0:01:40 per job, evals included, "
                                                 "over 1 done)")
    assert job_progress(tmp_path, 1, None) == "sweep job 2"
    # two at once: the 3 left take two waves of a job's time
    assert job_progress(tmp_path, 1, jobs, at_once=2) == ("sweep job 2/4, ETA 0:03:20 for the 3 left (0:01:40 per job, "
                                                          "evals included, over 1 done, 2 at once)")


def test_a_sweep_gives_an_eta_from_its_first_job_before_it_ends(tmp_path):
    rows = [{"step": 0}, {"step": 1, "time/step_s": 2.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert early_eta(tmp_path, steps=20, jobs=6) is None  # one step is not a rate
    rows.append({"step": 2, "time/step_s": 4.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # 3 s/step: 18 steps left of job 1 and 5 jobs of 20 steps: 3 * (18 + 100) = 354 s
    assert early_eta(tmp_path, steps=20, jobs=6).startswith("sweep ETA about 0:05:54 for the 6 jobs (job 1's first "
                                                            "2 steps at 3 s/step")
    # 2 at once: job 1's wave, then 2 more waves of 20 steps: 3 * (18 + 40) = 174 s
    assert early_eta(tmp_path, steps=20, jobs=6, at_once=2).startswith("sweep ETA about 0:02:54 for the 6 jobs")




def test_a_new_launcher_policy_is_one_function_and_one_registration(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # on a GPU the built-in policy has no opinion
    params = {"seed": "0,1,2", "algo": "grpo,gspo"}
    assert launch.jobs_at_once(make_plan(["+sweep=compare"], params=params)) == 1
    monkeypatch.setattr(launch, "POLICIES", list(launch.POLICIES))  # the test's registration is undone after it
    launch.register_policy("three_at_once", lambda m: 3 if len(m.plan.jobs) >= 3 and m.config.model.name == "tiny" else None)
    assert launch.jobs_at_once(make_plan(["+sweep=compare"], params=params)) == 3
    assert launch.launcher_overrides(3) == ["hydra/launcher=joblib", "hydra.launcher.n_jobs=3"]
    assert launch.jobs_at_once(make_plan(["+sweep=compare", "seed=0", "algo=grpo,gspo"])) == 1  # 2 jobs: no opinion
    assert launch.jobs_at_once(make_plan(["+sweep=compare", "hydra/launcher=basic"], params=params)) == 1  # named
    with pytest.raises(ValueError, match="registered already"):
        launch.register_policy("three_at_once", lambda m: None)


def _fake_round(i: int, seeds: list[int]) -> Path:
    return Path(f"round-{i}")


def test_the_rounds_stop_by_the_registered_rules_and_a_new_rule_is_one_registration(monkeypatch):
    finals = []

    def look_at(dirs, seen, final):
        finals.append(final)
        return SimpleNamespace(seeds=seen[-1], level=0.01, settled=len(dirs) == 3 and not final, diffs=[],
                               decisions=[], spent=0.0, error=0.0)

    plan = [[0, 1], [2, 3], [4, 5], [6, 7]]
    done = rounds.run_rounds(plan, VerdictConfig(max_seeds=8), _fake_round, look_at)
    assert (done.stop, done.seeds, finals) == ("settled", [2, 4, 6], [False, False, False])  # settled at round 3
    finals.clear()
    ticks = iter([0.0, 30.0, 61.0])  # the first round began at 0 s; 61 s after it, round 2's look
    done = rounds.run_rounds(plan, VerdictConfig(max_seeds=8, max_minutes=1), _fake_round, look_at,
                             clock=lambda: next(ticks))
    assert (done.stop, finals) == ("time", [False, True])  # the time budget makes round 2's look the last
    monkeypatch.setattr(rounds, "STOPS", dict(rounds.STOPS))  # the test's registration is undone after it
    rounds.register_stop(rounds.StopRule("two_rounds", lambda *_: "two rounds were planned enough",
                                         last=lambda p: p.round == 2))
    finals.clear()
    done = rounds.run_rounds(plan, VerdictConfig(max_seeds=8), _fake_round, look_at)
    assert (done.stop, done.dirs, finals) == ("two_rounds", [Path("round-1"), Path("round-2")], [False, True])
    line = rounds.round_lines(done.looks, done.stop, 8, "pocock", 0.02)[0]
    assert "2 round(s), 4 seeds per arm (at most 8); stopped because two rounds were planned enough." in line
    with pytest.raises(ValueError, match="registered already"):
        rounds.register_stop(rounds.StopRule("seeds", lambda *_: ""))
