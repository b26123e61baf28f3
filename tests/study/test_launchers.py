"""Hydra's launcher and sweeper plugins drive `gspo sweep` unchanged: Optuna searches on a named metric with
trials run two at once by joblib (one torch thread each), and submitit's local launcher. `gspo compare` runs a
preset's jobs side by side on CPU cores when no launcher is named (study/launch.py `jobs_at_once`)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import TINY

from gspo.trainer.run.sweepdir import job_run_dir

pytestmark = pytest.mark.slow  # each starts a sweep of fresh interpreters (~20 s of CPU)


def _jobs(sweep: Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted((sweep / "runs").glob("*.json"))]


def _final(run: Path, metric: str) -> float:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r[metric] for r in rows if metric in r][-1]


def test_optuna_search_with_two_joblib_jobs_at_once(gspo, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    result = gspo.subprocess("sweep", *TINY, "algo=choice(grpo,gspo)", "train.lr=interval(1e-4,1e-3)", "train.steps=1",
                             "logger.progress=false", "objective=reward/mean", "hydra/sweeper=optuna",
                             "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", "hydra.sweeper.direction=maximize",
                             "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep",
                             f"output_dir={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = _jobs(tmp_path / "sweep")
    # two joblib workers, one trial each (whether their ~0.2 s of work overlaps in time depends on the load:
    # under load one worker's interpreter started after the other's trial ended, so time is not asserted)
    assert a["pid"] != b["pid"]
    assert result.stderr.count("(torch threads 1)") == 2  # 2 cores shared by 2 jobs (or more cores, 2 jobs)
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    finals = [_final(job_run_dir(tmp_path / "sweep", job), "reward/mean") for job in (a, b)]
    assert best["best_value"] == max(finals)
    assert "gspo report sweep" in result.stdout


def test_submitit_local_sweep_runs(gspo, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    result = gspo.subprocess("sweep", *TINY, "algo=gspo", "train.steps=1", "logger.progress=false",
                             "hydra/launcher=submitit_local", "hydra.sweep.dir=sweep", f"output_dir={tmp_path / 'runs'}",
                             cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (job,) = _jobs(tmp_path / "sweep")
    assert json.loads((job_run_dir(tmp_path / "sweep", job) / "run.json").read_text())["status"] == "finished"
    assert (tmp_path / "sweep" / ".submitit").is_dir()


@pytest.fixture
def cpu_only(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return lambda cores: monkeypatch.setattr("os.cpu_count", lambda: cores)


def test_a_preset_runs_its_jobs_side_by_side_on_cpu_cores_and_one_at_a_time_elsewhere(cpu_only, monkeypatch):
    from gspo.study import launch as sweep
    from gspo.study.plan import make_plan
    from gspo.study.presets import sweep_params

    def planned(overrides, params):
        return (make_plan(overrides, params=params),)

    compare = planned(["+sweep=compare"], sweep_params("compare"))  # 6 jobs: 2 algorithms x 3 seeds
    monkeypatch.setattr(sweep, "memory_gib", lambda: 64.0)  # the memory for 32 jobs, whatever this machine has
    cpu_only(2)
    assert sweep.jobs_at_once(*compare) == 2
    cpu_only(4)
    assert sweep.jobs_at_once(*compare) == 4
    cpu_only(64)
    assert sweep.jobs_at_once(*compare) == 6  # no more than the sweep has jobs
    assert sweep.jobs_at_once(*planned(["+sweep=compare", "seed=0", "algo=gspo"], {})) == 1  # one job
    cpu_only(1)
    assert sweep.jobs_at_once(*compare) == 1
    cpu_only(2)
    assert sweep.jobs_at_once(*planned(["+sweep=compare", "hydra/launcher=basic"], sweep_params("compare"))) == 1
    assert sweep.jobs_at_once(*planned(["+sweep=compare", "device=cuda"], sweep_params("compare"))) == 1
    assert sweep.jobs_at_once(*planned(["+sweep=compare", "model=qwen3-0.6b"], sweep_params("compare"))) == 1  # a hub model
    monkeypatch.setattr(sweep, "memory_gib", lambda: 3.0)
    assert sweep.jobs_at_once(*compare) == 1  # not the memory for two (2 GiB a job)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sweep, "memory_gib", lambda: 64.0)
    assert sweep.jobs_at_once(*compare) == 1  # runs on a GPU (device=auto)


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody has reaped yet (it trains no more)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


@pytest.mark.slow
def test_a_killed_compare_leaves_no_worker_training_and_the_same_command_resumes_it(gspo, tmp_path):
    """SIGKILL on `gspo compare` while two jobs run side by side: joblib's workers, orphaned, trained on (seen:
    the killed compare's jobs ran to their end, beside whatever the user started next). Each worker now stops
    itself as an interruption once its parent is gone, and the same command resumes both runs."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: compare runs its jobs one at a time")
    args = ["compare", *TINY, "seed=0", "train.steps=150", "train.eval_every=0", "logger.progress=false",
            f"output_dir={tmp_path / 'runs'}", "hydra.sweep.dir=sw"]
    proc = subprocess.Popen(["gspo", *args], cwd=tmp_path, env=gspo.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    records = [tmp_path / "sw" / "runs" / f"{n}.json" for n in (0, 1)]

    def stepping(record: Path) -> bool:  # its job has logged a training step
        if not record.exists():
            return False
        metrics = job_run_dir(tmp_path / "sw", json.loads(record.read_text())) / "metrics.jsonl"
        return metrics.exists() and '"step": 1' in metrics.read_text()

    deadline = time.time() + 300
    while not all(stepping(r) for r in records):
        assert proc.poll() is None and time.time() < deadline, "the two jobs never both started training"
        time.sleep(0.5)
    jobs = [json.loads(r.read_text()) for r in records]
    assert jobs[0]["pid"] != jobs[1]["pid"] != proc.pid  # two workers, side by side
    proc.kill()
    proc.wait()
    deadline = time.time() + 60
    while not all(_gone(j["pid"]) for j in jobs):
        assert time.time() < deadline, "a worker of the killed compare is still running"
        time.sleep(0.5)
    runs = [job_run_dir(tmp_path / "sw", j) for j in jobs]
    assert [json.loads((r / "run.json").read_text())["status"] for r in runs] == ["interrupted"] * 2
    again = gspo.subprocess(*args, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("(resuming: it was interrupted)") == 2
    assert [json.loads((r / "run.json").read_text())["status"] for r in runs] == ["finished"] * 2
