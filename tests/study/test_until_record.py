"""An until=resolved experiment's record (study/until.py, study/compare.py compare_until), with the sweeps and
looks stood in for (no training): the design is recorded at the first look and checked on every attempt (seen
before: an edited preset or verdict.max_seeds was taken silently and the boundaries re-planned after looks were
seen); every look is appended (seen: sequential.json overwritten, earlier looks lost); the folder is resolved
once (seen: `${now:...}` gave each round its own folder, and two untils started in the same second shared one);
the Ctrl-C hint names the experiment's folder; `gspo report <until folder>` gives the until page (seen:
refused); a torn runs/N.json is one line, not a seed dropped from the look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from compare_stand_ins import compare_with, stand_ins_fixture  # noqa: F401 (the stand_ins fixture)

from gspo.conf.errors import GspoError
from gspo.conf.schema import VerdictConfig
from gspo.study import until


def _until(*overrides: str) -> None:
    compare_with(*overrides)


def test_the_design_is_fixed_at_the_first_look_and_every_look_is_kept(stand_ins, tmp_path):
    _until("hydra.sweep.dir=u")
    record = json.loads((tmp_path / "u" / "sequential.json").read_text())
    assert [(lk["round"], lk["seeds"]) for lk in record["looks"]] == [(1, 2), (2, 4)]
    plan = json.loads((tmp_path / "u" / "plan.json").read_text())  # registered before the first round
    assert list(plan["arms"]) == ["algo=grpo", "algo=gspo"] and plan["stop"]["verdict.max_seeds"] == 4
    assert plan["arms"]["algo=gspo"]["train.lr"] == 0.0001 and plan["ended"] == {"looks": 2, "stop": "seeds"}
    _until("hydra.sweep.dir=u")  # the same command again: its looks are appended, none overwritten
    record = json.loads((tmp_path / "u" / "sequential.json").read_text())
    assert [lk["round"] for lk in record["looks"]] == [1, 2, 1, 2] and record["page"]["lines"] == ["2 rounds, seeds"]
    with pytest.raises(GspoError) as e:
        _until("hydra.sweep.dir=u", "train.lr=5e-4")
    assert str(e.value).startswith("u holds a registered plan (plan.json, gspo ")
    assert "that this command changes: train.lr=0.0001 -> 0.0005; rerun it as registered" in str(e.value)
    with pytest.raises(GspoError, match=r"u: the experiment ended at look 2 \(seeds budget spent"):
        _until("hydra.sweep.dir=u", "verdict.max_seeds=6")
    assert len(json.loads((tmp_path / "u" / "sequential.json").read_text())["looks"]) == 4


def test_the_folder_is_resolved_once_and_the_interrupt_hint_names_it(stand_ins, tmp_path):
    _until("hydra.sweep.dir=u/${now:%H%M%S}")
    folders = {f.parent for f, _ in stand_ins.sweeps}
    assert len(folders) == 1 and [f.name for f, _ in stand_ins.sweeps] == ["round-1", "round-2"]
    (outer,) = folders
    assert all(call.again_dir == outer for _, call in stand_ins.sweeps)
    assert stand_ins.sweeps[1][1].again == ("gspo compare verdict.until=resolved verdict.max_seeds=4 "
                                               "verdict.round_seeds=2 seed=0,1")
    stand_ins.sweeps.clear()
    _until()
    _until()  # the default folders of two untils in the same second differ
    assert len({f.parent for f, _ in stand_ins.sweeps}) == 2


def test_a_torn_job_record_is_one_line_not_a_dropped_seed(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "0.json").write_text('{"run_dir": "../r"}\n')
    (tmp_path / "runs" / "1.json").write_text('{"run_dir": "../r')
    with pytest.raises(GspoError) as e:
        until.check_round_records(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'runs' / '1.json'}: not whole JSON")
    assert str(e.value).endswith("the look would leave its seed out; rerun the same command (a finished job's record "
                                 "is written again)")


def test_report_of_an_until_folder_gives_its_page(stand_ins, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import gspo.cli.report
    import gspo.report
    from gspo.cli.main import app

    _until("hydra.sweep.dir=u")
    monkeypatch.setattr(gspo.report, "write_report", lambda dirs, out, **kw: setattr(stand_ins, "report", (dirs, kw)))
    monkeypatch.setattr(gspo.cli.report, "print_report", lambda report: None)
    result = CliRunner().invoke(app, ["report", "u"])
    assert result.exit_code == 0, (result.output, result.exception)
    dirs, kw = stand_ins.report
    assert dirs == [Path("u/round-1"), Path("u/round-2")] and kw["rounds"] == ["2 rounds, seeds"] and kw["primary"] is None
    _until("hydra.sweep.dir=v", "verdict.primary=reward/mean")  # the page's primary is the score the rounds answered
    assert CliRunner().invoke(app, ["report", "v"]).exit_code == 0 and stand_ins.report[1]["primary"] == "reward/mean"
    other = CliRunner().invoke(app, ["report", "v", "--primary", "eval/arith/accuracy"], env={"COLUMNS": "200"})
    assert other.exit_code == 0, (other.output, other.exception)  # another primary: post hoc on the page, not refused
    kw = stand_ins.report[1]
    assert (kw["primary"], kw["registered"]) == ("eval/arith/accuracy", ("reward/mean",))
    assert kw["sequential"] is None or "eval/arith/accuracy" not in kw["sequential"]  # the looks' levels stay its own


def test_a_record_from_before_verdict_primary_resumes_and_a_changed_primary_is_refused(stand_ins, tmp_path):
    """results/until-lr5e-4/sequential.json records `verdict.metric` (the key's name before verdict.primary): the
    same command resumes it; naming another primary score changes the design the boundaries were planned for."""
    _until("hydra.sweep.dir=u")
    path, registered = tmp_path / "u" / "sequential.json", tmp_path / "u" / "plan.json"
    plan, record = json.loads(registered.read_text()), json.loads(path.read_text())
    registered.unlink()  # an older gspo's experiment: its design in sequential.json, no plan.json
    record["design"] = {"arms": list(plan["arms"]), "config": plan["arms"], "rounds": [[0, 1], [2, 3]],
                        "verdict.max_seeds": 4, "verdict.round_seeds": 2, "verdict.spending": VerdictConfig().spending,
                        "verdict.effect": 0.02, "verdict.metric": None}
    path.write_text(json.dumps(record))
    with pytest.raises(GspoError, match=r'verdict.primary=null -> "reward/mean"'):
        _until("hydra.sweep.dir=u", "verdict.primary=reward/mean")
    _until("hydra.sweep.dir=u")
    assert len(json.loads(path.read_text())["looks"]) == 4 and registered.is_file()  # registered from now on
