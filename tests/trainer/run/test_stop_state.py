"""A stop is a state: a run a rule stopped (train.stop_on_collapse; a non-finite value under
train.on_nonfinite=stop) stays stopped on a bare `gspo train resume=<run>`, which is one line naming the stop and
train.past_stop=true, the option that trains on past it. Seen before: a collapse-stopped run resumed bare trained
on to train.steps while run.json still said `stopped: collapse`."""

from __future__ import annotations

import json

from conftest import LEARNING_SEED, TINY

from gspo.conf.errors import GspoError
from gspo.trainer.run.rundir import read_jsonl


def test_a_collapse_stopped_run_stays_stopped_unless_past_stop_is_said(gspo, tmp_path):
    # an entropy floor above any real entropy makes step 1 "collapse" deterministically
    run = gspo.train(tmp_path, "c", f"seed={LEARNING_SEED}", "train.steps=3", "train.collapse.entropy_min=20",
                     "train.stop_on_collapse=true")
    before = (run / "metrics.jsonl").read_text()
    bare = gspo.invoke("train", "-q", *TINY, f"resume={run}")
    assert isinstance(bare.exception, GspoError), bare.output  # the console script's one line, exit 2
    message = str(bare.exception)
    assert message.startswith(f"run {run} stopped at step 1 (collapse: entropy collapse")
    assert message.endswith("add train.past_stop=true to train on past the stop")
    assert (run / "metrics.jsonl").read_text() == before  # nothing trained, nothing rewritten
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["stopped"]) == ("finished", "collapse")

    past = gspo.invoke("train", "-q", *TINY, f"resume={run}", "train.past_stop=true")
    assert past.exit_code == 0, (past.exception, past.output)
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["stopped"], info["past_stops"]) == ("finished", None, [{"stopped": "collapse", "step": 1}])
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert "past_stop: false" in (run / "config.yaml").read_text()  # the option was this resume's, not the run's


def test_a_nonfinite_stop_is_recorded_as_a_stop(tmp_path):
    import pytest

    from gspo.trainer.run.guards import NonFinite, handle_nonfinite
    from gspo.trainer.run.rundir import RunDir

    class Cfg:
        class train:  # noqa: N801 - the config's shape
            on_nonfinite = "stop"

    run = RunDir.open(str(tmp_path), "r", resume=False)
    with pytest.raises(GspoError):
        handle_nonfinite(Cfg, run, 3, NonFinite("non-finite loss"), print)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["stopped"] == "nonfinite"
