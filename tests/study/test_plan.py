"""The experiment's plan (study/plan.py), each case of issue 56 with no training: every Hydra form of the seed plans
each (arm, seed) once (seen: `++seed=0,1` on the compare preset planned 12 jobs of 2 arms x 3 seeds x 2); a rerun
whose preset or defaults changed is refused naming each change (seen: the job not yet started trained under the
edited preset); seeds added to a finished plan run as its next round, and only those; an until into a plain
compare's folder is refused (seen: accepted, hiding the compare from its report); an until ended by its time
budget reruns its page, never a new round (seen: a larger budget went on spending alpha); a `--primary` other than
the registered one is post hoc on the page (seen: "[primary] resolved"); a copied run is one seed, not two."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from compare_stand_ins import compare_with, stand_ins_fixture  # noqa: F401 (the stand_ins fixture)
from report_runs import fake_run
from typer.testing import CliRunner

from gspo.conf.errors import GspoError
from gspo.report import write_report
from gspo.study.plan import make_plan
from gspo.study.presets import sweep_params
from gspo.trainer.run.sweepdir import report_plan, write_job_record, write_plan, write_sweep_plan


@pytest.mark.parametrize("seeds", ["++seed=0,1", "+seed=range(0,2)", "seed=5 ++seed=0,1"])
def test_every_hydra_form_of_the_seed_plans_each_arm_and_seed_once(seeds):
    plan = make_plan(["+sweep=compare", *seeds.split()], preset="compare", params=sweep_params("compare"))
    assert plan.jobs == ("seed=0 algo=grpo", "seed=0 algo=gspo", "seed=1 algo=grpo", "seed=1 algo=gspo")
    assert plan.arms == ("algo=grpo", "algo=gspo") and plan.seeds == ("0", "1")
    assert [o.split("=")[0] for o in plan.overrides] == ["+sweep", "seed"]  # what Hydra is handed: the seed once


def test_a_plan_whose_preset_or_defaults_changed_is_refused_naming_each_change(stand_ins, tmp_path):
    compare_with("hydra.sweep.dir=c", until=False)
    path = tmp_path / "c" / "plan.json"
    registered = json.loads(path.read_text())
    assert registered["seeds"] == ["0", "1"] and registered["comparisons"] == ["algo=gspo vs algo=grpo"]
    assert stand_ins.report[1]["registered"] == (None, "algo=gspo vs algo=grpo")  # the page reads the comparisons
    for arm in registered["arms"].values():  # as if the preset had said 30 steps when the plan was registered
        arm["train.steps"] = 30
    registered["arms"]["algo=grpo"]["algo.clip_high"] = 0.3  # and an older default of GRPO's
    path.write_text(json.dumps(registered))
    with pytest.raises(GspoError) as e:
        compare_with("hydra.sweep.dir=c", until=False)
    assert str(e.value).startswith("c holds a registered plan (plan.json, gspo ")
    assert str(e.value).endswith("that this command changes: algo.clip_high=0.3 -> 0.27 in arm algo=grpo; "
                                 "train.steps=30 -> 20; rerun it as registered to resume it, or start another "
                                 "hydra.sweep.dir=")
    assert [f.name for f, _ in stand_ins.sweeps] == ["c"]  # nothing ran under the changed plan


def test_seeds_added_to_a_finished_plan_run_as_its_next_round_only(stand_ins, tmp_path):
    compare_with("hydra.sweep.dir=c", until=False)
    compare_with("hydra.sweep.dir=c", "seed=0,1,2,3", until=False)
    assert [str(f) for f, _ in stand_ins.sweeps] == ["c", "c/round-2"]
    assert stand_ins.plans[-1].seeds == ("2", "3") and len(stand_ins.plans[-1].jobs) == 4  # the new seeds alone
    dirs, kw = stand_ins.report
    assert dirs == [Path("c"), Path("c/round-2")] and kw["rounds"][0].startswith(
        "Seeds 2,3 were added to the registered plan as its next round(s) after seeds 0,1 had been seen")
    registered = json.loads((tmp_path / "c" / "plan.json").read_text())
    assert registered["seeds"] == ["0", "1", "2", "3"] and registered["rounds"] == [["0", "1"], ["2", "3"]]
    compare_with("hydra.sweep.dir=c", "seed=0,1,2,3", until=False)  # the same again: round 2 resumed, c never rerun
    assert [f.name for f, _ in stand_ins.sweeps] == ["c", "round-2", "round-2"]
    with pytest.raises(GspoError) as e:
        compare_with("hydra.sweep.dir=c", "seed=0,1,2,3,4", "train.lr=5e-4", until=False)
    assert "changes: train.lr=0.0001 -> 0.0005; new seeds 4; to add seeds, give the registered seeds and the new " \
           "ones (seed=0,1,2,3,4) with nothing else changed: they run as the plan's next round" in str(e.value)
    write_sweep_plan(tmp_path / "c" / "round-2", {"overrides": [], "stamp": "s", "jobs": ["seed=2 algo=grpo"]})
    with pytest.raises(GspoError, match=r"c: new seeds 4 join a finished plan as its next round, and this one has "
                                        r"not finished \(.*job 0 \(seed=2 algo=grpo\) never ran"):
        compare_with("hydra.sweep.dir=c", "seed=0,1,2,3,4", until=False)


def test_an_until_into_a_plain_compares_folder_is_refused(stand_ins, tmp_path):
    compare_with("hydra.sweep.dir=c", until=False)
    with pytest.raises(GspoError, match=r'c holds a registered plan .*changes: verdict.until="none" -> "resolved"'):
        compare_with("hydra.sweep.dir=c")
    (tmp_path / "old" / "runs").mkdir(parents=True)  # an older gspo's compare: runs, no plan.json
    with pytest.raises(GspoError) as e:
        compare_with("hydra.sweep.dir=old")
    assert str(e.value) == ("old holds a plain compare (its runs, no until record): an until=resolved experiment there "
                            "would hide it from its report; start it in another hydra.sweep.dir=")
    assert [f.name for f, _ in stand_ins.sweeps] == ["c"]
    compare_with("hydra.sweep.dir=u")  # the reverse: a plain compare into an until's folder
    with pytest.raises(GspoError, match=r'u holds a registered plan .*changes: verdict.until="resolved" -> "none"'):
        compare_with("hydra.sweep.dir=u", until=False)
    (tmp_path / "u" / "plan.json").unlink()  # an older gspo's until: its design in sequential.json alone
    record = json.loads((tmp_path / "u" / "sequential.json").read_text())
    (tmp_path / "u" / "sequential.json").write_text(json.dumps(record | {"design": {"rounds": [[0, 1], [2, 3]]}}))
    with pytest.raises(GspoError, match=r'u holds a registered plan .*verdict.until="resolved" -> "none"'):
        compare_with("hydra.sweep.dir=u", until=False)


def test_an_until_ended_by_its_time_budget_reruns_its_page_and_never_a_new_round(stand_ins, tmp_path):
    compare_with("hydra.sweep.dir=u", "verdict.max_minutes=1e-9")  # spent once the first round is in
    assert json.loads((tmp_path / "u" / "plan.json").read_text())["ended"] == {"looks": 1, "stop": "time"}
    compare_with("hydra.sweep.dir=u", "verdict.max_minutes=1e-9")
    assert [f.name for f, _ in stand_ins.sweeps] == ["round-1", "round-1"] and stand_ins.report[1]["rounds"] == [
        "1 rounds, time"]
    with pytest.raises(GspoError) as e:
        compare_with("hydra.sweep.dir=u", "verdict.max_minutes=60")
    assert str(e.value) == ("u: the experiment ended at look 1 (time budget spent: that look spent the rest of alpha), "
                            "so a larger budget cannot add looks to it; start a new experiment with its own seeds in "
                            "another hydra.sweep.dir= (the same command reruns its page)")
    compare_with("hydra.sweep.dir=s")  # its seed budget spent at its last look: recorded as final too
    assert json.loads((tmp_path / "s" / "plan.json").read_text())["ended"] == {"looks": 2, "stop": "seeds"}
    with pytest.raises(GspoError, match=r"^s: the experiment ended at look 2 \(seeds budget spent: that look spent "
                                        r"the rest of alpha\), so a larger budget cannot add looks to it; start a new"):
        compare_with("hydra.sweep.dir=s", "verdict.max_seeds=6")


def _sweep_of_fake_runs(root: Path, primary: str | None, name: str = "sweep") -> Path:
    """A compare's folder as gspo writes it (job records, sweep.json, plan.json), of runs written by hand: GSPO's
    held-out accuracy and training reward well above GRPO's at every seed."""
    sweep = root / name
    runs = [fake_run(root / "runs", algo, s, level=0.5 if algo == "grpo" else 0.9)
            for s in range(4) for algo in ("grpo", "gspo")]
    for num, run in enumerate(runs):
        write_job_record(sweep, num, {"run_dir": str(run)})
    write_sweep_plan(sweep, {"overrides": [], "stamp": "s", "jobs": []})
    (sweep / "plan.json").write_text(json.dumps({"arms": {}, "seeds": [], "stop": {"until": "none"},
                                                 "rounds": [[]], "primary": primary}))
    return sweep


