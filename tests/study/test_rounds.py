"""The rounds of `gspo compare verdict.until=resolved`: the seeds each round adds, the looks (a clear
difference is not claimed at the first O'Brien-Fleming look of 3 seeds of 12, is at the second; Pocock-type
spending claims it at the first), and the page's words on the rounds and the repeated interval."""

from __future__ import annotations

import json

import pytest
from report_runs import fake_run

from gspo.conf.schema import VerdictConfig
from gspo.report import write_report
from gspo.report.sequential import decide
from gspo.report.stats import Interval, clip_to, paired_ci, sign_flip_p
from gspo.study.plan import make_plan
from gspo.study.presets import sweep_params
from gspo.study.rounds import look, plan_rounds, round_lines


def test_rounds_add_seeds_up_to_the_budget():
    compare = sweep_params("compare")
    assert plan_rounds(make_plan([], params=compare), VerdictConfig()) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert plan_rounds(make_plan(["seed=5,7"], params=compare), VerdictConfig(max_seeds=5, round_seeds=2)) == [
        [5, 7], [8, 9], [10]]


def test_looks_spend_alpha_and_the_page_says_why_the_rounds_stopped(tmp_path):
    """A clear difference (every seed's GSPO above its GRPO): at 3 seeds no look can claim it (the smallest claim,
    every sign alike with the t p within 2/2^3 = 0.25, spends about 0.22 under A/A, more than any look's share); at
    6 of 12 seeds O'Brien-Fleming's share (0.0056) is below what the smallest 6-seed claim spends (about 0.021), so
    it carries its alpha on, while Pocock's (0.031) covers it: its level is the largest the rule can take before the
    sign-flip p's next value 4/64 (0.0624: every sign alike and a t p within it), and the look resolves."""
    runs = {s: [fake_run(tmp_path / "runs", "grpo", s, level=0.5), fake_run(tmp_path / "runs", "gspo", s, level=0.9)]
            for s in range(6)}
    first = [p for s in range(3) for p in runs[s]]
    every = [p for s in range(6) for p in runs[s]]
    one = look(first, None, 0.02, [3], 12, "obrien_fleming", final=False)
    assert one.level == 0.0 and not one.settled
    assert look(first, None, 0.02, [3], 12, "pocock", final=False).level == 0.0
    assert not look(every, None, 0.02, [3, 6], 12, "obrien_fleming", final=False).settled
    two = look(every, None, 0.02, [3, 6], 12, "pocock", final=False)
    assert 0.062 < two.level < 4 / 64 and two.diffs[0].flip_p == pytest.approx(2 / 64)
    assert two.spent == pytest.approx(0.0288, abs=4 * two.error) and two.error == pytest.approx(0.0004, abs=1e-4)
    assert two.settled and two.decisions[0].resolved and two.decisions[0].interval.low > 0
    lines = round_lines([one, two], "settled", 12, "pocock", 0.02)
    assert lines[0].startswith("Seeds were added in rounds until the answer was known: 2 round(s), 6 seeds per arm "
                               "(at most 12); stopped because every comparison was resolved or shown equivalent within "
                               "+-0.02. Group-sequential design: Pocock-type alpha spending (Lan & DeMets 1983)")
    assert f"spent by the last look {two.spent:.4f} +- 0.0004 (Monte Carlo) of 0.05" in lines[0]
    assert lines[1].startswith("Round 1 (3 seeds per arm): no claim possible at this look (the smallest claim at 3 "
                               "seeds would spend more than the look's share of alpha); GSPO - GRPO no claim yet")
    assert lines[2].startswith("Round 2 (6 seeds per arm): level 0.0624 per comparison; GSPO - GRPO +")
    report = write_report(every, tmp_path / "out", wandb="disabled", rounds=lines,
                          sequential={"eval/arith/accuracy": two.level})
    head = report.verdict[0]
    assert head.startswith("held-out accuracy [primary]: GSPO - GRPO = +")
    assert "paired t, 6 seeds: group-sequential repeated 0.938 CI of the last look" in head
    assert f"{two.decisions[0].interval.low:+.3g} to" in head and head.endswith("resolved (GSPO higher)")
    assert lines[0] in report.verdict


