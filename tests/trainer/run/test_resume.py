"""Resume is the run's own config, one writer per run, and checkpoints found by scanning.

Config tests compose only (no training). Checkpoint tests copy one finished 3-step TINY run (checkpoints
step_2 and step_3 kept) and damage the copy: the resume must continue from the newest intact checkpoint,
prune nothing intact, and log each step once with the numbers of the undamaged run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEARNING_SEED, TINY, without_timing
from omegaconf import OmegaConf

from gspo.conf import GspoError, compose_config, config_to_yaml
from gspo.trainer.run.rundir import RunDir, default_run_id, read_jsonl


def _saved_run(tmp_path: Path, *overrides: str) -> Path:
    """A run folder holding only the config.yaml that `gspo train <overrides>` would save."""
    cfg = compose_config([*TINY, *overrides, f"output_dir={tmp_path}", "run_id=r"])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text(config_to_yaml(cfg))
    return tmp_path / "r"


def test_a_bare_resume_loads_the_runs_own_config(tmp_path):
    run = _saved_run(tmp_path, "train.steps=6", "train.lr=3e-4", "algo=grpo")
    saved = OmegaConf.load(run / "config.yaml")
    for command in (["resume=true", "run_id=r", f"output_dir={tmp_path}"], [f"resume={run}"]):
        cfg = compose_config(command)
        assert (cfg.train.steps, cfg.train.lr, cfg.algo.name, cfg.train.group_size) == (6, 3e-4, "grpo", 4)
        assert cfg.resume is True
        assert OmegaConf.to_container(cfg) == {**OmegaConf.to_container(saved), "resume": True}


def test_resume_takes_overrides_that_extend_the_run(tmp_path):
    run = _saved_run(tmp_path, "train.steps=6")
    cfg = compose_config([f"resume={run}", "train.steps=20", "train.eval_every=5", "logger.samples_per_step=1",
                          *TINY])  # repeating the run's own values is fine
    assert (cfg.train.steps, cfg.train.eval_every, cfg.logger.samples_per_step) == (20, 5, 1)
    assert cfg.train.prompts_per_step == 2


@pytest.mark.parametrize(("override", "key"), [("train.lr=1e-3", "train.lr"), ("algo=grpo", "algo"),
                                               ("train.prompts_per_step=16", "train.prompts_per_step"),
                                               ("seed=3", "seed")])
def test_resume_refuses_an_override_that_changes_the_run(tmp_path, override, key):
    run = _saved_run(tmp_path)
    with pytest.raises(GspoError, match=f"^{key}: a resumed run keeps its own config") as err:
        compose_config([f"resume={run}", override])
    assert "\n" not in str(err.value) and "train.steps" in str(err.value)


def test_resume_of_a_folder_without_a_config_is_one_line(tmp_path):
    with pytest.raises(GspoError, match="no run at .*nope"):
        compose_config(["resume=true", "run_id=nope", f"output_dir={tmp_path}"])


def test_default_run_ids_started_in_the_same_second_differ():
    ids = {default_run_id("gspo", 0) for _ in range(50)}
    assert len(ids) == 50


def test_one_writer_per_run(tmp_path):
    first = RunDir.open(str(tmp_path), "r", resume=False)
    twin = RunDir.open(str(tmp_path), "r", resume=False)  # both pass the check: nothing is written yet
    first.set_status("running", step=0)
    first.append("metrics.jsonl", {"step": 0})
    with pytest.raises(GspoError, match="being written by another gspo process"):  # same run_id, same second
        twin.truncate_logs(-1)  # the loop's first write: it must not empty the winner's logs
    with pytest.raises(GspoError, match="being written by another gspo process"):
        twin.set_status("running", step=0)
    assert read_jsonl(tmp_path / "r" / "metrics.jsonl") == [{"step": 0}]
    with pytest.raises(GspoError, match="already exists"):  # the same run_id started later
        RunDir.open(str(tmp_path), "r", resume=False)
    with pytest.raises(GspoError, match="being written by another gspo process"):  # resume of a live run
        RunDir.open(str(tmp_path), "r", resume=True)
    first.close()
    RunDir.open(str(tmp_path), "r", resume=True).close()  # once the writer is gone, resume may go on


def test_training_refuses_a_run_another_process_writes(gspo, tmp_path):
    run = _saved_run(tmp_path)
    RunDir(run).set_status("running", step=0)
    holder = RunDir.open(str(tmp_path), "r", resume=True)  # a live run (or its resume) holds the lock
    result = gspo.invoke("train", "-q", f"resume={run}")
    assert isinstance(result.exception, GspoError) and "being written" in str(result.exception)
    assert not (run / "metrics.jsonl").exists()
    holder.close()


# --- checkpoints -----------------------------------------------------------------------------------

CKPT = (*TINY, f"seed={LEARNING_SEED}", "train.save_every=1", "train.keep_checkpoints=2", "train.eval_every=0",
        "logger.progress=false")


@pytest.fixture(scope="module")
def three_steps(gspo, tmp_path_factory) -> Path:
    """A finished 3-step run with checkpoints step_2 and step_3: copy it, never change it."""
    return gspo.train(tmp_path_factory.mktemp("ckpt"), "base", *CKPT, "train.steps=3")


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def _resume(gspo, run: Path, *overrides: str):
    result = gspo.invoke("train", f"resume={run}", *overrides)
    assert result.exit_code == 0, (result.exception, result.output)
    return result.stderr


def _steps(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").glob("step_*"))


def test_missing_pointer_and_leftover_temporaries_resume_from_the_newest(gspo, three_steps, tmp_path):
    run = _copy(three_steps, tmp_path)
    (run / "checkpoints" / "latest").unlink()
    (run / "checkpoints" / ".tmp-killed").mkdir()
    (run / "checkpoints" / ".tmp-killed" / "model.safetensors").write_bytes(b"half")
    (run / ".metrics.jsonl.x1y2").write_text("torn")
    log = _resume(gspo, run, "train.steps=4")
    assert "resume: from step_000003" in log
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert _steps(run) == ["step_000003", "step_000004"]
    assert not list(run.rglob(".tmp-*")) and not (run / ".metrics.jsonl.x1y2").exists()


@pytest.mark.parametrize("damaged", ["model.safetensors", "optimizer.pt"])
def test_a_truncated_newest_checkpoint_falls_back_to_the_one_before(gspo, three_steps, tmp_path, damaged):
    run = _copy(three_steps, tmp_path)
    path = run / "checkpoints" / "step_000003" / damaged
    half = path.stat().st_size // 2
    path.write_bytes(path.read_bytes()[:half])
    log = _resume(gspo, run)  # the bare command: steps=3 comes from the run's config
    assert f"checkpoint step_000003 is not intact ({damaged} has" in log and "resume: from step_000002" in log
    assert _steps(run) == ["step_000002", "step_000003"]  # step 2 kept until a new step 3 was complete
    assert (run / "checkpoints" / "damaged-step_000003" / damaged).stat().st_size == half  # set aside, not pruned
    weights = "checkpoints/step_000003/model.safetensors"  # step 3 trained again: the same weights, bit for bit
    assert (run / weights).read_bytes() == (three_steps / weights).read_bytes()
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert without_timing(rows) == without_timing(read_jsonl(three_steps / "metrics.jsonl"))


def test_a_checkpoint_without_its_manifest_is_not_trusted(tmp_path):
    run = RunDir(tmp_path / "r")
    run.save_checkpoint(1, lambda d: (d / "w.bin").write_bytes(b"one"))
    run.save_checkpoint(2, lambda d: (d / "w.bin").write_bytes(b"two"))
    (run.checkpoints / "step_000002" / "complete.json").unlink()  # killed between the files and the marker
    messages: list[str] = []
    assert run.latest_checkpoint(messages.append) == run.checkpoints / "step_000001"
    assert messages == ["resume: checkpoint step_000002 is not intact (no readable complete.json: its write "
                        "never finished); trying the one before it"]
    (run.checkpoints / "step_000001" / "w.bin").write_bytes(b"ONE")  # same size, other bytes
    assert run.latest_checkpoint() is None


def _paused(gspo, script: str, marker: str, args: list[str]) -> subprocess.Popen:
    """`gspo <args>` run under `script`, which writes `marker` to a pipe at its hook and waits on stdin; returns once
    the marker is read (the process is paused there until the test kills it)."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", script, str(w), *args], env=gspo.env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as pipe:
        line = pipe.readline()
    assert line.strip() == marker, proc.communicate()[1][-2000:]
    return proc


