"""Issue 38: a report compares like with like. Runs that differ in what defines the experiment are refused
(or split with --separate), running or unequal runs are compared at a common step, collapse counts are
tested (Fisher's exact test, checked against hand computations and by simulation against its nominal
level), per-step times of loaded runs are left out, and the small things (ratios, reward band, the early
ETA, the cold start's rebuild line). Runs are written by hand (report_runs.py): these take seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from report_runs import fake_run

from gspo.conf.errors import GspoError
from gspo.report import write_groups, write_report
from gspo.report.collapse import Count, boschloo_p, line, mcnemar_p, smallest_p
from gspo.report.comparable import at_common_step, check_comparable, defining
from gspo.report.lines import ratio_text
from gspo.report.load import HIGH_LOAD, loaded, without_loaded_times
from gspo.report.runs import load_run
from gspo.report.tables import valid_range


def _set(run: Path, key: str, value) -> Path:
    """Change one dotted key of a hand-written run's config.yaml."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    node = config
    *parents, last = key.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run


def _cut(run: Path, upto: int, status: str = "running") -> Path:
    """The run as a reader finds it while it is still going: metrics up to `upto`, run.json `status`."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= upto))
    info = json.loads((run / "run.json").read_text()) | {"status": status, "step": upto}
    (run / "run.json").write_text(json.dumps(info))
    return run


def _status(run: Path, **fields) -> Path:
    info = json.loads((run / "run.json").read_text()) | fields
    (run / "run.json").write_text(json.dumps(info))
    return run


@pytest.mark.parametrize(("key", "value", "what"), [
    ("task.max_digits", 4, "the task's settings"), ("task.eval_size", 8, "the task's settings"),
    ("train.steps", 2, "the schedule and length"), ("model.tiny.hidden_size", 32, "the model and its cold start"),
    ("train.collapse.eval_drop", 0.3, "what counts as a collapse")])
def test_runs_that_differ_in_what_defines_the_experiment_are_refused_naming_the_key(tmp_path, key, value, what):
    runs = [fake_run(tmp_path / "r", algo, s) for algo in ("grpo", "gspo") for s in (0, 1)]
    odd = _set(fake_run(tmp_path / "odd", "grpo", 5), key, value)
    with pytest.raises(GspoError) as e:
        write_report([*runs, odd], tmp_path / "out", wandb="disabled")
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"runs differ in {key}, which is {what}")
    assert f"{key}={value} (grpo-lr0.0001-s5)" in message and "--separate" in message
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_the_issue_case_names_the_task_setting_first_and_what_may_differ_is_not_defining(tmp_path):
    """A 4-digit 2-step run with 8 held-out prompts beside a 5-digit 4-step sweep: the message names
    max_digits first (not eval_size, which the old report made the arm label) and counts the rest."""
    five = [fake_run(tmp_path / "s", a, s) for a in ("grpo", "gspo") for s in (0, 1)]
    four = fake_run(tmp_path / "x", "grpo", 0)
    for key, value in (("task.max_digits", 4), ("task.eval_size", 8), ("train.steps", 2)):
        _set(four, key, value)
    with pytest.raises(GspoError, match=r"^runs differ in task.max_digits \(and 2 more: task.eval_size, train.steps\)"):
        check_comparable([load_run(p) for p in (*five, four)])
    assert not any(defining(k) for k in ("train.lr", "algo.name", "train.minibatches", "seed", "task.workers",
                                         "model.tiny.cache_dir", "rollout.max_new_tokens"))


def test_separate_writes_one_report_per_group_of_like_runs(tmp_path):
    five = [fake_run(tmp_path / "s", a, s) for a in ("grpo", "gspo") for s in (0, 1)]
    four = _set(fake_run(tmp_path / "x", "grpo", 0), "task.max_digits", 4)
    groups = write_groups([*five, four], tmp_path / "out", wandb="disabled")
    # a run's config is completed with the schema's defaults (issue 37): the fake runs name no max_digits, so 5
    assert [name for name, _ in groups] == ["task.max_digits=5", "task.max_digits=4"]
    first, second = (r for _, r in groups)
    assert first.out_dir == tmp_path / "out" / "group-1" and (first.out_dir / "report.md").is_file()
    assert first.headline["arm"].tolist() == ["GRPO", "GSPO"]  # labels: only the key that differs in the group
    assert second.verdict[0].startswith("One arm (1 runs)") and second.notes[0] == "group 2 of 2: task.max_digits=4"


def test_a_running_sweep_is_compared_at_the_common_step_and_seeds_count_the_runs_used(tmp_path):
    """The issue's case: GRPO seed 0 finished 20 steps, GRPO seed 1 has logged only step 0 (accuracy before
    any training), GSPO seed 0 is at step 12. Before, GRPO's mean was (acc_s0@20 + acc_s1@0) / 2 over
    'n=2'; now seed 1 is left out and both arms are read at step 12 (the last eval every run has)."""
    g0 = fake_run(tmp_path, "grpo", 0, steps=20, eval_every=4)
    g1 = _cut(fake_run(tmp_path, "grpo", 1, steps=20, eval_every=4), 0)
    s0 = _cut(fake_run(tmp_path, "gspo", 0, steps=20, eval_every=4, level=0.6), 12)
    acc = "eval/arith/accuracy"
    at = {r: {row["step"]: row.get(acc) for row in map(json.loads, (r / "metrics.jsonl").read_text().splitlines())}
          for r in (g0, g1, s0)}
    report = write_report([g0, g1, s0], tmp_path / "out", wandb="disabled")
    assert report.verdict[0].startswith("Compared at step 12, the last step every run reached (the runs reached "
                                        "step 12-20 of 20: gspo-lr0.0001-s0 running at step 12)")
    assert report.verdict[1] == "grpo-lr0.0001-s1 is left out: it has no training step yet (running)"
    assert report.verdict[2] == "Runs used per arm: GRPO 1, GSPO 1."
    rows = report.headline.set_index("arm")
    assert rows.loc["GRPO", "mean"] == pytest.approx(at[g0][12]) and rows.loc["GRPO", "n"] == 1
    assert rows.loc["GRPO", "mean"] != pytest.approx((at[g0][20] + at[g1][0]) / 2)  # what the old report said
    assert rows.loc["GSPO", "mean"] == pytest.approx(at[s0][12])
    diff = next(v for v in report.verdict if v.startswith("held-out accuracy [primary]: GSPO - GRPO"))
    assert f"= {at[s0][12] - at[g0][12]:+.3g} " in diff


def test_each_metric_is_cut_at_the_last_step_every_run_logged_it(tmp_path):
    """Runs at steps 10 and 6 with evals every 4: compared at step 6, training metrics to step 6, held-out
    accuracy as of step 4; runs that end together are left as they are and nothing is said."""
    a = load_run(fake_run(tmp_path, "grpo", 0, steps=10, eval_every=4))
    b = load_run(_cut(fake_run(tmp_path, "gspo", 0, steps=10, eval_every=4), 6))
    runs, said = at_common_step([a, b])
    assert [r.last_step for r in runs] == [6, 6] and "held-out accuracy as of step 4" in said[0]
    m = runs[0].metrics
    assert m.loc[m["eval/arith/accuracy"].notna(), "step"].max() == 4 and m["reward/mean"].notna().sum() == 6
    assert at_common_step([a, a]) == ([a, a], [])
    # a run stopped where it collapsed (train.stop_on_collapse) ended as meant: the others are not cut to its step
    stopped = load_run(_status(_cut(fake_run(tmp_path, "gspo", 1, steps=10, eval_every=4), 6, "finished"),
                               stopped="collapse", collapsed={"step": 6, "reason": "x"}))
    runs, said = at_common_step([a, stopped])
    assert [r.last_step for r in runs] == [10, 6] and said == []


def test_boschloo_exact_test_matches_hand_computations():
    """Boschloo's p: the largest, over the common collapse probability q, probability of the tables whose Fisher p
    is at most the observed one. 3/3 vs 0/3: only the two extreme tables, 2 q^3 (1 - q)^3, largest at q = 1/2:
    2/64 (Fisher's: 0.10). 2/3 vs 0/3 (Fisher p 0.4): the tables (3,0), (2,0), (3,1) and their mirrors, at
    q = 1/2 (1 + 3 + 3) x 2 / 64 = 14/64. Fisher's conditional test cannot resolve 3/3 vs 0/3; Boschloo's can."""
    assert smallest_p(3, 3) == pytest.approx(2 / 64, abs=1e-9) and smallest_p(2, 2) == pytest.approx(2 / 16, abs=1e-9)
    assert boschloo_p(Count("GSPO", 2, 3), Count("GRPO", 0, 3)) == pytest.approx(14 / 64, abs=1e-6)
    assert boschloo_p(Count("GRPO", 3, 3), Count("GRPO", 3, 3)) == 1.0  # every run collapsed: nothing to test
    assert line(Count("GSPO", 2, 3, (20, 30)), Count("GRPO", 0, 3)) == (
        "collapsed: GSPO 2/3 vs GRPO 0/3 (first at step 20 vs -; Boschloo's exact test p = 0.22): not resolved")
    assert line(Count("GSPO", 1, 2), Count("GRPO", 0, 2)).endswith(
        "not resolved; with 2 and 2 runs no count can be at this level (all against none gives p = 0.12)")
    assert line(Count("GRPO", 3, 3), Count("GSPO", 0, 3)).endswith("resolved (GRPO collapses more often)")
    # held to its level in the page's family (issue 57): 3/3 vs 0/3 (p 0.031) is no claim at 0.01, and says so
    assert line(Count("GRPO", 3, 3), Count("GSPO", 0, 3), 0.01) == (
        "collapsed: GRPO 3/3 vs GSPO 0/3 (first at step - vs -; Boschloo's exact test p = 0.031, at its level 0.01 of "
        "the page's 0.05): not resolved; with 3 and 3 runs no count can be at this level (all against none gives "
        "p = 0.031)")


def test_exact_mcnemar_where_the_runs_pair_by_seed(tmp_path):
    def arm(algo: str, broke: set[int]) -> list:
        return [load_run(_status(fake_run(tmp_path, algo, s), **({"collapsed": {"step": 5, "reason": "x"}}
                                                                  if s in broke else {}))) for s in range(6)]

    # the until run at 5e-4 as its previous page had it (results/until-lr5e-4 before issue 42): seeds 1, 3, 5 collapsed under GRPO only
    grpo, gspo = arm("grpo", {0, 1, 3, 4, 5}), arm("gspo", {0, 4})
    assert mcnemar_p(grpo, gspo) == (pytest.approx(0.25), 3, 0)  # 3 discordant seeds, all one way: 2 / 2^3
    assert mcnemar_p(grpo, gspo[:5]) is None  # not the same seeds: no pairing
    said = line(Count("GRPO", 5, 6, (5,)), Count("GSPO", 2, 6, (5,)), paired=mcnemar_p(grpo, gspo))
    assert "paired by seed: 3 seed(s) collapsed in GRPO only, 0 in GSPO only, exact McNemar p = 0.25" in said


def test_boschloo_keeps_its_nominal_level_exactly_and_outpowers_fisher():
    """6 runs per arm: every one of the 49 tables' p once, then the exact rejection rate sum P(a) P(b) [p < 0.05]
    under two binomials. Under the null (a common collapse probability 0.2, 0.3 or 0.5) the size stays below 5%;
    at 0.8 vs 0.2 it rejects 56% of the time (issue 45: 0.56, Fisher's 0.28)."""
    from scipy.stats import binom

    p = {(a, b): boschloo_p(Count("a", a, 6), Count("b", b, 6)) for a in range(7) for b in range(7)}

    def rate(pa: float, pb: float) -> float:
        return sum(binom.pmf(a, 6, pa) * binom.pmf(b, 6, pb) for (a, b), v in p.items() if v < 0.05)
    size = max(rate(q, q) for q in (0.2, 0.3, 0.5))
    assert size == pytest.approx(0.0386, abs=5e-4) and size < 0.05
    assert rate(0.8, 0.2) == pytest.approx(0.558, abs=1e-3)


def test_times_of_runs_under_high_load_are_left_out_and_said(tmp_path):
    quiet = load_run(_status(fake_run(tmp_path, "grpo", 0), load_start=1.1, load_max=2.2, load_end=2.0))
    busy = load_run(_status(fake_run(tmp_path, "grpo", 1), load_start=1.0, load_max=2 * HIGH_LOAD + 1, load_end=3.0))
    old = load_run(fake_run(tmp_path, "gspo", 0))  # recorded no load
    assert (loaded(quiet), loaded(busy), loaded(old)) == (False, True, False)
    runs, said = without_loaded_times([quiet, busy, old])
    assert runs[1].metrics["time/step_s"].isna().all() and runs[0].metrics["time/step_s"].notna().sum() == 12
    assert said[0].startswith("grpo-lr0.0001-s1: its per-step times are left out of the comparison: it ran under a "
                              "load of 4.0 on 2 CPUs") and "recorded no load average" in said[1]


def test_the_trainer_records_the_load_it_ran_under(finished_run):
    info = json.loads((finished_run / "run.json").read_text())
    assert all(isinstance(info[k], float) and info[k] >= 0 for k in ("load_start", "load_max", "load_end"))
    assert info["load_max"] >= max(info["load_start"], info["load_end"])


def test_ratios_are_never_zero_x_and_the_reward_band_stays_in_its_range(tmp_path):
    assert [ratio_text(r) for r in (130.2, 1100.4, 0.0042, 0.00021)] == ["130x", "1,100x", "0.0042x", "1/4,762x"]
    runs = [load_run(fake_run(tmp_path, "grpo", s)) for s in (0, 1)]
    assert valid_range("reward/mean", runs) == (0.0, 1.0)  # a task reward: [0, 1], not the shaped (-1, 1)
    _set(runs[0].path, "rollout.overlong_buffer", 0.2)
    assert valid_range("reward/mean", [load_run(runs[0].path)])[0] == -1.0  # DAPO's overlong penalty goes below 0


def test_a_cold_start_rebuilt_for_a_changed_setting_says_which(tmp_path):
    from gspo.conf import compose_config
    from gspo.trainer.coldstart import settings_changed
    from gspo.trainer.policy import tiny_spec

    spec = tiny_spec(compose_config(["task.max_digits=4"]))
    assert settings_changed(spec, tmp_path) == ""  # nothing cached: the first build says so itself
    cached = tmp_path / "abc"
    cached.mkdir()
    (cached / "coldstart.json").write_text(json.dumps({"spec": spec.fields() | {"max_digits": 5}}))
    assert settings_changed(spec, tmp_path) == "task.max_digits=4, cached 5"


ROOT = Path(__file__).resolve().parents[2]


def _readme_stability_rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| preset (committed report) |"):]
    table = table[:table.index("\n\n")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in table.splitlines()[2:]]


def test_the_readme_stability_table_matches_the_committed_runs_and_boschloos_test():
    """Every count of the README's stability table with its Boschloo p; the lr preset's counts recomputed from
    its committed summary.csv (one row per run, collapsed_step empty where the run did not collapse)."""
    import pandas as pd

    rows = _readme_stability_rows()
    assert [r[0].split(" ")[0] for r in rows if r[0]] == ["`lr`", "`lr`", "`stability`", "`moe`"]  # lr, then until
    frac = re.compile(r"(\d+)/(\d+)")
    for _setting, grpo, gspo, p in (r[1:] for r in rows):
        (gk, gn), (sk, sn) = (tuple(map(int, frac.match(c).groups())) for c in (grpo, gspo))
        if p != "-":
            assert boschloo_p(Count("GRPO", gk, gn), Count("GSPO", sk, sn)) == pytest.approx(float(p.split(" ")[0]), abs=0.005)
    assert rows[-1][4].endswith("(0.84 against both GRPO arms, 5/6)")
    assert boschloo_p(Count("GRPO", 5, 6), Count("GSPO", 3, 3)) == pytest.approx(0.84, abs=0.005)
    summary = pd.read_csv(ROOT / "results" / "lr-sensitivity" / "summary.csv")
    summary["broke"] = summary["collapsed_step"].notna()
    counts = summary.groupby(["algo.name", "train.lr"])["broke"].agg(["sum", "count"])
    said = {r[1]: (r[2], r[3]) for r in rows[:5]}
    for lr, text in ((3.5e-4, "lr 3.5e-4"), (5e-4, "lr 5e-4"), (7e-4, "lr 7e-4")):
        for algo, cell in zip(("grpo", "gspo"), said[text], strict=True):
            assert cell.startswith(f"{counts.loc[(algo, lr), 'sum']}/{counts.loc[(algo, lr), 'count']}"), (algo, lr)
    pooled = summary.groupby("algo.name")["broke"].agg(["sum", "count"])
    assert said["pooled over the 5 rates"] == tuple(f"{pooled.loc[a, 'sum']}/{pooled.loc[a, 'count']}" for a in ("grpo", "gspo"))
    until = pd.read_csv(ROOT / "results" / "until-lr5e-4" / "summary.csv")  # the until run at 5e-4: every round's runs
    until["broke"] = until["collapsed_step"].notna()
    counts = until.groupby("algo.name")["broke"].agg(["sum", "count"])
    (row,) = [r for r in rows if r[0].startswith("`lr` at 5e-4 until")]
    for algo, cell in zip(("grpo", "gspo"), row[2:4], strict=True):
        assert cell.startswith(f"{counts.loc[algo, 'sum']}/{counts.loc[algo, 'count']}"), algo


def test_unequal_arms_say_each_arms_seeds_and_a_terminal_gets_a_first_line_at_once(tmp_path):
    from gspo.cli.entry import first_line

    runs = [fake_run(tmp_path, "grpo", 0), fake_run(tmp_path, "grpo", 1), fake_run(tmp_path, "gspo", 0)]
    report = write_report(runs, tmp_path / "out", wandb="disabled")
    assert "(GRPO 2 seed(s), GSPO 1: no interval, no claim either way)" in report.verdict[0]
    assert first_line(["report", "x"]) == "gspo report: starting (loading pandas and matplotlib takes a few seconds)"
    assert first_line(["train"]) == ("gspo train: starting (loading torch and its libraries: seconds on a quiet "
                                        "machine, minutes on a busy one)")
    assert first_line(["train", "--help"]) is None and first_line(["--help"]) is None


def test_a_run_that_failed_or_stopped_early_keeps_its_pair_with_its_last_eval(tmp_path):
    """Intention-to-treat (issue 57 D5): a run that failed at step 8 (or a rule stopped, not a collapse) keeps its
    pair with its last held-out eval (step 8), the others are not cut to its step, and the page says so; the
    paired difference is the one the rounds read (every run's last value), not the step-8 one."""
    acc = "eval/arith/accuracy"
    grpo = [fake_run(tmp_path, "grpo", s, steps=20, eval_every=4) for s in range(3)]
    gspo = [fake_run(tmp_path, "gspo", s, steps=20, eval_every=4, level=0.6) for s in range(3)]
    _status(_cut(gspo[1], 8, "failed"), error="step 9: loss is nan", stopped="nonfinite")
    final = {r: [json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines()] for r in grpo + gspo}
    last = {r: [row[acc] for row in rows if acc in row][-1] for r, rows in final.items()}
    report = write_report(grpo + gspo, tmp_path / "out", wandb="disabled")
    assert report.verdict[0] == ("gspo-lr0.0001-s1 ended early at step 8 (nonfinite): intention-to-treat, it keeps its "
                                 "pair with its last values (held-out eval of step 8), in the verdict, the tables and the "
                                 "rounds alike; the other runs are not cut to its step.")
    diff = next(v for v in report.verdict if v.startswith("held-out accuracy [primary]: GSPO - GRPO"))
    itt = sum(last[a] - last[b] for a, b in zip(gspo, grpo, strict=True)) / 3
    assert f"= {itt:+.3g} " in diff and "paired t, 3 seeds" in diff
    step8 = {r: next(row[acc] for row in final[r] if row["step"] == 8) for r in grpo + gspo}
    assert f"= {sum(step8[a] - step8[b] for a, b in zip(gspo, grpo, strict=True)) / 3:+.3g} " not in diff


def test_one_missing_value_leaves_out_its_seeds_pair_not_the_pairing(tmp_path):
    """Issue 57 D9: a run with no held-out value leaves that seed's pair out, said in the line; the other
    seeds stay paired (before, the whole comparison fell back to Welch's, +0.192 on an A/A-like case)."""
    runs = [fake_run(tmp_path, algo, s) for algo in ("grpo", "gspo") for s in range(4)]
    path = runs[5] / "metrics.jsonl"  # gspo seed 1: no held-out value at all (its evals failed)
    rows = [{k: v for k, v in json.loads(x).items() if k != "eval/arith/accuracy"} for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = write_report(runs, tmp_path / "out", wandb="disabled")
    diff = next(v for v in report.verdict if v.startswith("held-out accuracy [primary]: GSPO - GRPO"))
    assert "(paired t, 3 seeds:" in diff and "Welch, unpaired" not in diff
    assert "seed 1's pair left out: a run of it has no final value (the other seeds stay paired)" in diff
