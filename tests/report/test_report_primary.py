"""`gspo report --primary METRIC`: the page's one primary score, as `verdict.primary=` names it for `gspo compare`."""

from __future__ import annotations

from report_runs import fake_run
from typer.testing import CliRunner

from gspo.cli.main import app


def test_report_primary_names_the_pages_primary_score(tmp_path):
    runs = [str(fake_run(tmp_path / "r", algo, s)) for algo in ("grpo", "gspo") for s in range(3)]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["report", *runs, "--out", str(out), "--wandb", "disabled",
                                      "--primary", "reward/mean"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    verdict = result.stdout.split("verdict:\n", 1)[1].splitlines()
    assert verdict[0].startswith("  training reward [primary]: ")
    assert any(v.startswith("  held-out accuracy [exploratory]") for v in verdict)
    assert "--primary reward/mean" in (out / "report.md").read_text()  # the page's command gives it again
    bad = CliRunner().invoke(app, ["report", *runs, "--out", str(tmp_path / "o2"), "--wandb", "disabled",
                                   "--primary", "clip/token_frac"], env={"COLUMNS": "200"})
    said = [line for line in bad.stderr.strip().splitlines() if not line.startswith("report: ")]  # its stage lines
    assert bad.exit_code != 0 and said == [
        "error: primary score clip/token_frac: not a score these runs logged (eval/arith/accuracy, "
        "eval/arith/accuracy_greedy, reward/mean)"]


def _curve(run, values: dict[int, float]) -> None:
    """Set the run's held-out accuracy at the given steps (and remove it elsewhere)."""
    import json

    path = run / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    for r in rows:
        r.pop("eval/arith/accuracy", None)
        if r["step"] in values:
            r["eval/arith/accuracy"] = values[r["step"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_area_under_the_held_out_curve_is_a_primary_score_paired_as_the_final_one(tmp_path):
    """`--primary auc:eval/arith/accuracy` (verdict.primary's form): each run's area under its held-out curve,
    trapezoid over its eval steps divided by the span (the mean accuracy over training), read by the same paired
    machinery as the final score; a run that ended early carries its last eval to its end (intention-to-treat)."""
    import json

    import pytest

    from gspo.report.runs import load_run
    from gspo.report.tables import curve_area

    runs = [fake_run(tmp_path / "r", algo, s) for algo in ("grpo", "gspo") for s in range(3)]  # 12 steps, evals at 0, 4, 8, 12
    for i, run in enumerate(runs):
        lift = 0.1 if i >= 3 else 0.0
        _curve(run, {0: 0.3, 4: 0.4 + lift + 0.01 * i, 8: 0.5 + lift, 12: 0.5 + lift})
    # (0.3 + 0.4)/2*4 + (0.4 + 0.5)/2*4 + (0.5 + 0.5)/2*4 = 1.4 + 1.8 + 2.0 = 5.2 over 12 steps
    assert curve_area(load_run(runs[0]), "eval/arith/accuracy") == pytest.approx(5.2 / 12)
    stopped = runs[4]  # gspo seed 1 stopped at step 8 by a rule: its step-8 eval carried to step 12
    _curve(stopped, {0: 0.3, 4: 0.5, 8: 0.6})
    rows = [json.loads(x) for x in (stopped / "metrics.jsonl").read_text().splitlines() if json.loads(x)["step"] <= 8]
    (stopped / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (stopped / "run.json").write_text(json.dumps({"status": "finished", "step": 8, "stopped": "nonfinite"}))
    assert curve_area(load_run(stopped), "eval/arith/accuracy") == pytest.approx((1.6 + 2.2 + 2.4) / 12)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["report", *map(str, runs), "--out", str(out), "--wandb", "disabled",
                                      "--primary", "auc:eval/arith/accuracy"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    said = result.stdout.split("verdict:\n", 1)[1].splitlines()
    assert said[0].startswith("  gspo-lr0.0001-s1 ended early at step 8 (nonfinite): intention-to-treat")
    line = next(x for x in said if "[primary]" in x)
    areas = [curve_area(load_run(r), "eval/arith/accuracy") for r in runs]
    mean = sum(a - b for a, b in zip(areas[3:], areas[:3], strict=True)) / 3
    assert line.startswith(f"  held-out accuracy (area under the curve) [primary]: GSPO - GRPO = {mean:+.3g} for these "
                           "128 held-out problems, from the tiny cold start, train.lr=0.0001, area under its curve to "
                           "step 8-12 (paired t, 3 seeds: "), line
    bad = CliRunner().invoke(app, ["report", *map(str, runs), "--out", str(tmp_path / "o2"), "--wandb", "disabled",
                                   "--primary", "auc:reward/mean"], env={"COLUMNS": "200"})
    assert bad.exit_code != 0 and "an area under the curve is of a held-out score" in bad.stderr