PAUSE_AFTER_STEP0_ROW = """
import os, sys
from gspo.trainer.run import loggers
fd, real = int(sys.argv[1]), loggers.Loggers.metrics

def metrics(self, step, row):
    real(self, step, row)
    if step == 0:
        os.write(fd, b"0\\n")
        sys.stdin.read()  # paused until the test kills this process

loggers.Loggers.metrics = metrics
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[2:]]
main()
"""


@pytest.mark.slow
def test_killed_after_the_step0_row_resumes_with_one_step0_row(gspo, tmp_path):
    """A real process, SIGKILLed right after its step-0 row (the marker: it writes to a pipe and waits; its
    first checkpoint would come at its last step): while it lives a resume is refused; after the kill the
    resume starts over, sets the killed attempt's rows aside and logs step 0 once."""
    run = tmp_path / "r"
    proc = _paused(gspo, PAUSE_AFTER_STEP0_ROW, "0", ["train", "-q", *CKPT, "train.steps=1", "train.save_every=0",
                                                      f"output_dir={tmp_path}", "run_id=r"])
    live = gspo.invoke("train", f"resume={run}")
    assert isinstance(live.exception, GspoError) and "being written by another" in str(live.exception)
    proc.kill()
    proc.communicate(timeout=30)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0] and not (run / "checkpoints").exists()
    log = _resume(gspo, run)
    assert "no intact checkpoint, starting at step 0" in log
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1]
    assert [r["step"] for r in read_jsonl(run / "evals.jsonl")] == [0, 0, 1, 1]  # accuracy and greedy, once each
    assert [r["step"] for r in read_jsonl(run / "set-aside" / "metrics.jsonl")] == [0]  # the killed attempt's row


