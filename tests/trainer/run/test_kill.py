"""Real signals to a real `gspo train` process: SIGKILL mid-run leaves a readable, resumable run that
finishes with the numbers of an uninterrupted one; SIGTERM marks the run interrupted.

The process is the console script's own `main` with one test hook: right after it saves the checkpoint of
step 2 it writes the step to a pipe and waits on its stdin, so the signal always lands at that moment,
however fast or slow the machine (polling the run directory could miss a run that already finished)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gspo.trainer.run.rundir import read_jsonl
from tests.conftest import LEARNING_SEED, TINY, without_timing

COMMON = (*TINY, f"seed={LEARNING_SEED}", "train.steps=6", "train.save_every=2", "train.eval_every=2",
          "logger.progress=false")


PAUSE_AFTER_CHECKPOINT = """
import os, sys
from gspo.trainer import loop
fd, at = int(sys.argv[1]), int(sys.argv[2])
real = loop.save_checkpoint

def save(run, step, *args, **kwargs):
    out = real(run, step, *args, **kwargs)
    if step == at:
        os.write(fd, b"%d\\n" % step)
        sys.stdin.read()  # paused until the test signals this process
    return out

loop.save_checkpoint = save
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[3:]]
main()
"""


def _start_paused_after_checkpoint(gspo, out: Path, run_id: str, step: int = 2) -> subprocess.Popen:
    """`gspo train` that stops right after saving the checkpoint of `step`; returns once it is there."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_AFTER_CHECKPOINT, str(w), str(step), "train", *COMMON,
                             f"output_dir={out}", f"run_id={run_id}"], env=gspo.env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as pipe:
        line = pipe.readline()  # blocks until the hook writes, or "" when the process ended without it
    if line.strip() != str(step):
        proc.kill()
        raise AssertionError(f"the run ended before its checkpoint at step {step}: {proc.communicate()[1][-2000:]}")
    return proc


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(gspo, tmp_path):
    proc = _start_paused_after_checkpoint(gspo, tmp_path, "killed")
    run = tmp_path / "killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "running"  # nobody could say otherwise: the process was killed
    rows = read_jsonl(run / "metrics.jsonl")  # readable whatever line the kill tore
    assert rows and rows[0]["step"] == 0
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert latest == "step_000002" and (run / "checkpoints" / latest / "trainer_state.json").exists()
    proc.stdin.close()

    result = gspo.subprocess("train", *COMMON, f"output_dir={tmp_path}", "run_id=killed", "resume=true")
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
    proc = _start_paused_after_checkpoint(gspo, tmp_path, "stopped")
    run = tmp_path / "stopped"
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in stderr  # 128 + SIGTERM, as a shell reports it
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "interrupted" and "ended" in status
    assert f"continue with: gspo train resume={run}" in stderr
