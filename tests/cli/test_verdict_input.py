"""Bad verdict settings of `gspo compare` and `gspo report`: one `error:` line, exit 2, nothing written (no
sweep folder, no report), before any run starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gspo.cli.main import app

CASES = [
    ("effect-zero", ["compare", "verdict.effect=0"], "verdict.effect=0.0: must be > 0 (the smallest difference of interest"),
    ("effect-negative", ["compare", "verdict.effect=-0.1", "verdict.until=resolved"], "verdict.effect=-0.1"),
    ("max-seeds-below-first-round", ["compare", "verdict.until=resolved", "verdict.max_seeds=2"],
     "verdict.max_seeds=2 is below the 3 seeds per arm of the first round (0,1,2)"),
    ("one-arm", ["compare", "verdict.until=resolved", "algo=grpo"], "this sweep has one arm"),
    ("until-typo", ["compare", "verdict.until=resolvd"], "verdict.until='resolvd'"),
    ("unknown-verdict-key", ["compare", "verdict.efect=0.1"], "verdict settings: Key 'efect' not in 'VerdictConfig'"),
    ("report-effect", ["report", "--effect", "0", "."], "verdict.effect=0.0"),
    ("primary-a-mechanism", ["compare", "verdict.primary=clip/token_frac"],
     "verdict.primary=clip/token_frac: not a score of task arith's page (eval/arith/accuracy, "
     "eval/arith/accuracy_greedy, reward/mean)"),
    ("primary-another-task", ["compare", "verdict.until=resolved", "verdict.primary=eval/math/accuracy"],
     "verdict.primary=eval/math/accuracy: not a score of task arith's page"),
    ("primary-old-name", ["compare", "verdict.metric=reward/mean"], "verdict.metric is named verdict.primary now"),
    ("primary-area-of-a-reward", ["compare", "verdict.primary=auc:reward/mean"],
     "primary score auc:reward/mean: an area under the curve is of a held-out score"),
    ("primary-area-with-rounds", ["compare", "verdict.until=resolved", "verdict.primary=auc:eval/arith/accuracy"],
     "the rounds of verdict.until=resolved answer a final score"),
    ("primary-area-another-task", ["compare", "verdict.primary=auc:eval/math/accuracy"],
     "verdict.primary=eval/math/accuracy: not a score of task arith's page"),
]


@pytest.mark.parametrize(("args", "words"), [pytest.param(a, w, id=i) for i, a, w in CASES])
def test_bad_verdict_settings_are_one_line_exit_2_and_write_nothing(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert list(tmp_path.iterdir()) == []
