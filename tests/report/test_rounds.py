"""The rounds of `gspo compare verdict.until=resolved`: the seeds each round adds, the looks (a clear
difference is not claimed at the first O'Brien-Fleming look of 3 seeds of 12, is at the second; Pocock-type
spending claims it at the first), and the page's words on the rounds and the repeated interval."""

from __future__ import annotations

from report_runs import fake_run

from gspo.cli.compare import plan_rounds
from gspo.conf.schema import VerdictConfig
from gspo.report import write_report
from gspo.report.rounds import STOP_SETTLED, look, round_lines


def test_rounds_add_seeds_up_to_the_budget():
    assert plan_rounds("compare", [], VerdictConfig()) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert plan_rounds("compare", ["seed=5,7"], VerdictConfig(max_seeds=5, round_seeds=2)) == [[5, 7], [8, 9], [10]]


def test_looks_spend_alpha_and_the_page_says_why_the_rounds_stopped(tmp_path):
    runs = {s: [fake_run(tmp_path / "runs", "grpo", s, level=0.5), fake_run(tmp_path / "runs", "gspo", s, level=0.9)]
            for s in range(6)}
    first = [p for s in range(3) for p in runs[s]]
    every = [p for s in range(6) for p in runs[s]]
    one = look(first, None, 0.02, [3], 12, "obrien_fleming", final=False)
    assert one.level < 1e-4 and not one.settled  # O'Brien-Fleming spends almost nothing at t = 1/4
    assert look(first, None, 0.02, [3], 12, "pocock", final=False).settled
    two = look(every, None, 0.02, [3, 6], 12, "obrien_fleming", final=False)
    assert two.settled and two.decisions[0].resolved and two.decisions[0].interval.low > 0
    lines = round_lines([one, two], STOP_SETTLED, 12, "obrien_fleming", 0.02)
    assert lines[0].startswith("Seeds were added in rounds until the answer was known: 2 round(s), 6 seeds per arm "
                               "(at most 12); stopped because every comparison was resolved or shown equivalent within "
                               "+-0.02. Group-sequential design: O'Brien-Fleming-type alpha spending (Lan & DeMets 1983)")
    assert lines[1].startswith("Round 1 (3 seeds per arm): level 8.9e-05 per comparison; GSPO - GRPO ")
    report = write_report(every, tmp_path / "out", wandb="disabled", rounds=lines,
                          sequential={"eval/arith/accuracy": two.level})
    head = report.verdict[0]
    assert head.startswith("held-out accuracy: GSPO - GRPO = +") and "paired t, 6 seeds: repeated 0.99" in head
    assert f"{two.decisions[0].interval.low:+.3g} to" in head and head.endswith("resolved (GSPO higher)")
    assert lines[0] in report.verdict
