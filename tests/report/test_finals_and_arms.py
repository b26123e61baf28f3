"""Finals that are final, arms as resume sees a run, and hints that name everything (issue 37).

A run stopped by train.stop_on_collapse evaluates at its last step (before: its "final" was step 0's); a run
written before that says which step its final is from. Runs written before a schema key existed, or resumed
with a key resume treats as trajectory-neutral, join their arm. The W&B sync hint names every offline folder
of the run, quoted; `--out` that is a file or a symlink loop is one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import LEARNING_SEED

from gspo.conf import GspoError
from gspo.report.arms import group_arms
from gspo.report.runs import load_run
from gspo.report.tables import final_notes, final_step, final_value, headlines
from gspo.report.write import write_report
from gspo.trainer.run.rundir import read_jsonl

ACC = "eval/arith/accuracy"


@pytest.fixture(scope="module")
def stopped(gspo, tmp_path_factory) -> Path:
    """A run whose entropy floor makes step 1 "collapse", stopped there (train.stop_on_collapse)."""
    return gspo.train(tmp_path_factory.mktemp("stopped"), "c", f"seed={LEARNING_SEED}", "train.steps=3",
                      "train.collapse.entropy_min=20", "train.stop_on_collapse=true")


def test_a_run_stopped_by_a_collapse_evaluates_at_its_last_step(stopped):
    rows = read_jsonl(stopped / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and ACC in rows[1]
    run = load_run(stopped)
    assert final_step(run, ACC) == 1 == run.last_step and final_value(run, ACC) == rows[1][ACC]
    assert final_notes([run], headlines("arith")) == []


def test_a_run_stopped_before_that_says_which_step_its_final_is_from(stopped, tmp_path):
    """A run stopped early by an older gspo has no eval at its last step: the report says so, never silently."""
    run = Path(shutil.copytree(stopped, tmp_path / "old"))
    rows = read_jsonl(run / "metrics.jsonl")
    rows[1] = {k: v for k, v in rows[1].items() if not k.startswith("eval/")}
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_run(run)
    assert final_value(loaded, ACC) == rows[0][ACC]
    notes = final_notes([loaded], headlines("arith"))
    assert f"old: its final {ACC} is from step 0, not its last step 1 (stopped early: collapse); the tables use the " \
           "step-0 value" in notes


def _config(run: Path, change) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    change(config)
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def test_arms_group_on_the_schema_completed_config_and_ignore_what_resume_may_change(finished_run, tmp_path):
    """Before: a run written before train.compile existed was its own arm (compile=None vs False), and so was a
    run resumed with train.keep_checkpoints=5."""
    runs = [Path(shutil.copytree(finished_run, tmp_path / name)) for name in ("a", "b", "c", "d")]
    _config(runs[1], lambda c: c["train"].pop("compile"))
    _config(runs[2], lambda c: c["train"].update(keep_checkpoints=5, save_every=1, eval_every=1))
    _config(runs[3], lambda c: c["train"].update(lr=5e-4))  # this one is another arm
    arms = group_arms([load_run(r) for r in runs])
    assert [(a.label, [r.run_id for r in a.runs]) for a in arms] == [("lr=0.0001", ["a", "b", "c"]),
                                                                       ("lr=0.0005", ["d"])]
    assert load_run(runs[1]).config["train.compile"] is False


@pytest.mark.parametrize("kind", ["file", "loop", "under a file"])
def test_an_out_that_is_a_file_or_a_symlink_loop_is_one_line(finished_run, tmp_path, kind):
    out = tmp_path / "out"
    if kind == "loop":
        out.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(out)
    else:
        out.write_text("a file")
        out = out / "sub" if kind == "under a file" else out
    with pytest.raises(GspoError) as err:
        write_report([finished_run], out, wandb="disabled")
    what = {"file": "is a file, not a folder", "loop": "is a symlink to no folder (a loop or a file)",
            "under a file": "lies under a file, not a folder"}[kind]
    assert str(err.value) == f"--out {out} {what}: name a folder (new or existing) for the report"


def test_the_wandb_sync_hint_names_every_offline_folder_of_the_run_quoted(gspo, finished_run, tmp_path):
    """Before: after kills and resumes, the hint named the last attempt's folder only, unquoted; the steps the
    earlier attempts logged were in the others."""
    run = Path(shutil.copytree(finished_run, tmp_path / "a run" / "r"))
    earlier = run / "wandb" / "offline-run-20200101_000000-r"  # an earlier attempt's offline run
    earlier.mkdir(parents=True)
    (run / "wandb" / "offline-run-20200101_000000-other").mkdir()  # another W&B run's: not named
    result = gspo.invoke("train", "-q", f"resume={run}", "train.steps=3", "logger=wandb", "logger.wandb=offline")
    assert result.exit_code == 0, (result.exception, result.output)
    (latest,) = [f for f in (run / "wandb").glob("offline-run-*-r") if f != earlier]
    assert result.stderr.splitlines()[-1] == (f"W&B offline run: {latest}; upload it with: wandb sync '{earlier}' "
                                              f"'{latest}'")