def test_a_tie_and_a_clipped_interval_are_no_claim_at_a_look():
    """Issue 45's cases at the first look of 3 -> 6 -> 9 (level 0.0007 with the z boundaries): every seed +0.1
    (se 0) is no test, not "equivalent"; per-seed accuracies (0.92, 0.55, 0.95) vs (0.02, 0.05, 0.03) keep
    their se when cut to [-1, 1], so the look's repeated interval is -4.39 to +5.94 (cut: the whole range), not
    the 95% one."""
    tie = paired_ci([0.5, 0.6, 0.7], [0.4, 0.5, 0.6])
    d = decide(tie, 0.0007, 0.2)
    assert not d.resolved and not d.equivalent
    cut = clip_to(paired_ci([0.92, 0.55, 0.95], [0.02, 0.05, 0.03]), (-1.0, 1.0))
    assert cut.how == "clipped" and cut.se == pytest.approx(0.136789, abs=1e-6) and cut.p == pytest.approx(0.0299, abs=1e-4)
    wide = Interval(cut.mean, 0, 0, 3, se=cut.se, df=2).at(1 - 0.0007)
    assert (wide.low, wide.high) == (pytest.approx(-4.39, abs=0.01), pytest.approx(5.94, abs=0.01))
    d = decide(cut, 0.0007, 0.02, sign_flip_p([0.92, 0.55, 0.95], [0.02, 0.05, 0.03]))
    assert not d.resolved and (d.interval.low, d.interval.high) == (-1.0, 1.0) and d.interval.uninformative


def test_a_last_look_below_the_sign_flip_floor_claims_nothing_in_words(tmp_path):
    """Rounds cut short at 3 seeds (verdict.max_minutes): the last look spends all of alpha, but 0.05 is below
    2/2^3, so its level is 0 and the page says no claim was possible, not an interval of -inf to +inf."""
    runs = [fake_run(tmp_path / "runs", a, s, level=lvl) for a, lvl in (("grpo", 0.5), ("gspo", 0.9)) for s in range(3)]
    last = look(runs, None, 0.02, [3], 12, "obrien_fleming", final=True)
    assert last.level == 0.0 and not last.settled
    head = write_report(runs, tmp_path / "out", wandb="disabled", sequential={"eval/arith/accuracy": last.level}).verdict[0]
    assert "no claim possible at the last look (its group-sequential level is below the sign-flip floor 2/2^3)" in head
    assert "no claim (not resolved)" in head and "inf" not in head and "None" not in head


def _seeds(root, gspo_levels: dict[int, float]):
    return [p for s, lvl in gspo_levels.items() for p in (fake_run(root, "grpo", s, level=0.5),
                                                         fake_run(root, "gspo", s, level=lvl))]


def test_a_round_line_says_why_an_interval_that_excludes_zero_is_no_claim(tmp_path):
    """Issue 57 D7: GSPO higher on five seeds (+0.4) and lower on one (-0.2): the t p (about 0.03) is within the
    6-seed Pocock level (0.0624), so the repeated interval excludes zero, but the sign-flip p is 4/64 = 0.0625 (the
    observed pattern and every sign alike, with their negations), above it: the gate refuses, and the line says so."""
    runs = _seeds(tmp_path / "runs", {0: 0.9, 1: 0.9, 2: 0.9, 3: 0.9, 4: 0.9, 5: 0.3})
    two = look(runs, None, 0.02, [3, 6], 12, "pocock", final=False)
    c = two.decisions[0]
    assert c.interval.low > 0 and c.flip_p == pytest.approx(4 / 64) and not c.resolved and c.refused
    line = round_lines([two], "seeds", 12, "pocock", 0.02)[1]
    assert line.endswith(f"(the interval excludes zero, but the sign-flip p of its 6 seeds is 0.0625, above the look's "
                         f"level {two.level:.3g}: no claim)")


def test_a_look_reads_the_runs_at_their_common_step_as_the_page_does(tmp_path):
    """One GRPO run still going at step 8 of 12: the page compares every run at step 8, and so does the look (before:
    the look read the other runs' step-12 evals against its step-8 one). At step 8 GSPO's accuracy is about 0.7, at
    step 12 about 0.9."""
    runs = _seeds(tmp_path / "runs", {s: 0.9 for s in range(6)})
    going = runs[-2]
    rows = [r for r in (going / "metrics.jsonl").read_text().splitlines() if json.loads(r)["step"] <= 8]
    (going / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (going / "run.json").write_text(json.dumps({"run_id": going.name, "status": "running", "step": 8}))
    lk = look(runs, None, 0.02, [3, 6], 12, "pocock", final=False)
    assert all(v < 0.8 for v in lk.diffs[0].values[0]) and len(lk.diffs[0].values[0]) == 6
