"""Round four (issue 59): records that tell the truth. Seen before: a metrics row duplicated as the last line was
taken as the run's final value (step 2's instead of step 4's); `resume=<finished run> train.final_eval_k=8`
evaluated nothing while config.yaml then said 8; a rebuilt run.json lost its `start`; a run killed with its
terminal (SIGHUP) stayed "running"; a dead attempt's minutes were summed into the run's wall time; a shipped
start missing from the install was blamed on the user's settings."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import TINY

from gspo.conf import GspoError, compose_config, config_to_yaml
from gspo.report.runs import load_run
from gspo.report.tables import final_value
from gspo.trainer import coldstart, loop
from gspo.trainer.run.rundir import RunDir


def test_a_duplicated_row_never_wins_over_a_later_step(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.yaml").write_text(config_to_yaml(compose_config(TINY)))
    rows = [{"step": s, "eval/arith/accuracy": s / 10} for s in range(5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*rows, rows[2]]))  # step 2 copied last
    loaded = load_run(run)
    assert final_value(loaded, "eval/arith/accuracy") == 0.4  # step 4's, was step 2's 0.2
    assert loaded.final_steps["eval/arith/accuracy"] == 4 and loaded.duplicate_steps == (2,)


def test_a_finished_runs_resume_that_changes_the_final_eval_is_refused(gspo, finished_run, tmp_path):
    run = Path(shutil.copytree(finished_run, tmp_path / "r"))
    config = (run / "config.yaml").read_text()
    result = gspo.invoke("train", "-q", f"resume={run}", "train.final_eval_k=8")
    assert isinstance(result.exception, GspoError), result.output
    assert str(result.exception).startswith(f"train.final_eval_k=8: run {run} is finished, and its final eval (step 2) "
                                            "used train.final_eval_k=16; a resume that trains no further step does "
                                            f"not evaluate again: evaluate its last checkpoint with gspo eval "
                                            f"eval.run={run} eval.benches=[arith] eval.k=8, or extend train.steps")
    assert (run / "config.yaml").read_text() == config
    resumed = compose_config([f"resume={run}", "train.final_eval_k=8", "train.steps=3"])  # trains on: evaluated at 8
    assert resumed.train.final_eval_k == 8


def test_a_rebuilt_run_json_keeps_its_start(gspo, finished_run, tmp_path):
    run = Path(shutil.copytree(finished_run, tmp_path / "r"))
    before = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text("{ torn")
    result = gspo.invoke("train", "-q", f"resume={run}")  # rebuilt, then resumed: nothing left to train
    assert result.exit_code == 0, (result.exception, result.output)
    after = json.loads((run / "run.json").read_text())
    assert after["start"] == before["start"] and after["start"]["key"]  # was absent: the report could not pool it
    assert "rebuilt" in after


def _hup_at_step_1(monkeypatch):
    real = loop.train_step

    def step(n, *args, **kwargs):
        if n == 1:
            os.kill(os.getpid(), signal.SIGHUP)  # the terminal that ran it closed
        return real(n, *args, **kwargs)

    monkeypatch.setattr(loop, "train_step", step)


@pytest.mark.parametrize("start", [signal.SIG_DFL, signal.SIG_IGN])
def test_sighup_ends_a_run_as_sigterm_does_unless_nohup_ignored_it(gspo, tmp_path, monkeypatch, start):
    """A closed terminal ends the run, recorded interrupted; a run started under nohup (SIGHUP ignored: the suite's
    own process may be one) keeps ignoring it and finishes. Either way the handler it found is the one it leaves."""
    _hup_at_step_1(monkeypatch)
    outer = signal.signal(signal.SIGHUP, start)
    try:
        result = gspo.invoke("train", "-q", *TINY, "train.steps=2", "train.eval_every=0", f"output_dir={tmp_path}",
                             "run_id=r")
        left = signal.getsignal(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, outer)
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    if start == signal.SIG_DFL:
        assert result.exit_code == 128 + signal.SIGHUP, (result.exception, result.output)
        assert info["status"] == "interrupted" and "ended" in info  # was: "running", then read as dead
    else:
        assert result.exit_code == 0 and info["status"] == "finished", (result.exception, result.output)
    assert left == start  # the handler is the run's alone


def test_a_dead_attempts_time_is_apart_from_the_runs_wall_time(tmp_path):
    first = RunDir.open(str(tmp_path), "r", resume=False)
    first.write_config("seed: 0\n")
    first.set_status("running", step=0)
    first.close()
    info = json.loads((tmp_path / "r" / "run.json").read_text())  # killed: 600 s after it began, last written at 60 s
    now = time.time()
    info |= {"started_unix": now - 600, "attempt_started_unix": now - 600, "updated_unix": now - 540, "pid": 2**22 + 1}
    (tmp_path / "r" / "run.json").write_text(json.dumps(info))
    second = RunDir.open(str(tmp_path), "r", resume=True)
    second.set_status("running", step=0)
    second.set_status("finished", step=1)
    second.close()
    done = json.loads((tmp_path / "r" / "run.json").read_text())
    assert done["dead_s"] == pytest.approx(60, abs=0.2) and done["dead_attempts"] == 1
    assert done["wall_s"] < 30  # was ~600: the dead attempt and the time between attempts summed in


def test_wall_time_sums_the_attempts_that_ended_not_the_time_between(tmp_path):
    run = RunDir.open(str(tmp_path), "r", resume=False)
    run.write_config("seed: 0\n")
    run.set_status("running", step=0)
    run.set_status("interrupted", step=0)
    run.close()
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    (tmp_path / "r" / "run.json").write_text(json.dumps(info | {"wall_s": 100.0, "started_unix": time.time() - 86400}))
    again = RunDir.open(str(tmp_path), "r", resume=True)
    again.set_status("running", step=0)
    again.set_status("finished", step=1)
    again.close()
    done = json.loads((tmp_path / "r" / "run.json").read_text())
    assert 100 <= done["wall_s"] < 130 and "dead_s" not in done  # not a day: the run waited, it did not run


def test_a_shipped_start_missing_from_the_install_is_blamed_on_the_install(tmp_path, monkeypatch):
    from gspo.trainer.policy import tiny_spec

    spec = tiny_spec(compose_config([]))
    assert spec.key() in coldstart.SHIPPED_KEYS
    monkeypatch.setattr(coldstart, "SHIPPED", tmp_path / "starts")  # the package data not installed
    with pytest.raises(GspoError) as e:
        coldstart.cold_start_path(spec, str(tmp_path / "cache"), log=lambda _m: None)
    assert str(e.value).startswith("gspo's install lacks the cold start it ships for these settings (")
    assert "shipped 8" not in str(e.value) and not (tmp_path / "cache").exists()


def test_the_shipped_keys_are_the_shipped_starts():
    assert sorted(coldstart.SHIPPED_KEYS) == sorted(p.name for p in coldstart.SHIPPED.iterdir() if p.is_dir())