def test_a_primary_other_than_the_registered_one_is_post_hoc_never_resolved(tmp_path):
    from gspo.cli.main import app

    sweep = _sweep_of_fake_runs(tmp_path, primary=None)
    args = ["report", str(sweep), "--wandb", "disabled"]
    result = CliRunner().invoke(app, [*args, "--primary", "reward/mean"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    first = result.stdout.split("verdict:\n", 1)[1].splitlines()[0]
    assert first.startswith("  training reward [primary, post hoc]: GSPO - GRPO = +")
    assert "post hoc: this primary score was chosen after the runs" in first and "resolved (" not in first
    assert "chosen at report time (--primary), not the one the experiment's plan registered" in \
        (sweep / "report" / "report.md").read_text()
    registered = CliRunner().invoke(app, [*args, "--primary", "eval/arith/accuracy"], env={"COLUMNS": "200"})
    assert registered.stdout.split("verdict:\n", 1)[1].splitlines()[0].startswith(
        "  held-out accuracy [primary]: GSPO - GRPO")  # the registered primary, named: no post hoc


def test_the_report_takes_the_registered_primary_unless_told_and_marks_another_post_hoc_in_an_until(tmp_path):
    from gspo.cli.main import app

    sweep = _sweep_of_fake_runs(tmp_path, primary="reward/mean")
    plan = json.loads((sweep / "plan.json").read_text())  # the plan's cispo arm has no runs here
    (sweep / "plan.json").write_text(json.dumps(plan | {"comparisons": ["algo=gspo vs algo=grpo",
                                                                        "algo=cispo vs algo=grpo"]}))
    result = CliRunner().invoke(app, ["report", str(sweep), "--wandb", "disabled"], env={"COLUMNS": "200"})
    verdict = result.stdout.split("verdict:\n", 1)[1].splitlines()
    assert verdict[0].startswith("  training reward [primary]: GSPO - GRPO = +") and "post hoc" not in verdict[0]
    assert "  The experiment's plan registered 2 comparisons (algo=gspo vs algo=grpo; algo=cispo vs algo=grpo); " \
           "these runs give 1, so the alpha is split over 1, not the registered 2" in "\n".join(verdict)
    until = tmp_path / "u"  # an until=resolved experiment: its page answered held-out accuracy
    _sweep_of_fake_runs(tmp_path / "again", primary=None, name="../u/round-1")
    (until / "plan.json").write_text(json.dumps({"arms": {}, "seeds": ["0", "1", "2", "3"], "rounds": [[0, 1, 2, 3]],
                                                 "stop": {"until": "resolved"}, "primary": None}))
    (until / "sequential.json").write_text(json.dumps({"rounds": [[0, 1, 2, 3]], "looks": [], "page": {
        "lines": ["Round 1 (4 seeds per arm): level 0.01 per comparison"],
        "sequential": {"eval/arith/accuracy": 0.01}}}))
    result = CliRunner().invoke(app, ["report", str(until), "--wandb", "disabled", "--primary", "reward/mean"],
                                env={"COLUMNS": "200"})  # seen: refused
    assert result.exit_code == 0, (result.output, result.exception)
    first = result.stdout.split("verdict:\n", 1)[1].splitlines()[0]
    assert first.startswith("  training reward [primary, post hoc]: GSPO - GRPO = +") and "resolved (" not in first
    assert "chosen at report time (--primary), not the one the experiment's plan registered" in \
        (until / "report" / "report.md").read_text()


def test_a_copied_run_is_one_seed_not_two(tmp_path):
    runs = [fake_run(tmp_path / "r", algo, s) for algo in ("grpo", "gspo") for s in range(2)]
    copy = tmp_path / "elsewhere" / "gspo-copy"
    shutil.copytree(runs[-1], copy)
    report = write_report([*runs, copy], tmp_path / "out", wandb="disabled")
    assert list(report.headline["n"]) == [2, 2]
    assert f"{copy}: the same arm and seed as {runs[-1]} (a copy): counted once" in report.notes
    for name, listed in (("a", runs), ("b", [copy, runs[0]])):  # two sweep folders listing the run and its copy
        for num, run in enumerate(listed):
            write_job_record(tmp_path / name, num, {"run_dir": str(run)})
    report = write_report([tmp_path / "a", tmp_path / "b", runs[0]], tmp_path / "out2", wandb="disabled")
    assert list(report.headline["n"]) == [2, 2]  # (arm, seed) once, whatever folders it is found in


def test_report_reads_a_plans_rounds_and_its_registered_primary(tmp_path):
    write_plan(tmp_path / "c", {"arms": {}, "seeds": ["0", "1", "2"], "stop": {"until": "none"},
                                "rounds": [["0", "1"], ["2"]], "primary": "reward/mean"})
    assert report_plan([tmp_path / "c"]) == ([tmp_path / "c", tmp_path / "c" / "round-2"], ("reward/mean",))
    write_plan(tmp_path / "d", {"arms": {}, "seeds": ["0"], "stop": {}, "rounds": [["0"]], "primary": None,
                                "comparisons": ["algo=gspo vs algo=grpo", "algo=cispo vs algo=grpo"]})
    assert report_plan([tmp_path / "d"])[1] == (None, "algo=gspo vs algo=grpo", "algo=cispo vs algo=grpo")
    (tmp_path / "old" / "runs").mkdir(parents=True)  # an older gspo's sweep: compare's default primary
    assert report_plan([tmp_path / "old"]) == ([tmp_path / "old"], (None,))
    assert report_plan([tmp_path / "a-run"]) == ([tmp_path / "a-run"], ())  # runs named one by one: no plan


def test_gspo_sweep_registers_its_plan_and_a_rerun_under_another_default_is_refused(tmp_path, monkeypatch):
    """Before: only gspo compare wrote plan.json; a sweep's rerun compared its overrides alone, so a changed default
    (a gspo update) trained its remaining jobs under another config than its first ones."""
    import sys

    from gspo.study import sweep as sweep_cli

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sweep_cli, "hydra_job", lambda: None)  # no job runs: the plan is registered before any
    monkeypatch.chdir(tmp_path)
    args = ["algo=grpo,gspo", "++seed=0,1", "train.steps=2", "hydra.sweep.dir=s"]
    sweep_cli.run_sweep(args)
    registered = json.loads((tmp_path / "s" / "plan.json").read_text())
    assert list(registered["arms"]) == ["algo=grpo", "algo=gspo"] and registered["seeds"] == ["0", "1"]
    assert len(json.loads((tmp_path / "s" / "sweep.json").read_text())["jobs"]) == 4  # 2 arms x 2 seeds
    registered["arms"]["algo=gspo"]["train.lr"] = 0.0005  # as if gspo's default had been another then
    (tmp_path / "s" / "plan.json").write_text(json.dumps(registered))
    with pytest.raises(GspoError, match=r"^s holds a registered plan \(plan.json, gspo .*\) that this command changes: "
                                        r"train.lr=0.0005 -> 0.0001 in arm algo=gspo; rerun it as registered"):
        sweep_cli.run_sweep(args)


def test_the_seed_is_parsed_in_the_plan_alone_and_jobs_planned_in_one_place():
    """Before the plan: the seed list was parsed as text in 5 places and the job list expanded in 4."""
    import re

    import gspo.study

    root = Path(gspo.study.__file__).resolve().parents[1]
    sources = {p: p.read_text() for p in root.rglob("*.py") if "tests" not in p.relative_to(root).parts}
    assert [p for p, text in sources.items() if 'startswith("seed=' in text] == []
    calls = [(p.name, m) for p, text in sources.items() for m in re.findall(r"(?<!def )planned_jobs\(", text)]
    assert calls == [("plan.py", "planned_jobs(")]


def test_separate_groups_are_not_told_they_lack_the_plans_comparisons(tmp_path):
    """A plan's comparisons span every group of `gspo report --separate`: each group's page reads its primary only."""
    from gspo.report import write_groups

    runs = [fake_run(tmp_path / f"runs{steps}", algo, s, steps=steps)
            for steps in (8, 12) for algo in ("grpo", "gspo") for s in range(2)]
    registered = (None, "algo=gspo train.steps=8 vs algo=grpo train.steps=8",
                  "algo=gspo train.steps=12 vs algo=grpo train.steps=12")
    groups = write_groups(runs, tmp_path / "out", wandb="disabled", registered=registered)
    assert len(groups) == 2 and not any("plan registered" in line for _, r in groups for line in r.verdict)
    one = write_report(runs[:4], tmp_path / "one", wandb="disabled", registered=registered)
    assert any("The experiment's plan registered 2 comparisons" in line for line in one.verdict)


def test_the_plan_registers_the_comparisons_the_page_makes_from_the_arms_configs():
    """The staleness preset's GSPO+TIS (algo=gspo_tis: algo.name gspo with a TIS correction) is its own stratum on the
    page, as algo.correction.kind differs, and alone in it: it is compared with GRPO at its own lag (the nearest
    stratum's baseline), never at lag 0, after GSPO - GRPO at each lag. Every arm of family2026b, whose presets differ
    in more keys than the algorithm's name (RLOO's adv_scale, CISPO's anchor, the corrections), is compared with GRPO:
    singleton strata once left 6 of its 10 arms uncompared."""
    from gspo.study.plan import comparisons
    plan = make_plan(["+sweep=staleness", "seed=0"], preset="staleness", params=sweep_params("staleness"))
    assert len(plan.arms) == 12
    assert comparisons(plan) == ([f"rollout.lag={k} algo=gspo vs rollout.lag={k} algo=grpo" for k in (0, 1, 2, 4)]
                                 + [f"rollout.lag={k} algo=gspo_tis vs rollout.lag={k} algo=grpo" for k in (0, 1, 2, 4)])
    family = make_plan(["+sweep=family2026b", "seed=0"], preset="family2026b", params=sweep_params("family2026b"))
    arms = sweep_params("family2026b")["algo"].split(",")
    assert sorted(comparisons(family)) == sorted(f"algo={a} vs algo=grpo" for a in arms[1:])
