"""One-liners that lead somewhere: a sweep folder rerun under another launcher names the launcher (seen before:
refused with overrides that looked identical), and `gspo eval eval.run=<read-only run>` names eval.output=,
which is then accepted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gspo.conf.errors import GspoError
from gspo.study import sweep
from gspo.study.plan import Plan


def test_a_rerun_under_another_launcher_names_it(tmp_path):
    first = ["algo=grpo,gspo", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    sweep.check_sweep_plan(tmp_path, Plan(tuple(first)), first, "stamp")
    with pytest.raises(GspoError) as e:
        sweep.check_sweep_plan(tmp_path, Plan(("algo=grpo,gspo",)), ["algo=grpo,gspo"], "stamp2")
    assert str(e.value) == (f"hydra.sweep.dir={tmp_path} holds another sweep (algo=grpo,gspo hydra/launcher=joblib "
                            "hydra.launcher.n_jobs=2; it ran with hydra/launcher=joblib hydra.launcher.n_jobs=2; another "
                            "launcher (hydra/launcher=joblib, hydra.launcher.n_jobs=2): a sweep resumes under the launcher "
                            "it started with): run this one in another folder, or the same overrides to resume that one")
    assert sweep.check_sweep_plan(tmp_path, Plan(tuple(first)), first, "stamp3") == "stamp"  # the same launcher resumes


def test_the_read_only_run_hint_is_accepted(gspo, finished_run, tmp_path, monkeypatch):
    import gspo.trainer.evaluate as evaluate

    run = Path(finished_run)
    real = os.access
    monkeypatch.setattr(evaluate.os, "access", lambda p, mode: Path(p) != run and real(p, mode))  # a read-only run
    refused = gspo.invoke("eval", f"eval.run={run}", "eval.benches=[arith]", "eval.limit=2")
    assert isinstance(refused.exception, GspoError)
    assert str(refused.exception).endswith("write this eval's rows elsewhere with eval.output=<folder>")
    out = tmp_path / "evals"
    bare = gspo.invoke("eval", f"eval.run={run}", f"eval.output={out}")  # the documented command: its hint is taken
    assert str(bare.exception).startswith("no benchmark given: eval.benches=[arith]")  # before: [aime24], a download
    done = gspo.invoke("eval", f"eval.run={run}", f"eval.output={out}", "eval.benches=[arith]", "eval.limit=2")
    assert done.exit_code == 0, (done.exception, done.output)
    assert (out / "evals.jsonl").read_text().count('"benchmark": "arith"') >= 1
