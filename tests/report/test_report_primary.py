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