PAUSE_IN_FINAL_EVAL = """
import os, sys
from gspo.trainer.run import loggers
fd, real = int(sys.argv[1]), loggers.Loggers.evals

def evals(self, rows, samples=()):
    real(self, rows, samples)
    if any(r.get("step") == 3 and r.get("temperature") for r in rows):
        os.write(fd, b"3\\n")
        sys.stdin.read()  # paused until the test kills this process

loggers.Loggers.evals = evals
from gspo.cli.main import main
sys.argv = ["gspo", *sys.argv[2:]]
main()
"""


@pytest.mark.slow
def test_killed_during_its_final_eval_resumes_to_the_same_per_sample_record(gspo, three_steps, tmp_path):
    """A real process SIGKILLed inside its final eval (step 3's held-out rows written, not its metrics row nor its
    checkpoint): the resume sets the killed attempt's eval rows aside, trains step 3 again and writes its final
    eval once, per-sample rewards and all, as the uninterrupted run did (the same draws: the eval's seed is
    (seed, step)); the report reads them."""
    from gspo.report.heldout import final_outcomes
    from gspo.report.runs import load_run

    run = tmp_path / "r"
    proc = _paused(gspo, PAUSE_IN_FINAL_EVAL, "3", ["train", "-q", *CKPT, "train.steps=3", f"output_dir={tmp_path}",
                                                    "run_id=r"])
    proc.kill()
    proc.communicate(timeout=30)
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2] and _steps(run) == ["step_000001", "step_000002"]
    killed = [r for r in read_jsonl(run / "evals.jsonl") if r["step"] == 3]
    assert [len(r.get("outcomes", [])) for r in killed] == [8, 0]  # the sampled row with its samples, the greedy
    log = _resume(gspo, run)
    assert "resume: from step_000002" in log
    assert without_timing(read_jsonl(run / "evals.jsonl")) == without_timing(read_jsonl(three_steps / "evals.jsonl"))
    assert without_timing(read_jsonl(run / "set-aside" / "evals.jsonl")) == without_timing(killed)
    final = final_outcomes(load_run(run), "eval/arith/accuracy")
    assert (final.step, final.k) == (3, 16) and final.samples.tolist() == killed[0]["outcomes"]
