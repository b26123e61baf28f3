"""The run directory's write discipline: whole files atomically, JSONL rows that survive a kill."""

from __future__ import annotations

import json
import os

import pytest

from gspo.conf.errors import GspoError
from gspo.trainer.run.rundir import LOGS, SET_ASIDE, RunDir, atomic_write_text, read_jsonl


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "config.yaml"
    atomic_write_text(target, "a: 1\n")
    atomic_write_text(target, "a: 2\n")
    assert target.read_text() == "a: 2\n"
    assert os.listdir(tmp_path / "sub") == ["config.yaml"]


def test_atomic_write_failure_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "run.json"
    atomic_write_text(target, "old\n")

    with pytest.raises(TypeError):
        atomic_write_text(target, 123)  # the write fails after the temporary file exists
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["run.json"]


def test_read_jsonl_skips_a_torn_last_line(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 0, "x": 1.5}\n{"step": 1, "x": 2.5}\n{"step": 2, "x": 3')
    assert read_jsonl(f) == [{"step": 0, "x": 1.5}, {"step": 1, "x": 2.5}]
    assert read_jsonl(tmp_path / "absent.jsonl") == []


def test_append_writes_whole_lines(tmp_path):
    run = RunDir.open(str(tmp_path), "r", resume=False)
    run.write_config("seed: 0\n")
    run.append("metrics.jsonl", {"step": 1, "reward/mean": 0.25})
    run.append("metrics.jsonl", {"step": 2, "reward/mean": 0.5})
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == (
        '{"step": 1, "reward/mean": 0.25}\n{"step": 2, "reward/mean": 0.5}\n')


def test_open_creates_nothing_until_the_first_write(tmp_path):
    run = RunDir.open(str(tmp_path / "runs"), "r", resume=False)
    assert not (tmp_path / "runs").exists()  # a run that fails to start leaves no empty folder
    run.set_status("running", step=0)
    assert json.loads((tmp_path / "runs" / "r" / "run.json").read_text())["status"] == "running"


def test_open_refuses_an_existing_run_without_resume(tmp_path):
    (tmp_path / "r").mkdir()
    RunDir.open(str(tmp_path), "r", resume=False)  # an empty folder is fine
    (tmp_path / "r" / "metrics.jsonl").write_text("")
    with pytest.raises(GspoError, match="already exists.*resume=true"):
        RunDir.open(str(tmp_path), "r", resume=False)


def test_open_resume_needs_a_run(tmp_path):
    with pytest.raises(GspoError, match="no run at"):
        RunDir.open(str(tmp_path), "missing", resume=True)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text("")
    with pytest.raises(GspoError, match="no run at"):  # files but no run.json: not a run
        RunDir.open(str(tmp_path), "r", resume=True)
    RunDir(tmp_path / "r").set_status("interrupted")
    assert RunDir.open(str(tmp_path), "r", resume=True).path == tmp_path / "r"


def test_truncate_logs_cuts_back_to_the_checkpoint_and_sets_the_rest_aside(tmp_path):
    run = RunDir.open(str(tmp_path), "r", resume=False)
    run.write_config("seed: 0\n")
    for name in LOGS:
        for step in range(5):
            run.append(name, {"step": step, "v": step * 0.5})
        with open(run.path / name, "a") as f:
            f.write('{"step": 5, "v"')
    assert run.truncate_logs(2) == {name: 3 for name in LOGS}
    for name in LOGS:
        assert (run.path / name).read_text() == "".join(
            json.dumps({"step": s, "v": s * 0.5}) + "\n" for s in range(3)), name
        assert (run.path / SET_ASIDE / name).read_text() == "".join(  # nothing cut is lost
            json.dumps({"step": s, "v": s * 0.5}) + "\n" for s in (3, 4)) + '{"step": 5, "v"\n', name
    assert sorted(os.listdir(run.path)) == sorted(["config.yaml", SET_ASIDE, *LOGS])
    assert run.truncate_logs(2) == {}  # nothing more to cut: the set-aside rows are not written twice
    assert len((run.path / SET_ASIDE / LOGS[0]).read_text().splitlines()) == 3


def test_set_status_keeps_fields_and_times_the_end(tmp_path):
    run = RunDir(tmp_path / "r")
    run.set_status("running", step=0, run_dir="x")
    run.set_status("running", step=3)
    run.set_status("finished")
    info = run.status()
    assert (info["status"], info["step"], info["run_dir"], info["run_id"]) == ("finished", 3, "x", "r")
    assert "ended" in info and info["wall_s"] >= 0 and "versions" in info


def test_checkpoint_written_whole_and_pointed_to(tmp_path):
    run = RunDir(tmp_path / "r")
    assert run.latest_checkpoint() is None
    run.save_checkpoint(1, lambda d: (d / "w.bin").write_bytes(b"one"))
    with pytest.raises(RuntimeError):
        run.save_checkpoint(2, lambda d: ((d / "w.bin").write_bytes(b"tw"), _raise()))
    assert run.latest_checkpoint() == run.checkpoints / "step_000001"  # the failed save changed nothing
    assert sorted(os.listdir(run.checkpoints)) == ["latest", "step_000001"]
    run.save_checkpoint(2, lambda d: (d / "w.bin").write_bytes(b"two"))
    assert (run.latest_checkpoint() / "w.bin").read_bytes() == b"two"


def _raise():
    raise RuntimeError("killed mid-save")
