"""Records keep their facts (trainer/run/rebuild.py, rundir.py): a rebuilt run.json recovers the collapse, the
stop and the start from the run's rows and checkpoints (seen before: rebuilt without `collapsed` and with a new
`started`, so the report counted a collapsed run as not collapsed); a step logged twice or out of order is cut
back to one row per step, in order, by the resume (seen: the resume kept the duplicate) and read as one by the
report (seen: a ValueError traceback in report/plots.py); complete.json is checked by its schema (seen:
`{"files": {}}` vouched for zeroed weights; other malformed ones raised TypeError or AttributeError)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import LEARNING_SEED, TINY

from gspo.conf import compose_config
from gspo.conf.errors import GspoError
from gspo.trainer.run.rebuild import recovered_facts
from gspo.trainer.run.rundir import MANIFEST, RunDir, checkpoint_problem, read_jsonl, seal_folder

EVAL_KEY = "eval/arith/accuracy"


def _run_with_rows(tmp_path: Path, rows: list[dict], checkpoints: tuple[int, ...] = ()) -> RunDir:
    path = tmp_path / "r"
    path.mkdir()
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "evals.jsonl").write_text(json.dumps({"benchmark": "arith", "metric": "accuracy", "value": 0.5, "step": 0,
                                                  "source": "train", "time": "2026-01-02T03:04:05+00:00"}) + "\n")
    for step in checkpoints:
        (path / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
    return RunDir(path)


def test_the_collapse_stop_and_start_are_recovered_from_rows_and_checkpoints(tmp_path):
    cfg = compose_config(["train.steps=5", "train.stop_on_collapse=true"])
    rows = [{"step": 0, EVAL_KEY: 0.5}, {"step": 1, "policy/entropy": 0.07}, {"step": 2, "policy/entropy": 0.001}]
    facts = recovered_facts(_run_with_rows(tmp_path, rows, checkpoints=(2,)), cfg, EVAL_KEY, rows)
    assert facts["collapsed"] == {"step": 2, "reason": "entropy collapse: 0.0010 nats per token (threshold 0.005)"}
    assert (facts["status"], facts["stopped"], facts["step"]) == ("finished", "collapse", 2)
    assert facts["started"] == "2026-01-02T03:04:05+00:00" and facts["started_unix"] == 1767323045.0


def test_an_accuracy_collapse_is_replayed_on_the_reading_that_stopped_the_run_not_the_final_eval(tmp_path):
    """A run stopped early evaluates again at train.final_eval_k, and metrics.jsonl's row keeps that final reading:
    the replay reads the step's first sampled eval (evals.jsonl), the one the rule read (seen: the final reading,
    0.30 here, above half the best, and the rebuilt run.json lost its collapse and its stop)."""
    cfg = compose_config(["train.steps=5", "train.stop_on_collapse=true", "train.eval_every=2"])
    rows = [{"step": 0, EVAL_KEY: 0.5}, {"step": 1}, {"step": 2, EVAL_KEY: 0.3}]
    run = _run_with_rows(tmp_path, rows, checkpoints=(2,))
    said = [(0, 1.0, 0.5), (0, 0.0, 0.6), (2, 1.0, 0.2), (2, 0.0, 0.3), (2, 1.0, 0.3), (2, 0.0, 0.3)]
    (run.path / "evals.jsonl").write_text("".join(json.dumps(
        {"benchmark": "arith", "metric": "pass@1", "value": v, "step": s, "temperature": t, "source": "train",
         "time": "2026-01-02T03:04:05+00:00"}) + "\n" for s, t, v in said))
    facts = recovered_facts(run, cfg, EVAL_KEY, rows)
    assert facts["collapsed"] == {"step": 2, "reason": f"held-out accuracy collapsed: {EVAL_KEY} 0.200 after a best "
                                                      "of 0.500"}
    assert (facts["status"], facts["stopped"]) == ("finished", "collapse")


def test_a_collapse_before_the_rows_end_is_no_stop_and_a_short_run_was_interrupted(tmp_path):
    cfg = compose_config(["train.steps=5"])  # stop_on_collapse off: the run trained on past the collapse
    rows = [{"step": 0}, {"step": 1, "policy/entropy": 0.001}, {"step": 2, "policy/entropy": 0.07}]
    facts = recovered_facts(_run_with_rows(tmp_path, rows, checkpoints=(2,)), cfg, EVAL_KEY, rows)
    assert facts["collapsed"]["step"] == 1 and "stopped" not in facts and facts["status"] == "interrupted"


def test_a_nonfinite_dump_past_the_rows_is_the_stop(tmp_path):
    cfg = compose_config(["train.steps=5"])
    rows = [{"step": 0}, {"step": 1}]
    run = _run_with_rows(tmp_path, rows)
    (run.path / "nonfinite_step_000002.json").write_text(json.dumps({"step": 2, "reason": "non-finite loss"}))
    facts = recovered_facts(run, cfg, EVAL_KEY, rows)
    assert (facts["status"], facts["stopped"], facts["error"]) == ("failed", "nonfinite", "step 2: non-finite loss")


def test_a_damaged_run_json_of_a_stopped_run_is_rebuilt_whole_and_the_run_stays_stopped(gspo, tmp_path):
    run = gspo.train(tmp_path, "c", f"seed={LEARNING_SEED}", "train.steps=3", "train.collapse.entropy_min=20",
                     "train.stop_on_collapse=true")
    was = json.loads((run / "run.json").read_text())
    time.sleep(1.1)
    damaged_at = time.time()
    (run / "run.json").write_text('{"status": "fini')  # torn
    bare = gspo.invoke("train", "-q", *TINY, f"resume={run}")
    assert isinstance(bare.exception, GspoError) and "stopped at step 1 (collapse: entropy collapse" in str(bare.exception)
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["stopped"], info["collapsed"]) == ("finished", "collapse", was["collapsed"])
    # the step-0 eval's time (written to the second, so up to 1 s before the start), not the rebuild's
    assert was["started_unix"] - 1 < info["started_unix"] < damaged_at
    assert (run / "set-aside" / "run.json.unreadable").read_text() == '{"status": "fini'


def test_a_resume_keeps_one_row_per_step_in_step_order(tmp_path):
    path = tmp_path / "r"
    path.mkdir()
    rows = [{"step": 0, "a": 0}, {"step": 2, "a": 2}, {"step": 1, "a": 1}, {"step": 1, "a": 11}, {"step": 3, "a": 3}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.yaml").write_text("seed: 0\n")
    run = RunDir.open(str(tmp_path), "r", resume=True)
    try:
        aside = run.truncate_logs(2)
    finally:
        run.close()
    assert read_jsonl(path / "metrics.jsonl") == [{"step": 0, "a": 0}, {"step": 1, "a": 11}, {"step": 2, "a": 2}]
    assert aside == {"metrics.jsonl": 1, "metrics.jsonl (steps logged twice: 1)": 1}
    assert read_jsonl(path / "set-aside" / "metrics.jsonl") == [{"step": 3, "a": 3}, {"step": 1, "a": 1}]


def test_the_report_reads_one_row_per_step_and_says_so(finished_run, tmp_path):
    from gspo.report.arms import group_arms
    from gspo.report.plots import _curves
    from gspo.report.runs import load_run
    from gspo.report.tables import final_notes

    run = tmp_path / "twice"
    shutil.copytree(finished_run, run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([*lines, lines[1]]) + "\n")  # step 1 logged again, last
    loaded = load_run(run)
    assert list(loaded.metrics["step"]) == [0, 1, 2] and loaded.duplicate_steps == (1,)
    (arm,) = group_arms([loaded])
    values, _ = _curves(arm, "reward/mean", "time")  # raised "cannot reindex on an axis with duplicate labels"
    assert list(values.index) == [1, 2]
    assert any("logs step(s) 1 more than once" in n for n in final_notes([loaded], []))


@pytest.mark.parametrize("manifest, problem", [
    ({"files": {}}, "w.bin is not listed"),
    ({"step": 1, "files": []}, "no files object"),
    ({"step": "1", "files": {}}, 'step is "1"'),
    ([], "no files object"),
    ({"files": {"w.bin": {"bytes": "4", "sha256": "0" * 64}}}, "no size and sha256"),
    ({"files": {"w.bin": None}}, "no size and sha256"),
    ({"files": {"../w.bin": {"bytes": 4, "sha256": "0" * 64}}}, "outside the folder"),
])
def test_a_malformed_manifest_is_damage(tmp_path, manifest, problem):
    folder = tmp_path / "step_000001"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"\0\0\0\0")  # zeroed weights
    seal_folder(folder, 1)
    assert checkpoint_problem(folder) is None
    (folder / MANIFEST).write_text(json.dumps(manifest))
    said = checkpoint_problem(folder)
    assert said is not None and said.startswith(f"{MANIFEST} is damaged (") and problem in said


def test_a_run_folder_moved_mid_run_is_one_line_and_no_stub_at_the_old_path(tmp_path):
    from gspo.trainer.run.rundir import RunMoved

    run = RunDir.open(str(tmp_path), "r", resume=False)
    try:
        run.set_status("running", step=0)
        (tmp_path / "r").rename(tmp_path / "moved")
        with pytest.raises(RunMoved) as e:
            run.set_status("failed", error="x")  # the loop's last status write (an OSError it logs)
        assert isinstance(e.value, OSError) and isinstance(e.value, GspoError)
        assert str(e.value).startswith(f"run {tmp_path / 'r'} was moved or deleted while this process was writing it")
        with pytest.raises(RunMoved):
            run.append("metrics.jsonl", {"step": 1})
    finally:
        run.close()
    assert not (tmp_path / "r").exists()  # before: a stub run.json (failed) recreated here
    assert json.loads((tmp_path / "moved" / "run.json").read_text())["status"] == "running"
