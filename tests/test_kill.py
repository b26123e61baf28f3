"""Real signals to a real `gspo train` process: SIGKILL mid-run leaves a readable, resumable run that
finishes with the numbers of an uninterrupted one; SIGTERM marks the run interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gspo.trainer.rundir import read_jsonl
from tests.conftest import LEARNING_SEED, TINY, without_timing

COMMON = (*TINY, f"seed={LEARNING_SEED}", "train.steps=6", "train.save_every=2", "train.eval_every=2",
          "logger.progress=false")


def _start(gspo, out: Path, run_id: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(["gspo", "train", *flags, *COMMON, f"output_dir={out}", f"run_id={run_id}"], env=gspo.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint(run: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    latest = run / "checkpoints" / "latest"
    while time.monotonic() < deadline:
        if latest.exists() and int(latest.read_text().strip().removeprefix("step_")) >= step:
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint at step {step} within {timeout} s")


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(gspo, tmp_path):
    proc = _start(gspo, tmp_path, "killed")
    run = tmp_path / "killed"
    _wait_for_checkpoint(run, 2, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "running"  # nobody could say otherwise: the process was killed
    rows = read_jsonl(run / "metrics.jsonl")  # readable whatever line the kill tore
    assert rows and rows[0]["step"] == 0
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert (run / "checkpoints" / latest / "trainer_state.json").exists()

    result = gspo.subprocess("train", f"resume={run}")  # the bare command: the run's own config
    assert result.returncode == 0, result.stderr[-2000:]
    straight = gspo.subprocess("train", *COMMON, f"output_dir={tmp_path}", "run_id=straight")
    assert straight.returncode == 0, straight.stderr[-2000:]
    resumed_rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in resumed_rows] == list(range(7))
    assert without_timing(resumed_rows) == without_timing(read_jsonl(tmp_path / "straight" / "metrics.jsonl"))
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000004", "step_000006"]


@pytest.mark.slow
def test_sigterm_marks_the_run_interrupted(gspo, tmp_path):
    proc = _start(gspo, tmp_path, "stopped", "-q")  # quiet hides log lines, not how to resume
    run = tmp_path / "stopped"
    _wait_for_checkpoint(run, 2, proc)
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in stderr
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "interrupted" and "ended" in status
    assert f"continue with: gspo train resume={run}" in stderr
