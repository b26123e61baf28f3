"""The command line a newcomer meets (issue 60): `gspo compare --cfg job|all` prints the grid, `compare --help` shows
every preset at 80 columns, case-only typos get a suggestion, `gspo train --cfg job` with an unknown key is one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gspo.cli.main import app
from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.study.presets import presets


def _run(*args: str, columns: int = 200):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


def test_compare_cfg_job_prints_every_job_s_resolved_differences_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _run("compare", "--cfg", "job", "seed=0,1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("# gspo compare preset=compare: 4 job(s)")
    assert "job 1/4: seed=0 algo=grpo\n    algo.name: grpo\n" in out and "job 4/4: seed=1 algo=gspo\n" in out
    assert "    algo.clip_low: 0.0003\n" in out and "    seed: 1\n" in out
    assert "train.lr" not in out and not (tmp_path / "results").exists()  # shared keys left out; nothing ran
    whole = _run("compare", "--cfg", "all", "seed=0,1").stdout
    assert "# job 1 whole: gspo train --cfg job +sweep=compare seed=0 algo=grpo" in whole and "\ntrain:\n" in whole
    bad = _run("compare", "--cfg", "hydra")
    assert bad.exit_code == 2 and bad.stderr.strip().startswith("error: --cfg hydra: gspo compare prints its grid")


def test_compare_help_lists_every_preset_at_80_columns():
    text = _run("compare", "--help", columns=80).stdout
    flat = " ".join(text.split())
    assert all(f" {name}," in flat or f" {name}." in flat for name in presets()), text
    assert "…" not in text


def test_a_case_only_typo_gets_a_suggestion():
    with pytest.raises(GspoError, match=r"\(did you mean gspo\?\)"):
        compose_config(["algo=GSPO"])
    with pytest.raises(GspoError, match=r"did you mean train\.lr\?"):
        compose_config(["Train.LR=1e-4"])


def test_train_cfg_job_with_an_unknown_key_is_one_line():
    """Checked before Hydra prints: the console script's entry point makes the GspoError its one `error:` line."""
    result = _run("train", "--cfg", "job", "nope.key=1")
    assert isinstance(result.exception, GspoError) and result.stdout == ""
    assert str(result.exception) == "nope.key: no such key in the config (gspo train --cfg lists the keys)"
