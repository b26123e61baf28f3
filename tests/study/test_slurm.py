"""`gspo` on a real Slurm cluster: Debian's munge, slurmctld and slurmd started on this machine for the module
(tests/slurm_cluster.py; no mock of sbatch, squeue or scancel anywhere), jobs submitted through Hydra's submitit
launcher (`hydra/launcher=slurm`, watched by study/slurm.py).

- a compare of 2 arms x 2 seeds through Slurm (as verdict.until=resolved: its parent plans the rounds, each
  round an array) gives every run the final held-out accuracy the same compare gives through the local
  launcher, each job's state and eval lines reach the terminal, and the report says which Slurm job ran each run;
- a job of 2 tasks is one data-parallel run of 2 ranks: the same step as torchrun's 2 processes and as one
  process (tests/ranks.py's tolerance);
- faults: a job cancelled with scancel is one line (its id, what happened, its log), and the same command resumes
  its run to the uninterrupted run's numbers; a job preempted (Slurm's preemption signal for submitit, USR2)
  checkpoints through submitit, is requeued and resumes its run to the same numbers; a job over its memory limit
  is killed by Slurm, said in one line with its id and log, and the other job of the sweep finishes and is kept.

Run as their own line (`python -m pytest -q -m slurm -n 0`, .ci/run): skipped with the reason where Slurm cannot
start (not root, slurm-wlm or munge not installed)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import LEARNING_SEED, TINY, without_timing
from ranks import RTOL, SAME_FORWARDS, assert_rows_match, one_process, torchrun, weights
from slurm_cluster import LocalSlurm, missing

from gspo.trainer.run.rundir import read_jsonl
from gspo.trainer.run.sweepdir import job_run_dir

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ON_SLURM = ["hydra/launcher=slurm", "hydra.launcher.partition=cpu", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.timeout_min=30"]
QUIET = ["logger.progress=false", "train.final_eval_k=2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if why := missing():
        pytest.skip(why)
    slurm = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    slurm.start()
    yield slurm
    slurm.stop()


@pytest.fixture
def on_slurm(gspo, cluster):
    """`gspo <args>` as the console script, with the cluster's SLURM_CONF; Popen for a command to act on
    while it runs."""

    def run(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(["gspo", *args], cwd=cwd, env=gspo.env | cluster.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def start(*args: str, cwd: Path) -> subprocess.Popen:
        return subprocess.Popen(["gspo", *args], cwd=cwd, env=gspo.env | cluster.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    run.start = start
    return run


def _runs(sweep: Path) -> dict[tuple[str, int], list[dict]]:
    """(algo, seed) -> the run's metrics rows (timings left out), for every run the job records under `sweep`
    name (an until's rounds included: each round-<i> is a sweep folder of its own)."""
    out = {}
    for record in sorted(sweep.rglob("runs/*.json")):
        job = json.loads(record.read_text())
        rows = without_timing(read_jsonl(job_run_dir(record.parent.parent, job) / "metrics.jsonl"))
        said = dict(o.split("=", 1) for o in job["overrides"].split())
        out[(said["algo"], int(said["seed"]))] = rows
    return out


def test_a_compare_through_slurm_gives_the_local_compares_runs_and_says_where_they_ran(on_slurm, tmp_path):
    """The same 2 arms x 2 seeds through the local launcher (one plain compare) and through Slurm as
    verdict.until=resolved: the command plans the rounds here and looks after each, and every round's jobs are a
    job array of their own (2 rounds of one seed per arm: the seed budget ends it, as one seed cannot resolve)."""
    common = ["compare", *TINY, "train.steps=2", *QUIET]
    local = on_slurm(*common, "seed=0,1", "hydra.sweep.dir=local", f"output_dir={tmp_path / 'local-runs'}",
                     cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    slurm = on_slurm(*common, "seed=0", "verdict.until=resolved", "verdict.round_seeds=1", "verdict.max_seeds=2",
                     *ON_SLURM, "hydra.sweep.dir=slurm", f"output_dir={tmp_path / 'slurm-runs'}", cwd=tmp_path)
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    record = json.loads((tmp_path / "slurm" / "sequential.json").read_text())
    assert len(record["looks"]) == 2

    # every run trains the same: each step's metrics (the final held-out accuracy among them), timings aside
    local_runs, slurm_runs = _runs(tmp_path / "local"), _runs(tmp_path / "slurm")
    assert sorted(slurm_runs) == [("grpo", 0), ("grpo", 1), ("gspo", 0), ("gspo", 1)]
    assert slurm_runs == local_runs
    assert all("eval/arith/accuracy" in rows[-1] for rows in slurm_runs.values())
    # the terminal: an array a round, each job's state as it changes, and its own eval lines relayed with its id
    assert slurm.stderr.count("slurm: 2 job(s) submitted as array") == 2
    running = [x for x in slurm.stderr.splitlines() if "): RUNNING on " in x]
    assert len(running) == 4 and any("(job 1/2: " in x and "algo=grpo" in x and "seed=0" in x for x in running)
    assert "(torch threads 1)" in slurm.stderr  # the CPU Slurm gave the task (cpus_per_task=1)
    assert "Bypassing sacct" not in slurm.stderr  # accounting is off here: squeue answers, sacct is never polled
    ids = [json.loads(r.read_text())["slurm_job"] for r in sorted((tmp_path / "slurm").rglob("runs/*.json"))]
    assert len(ids) == 4 and all(ids)
    for job_id in ids:
        assert f"slurm job {job_id}: step 2: eval/arith/accuracy" in slurm.stderr
    # the report: which Slurm job ran each run
    report = next((tmp_path / "slurm").rglob("report.md")).read_text()
    assert "slurm job" in report and all(job_id in report for job_id in ids)
    assert "slurm job" not in (tmp_path / "local" / "report" / "report.md").read_text()


def test_a_job_of_two_slurm_tasks_trains_as_torchrun_and_one_process_do(gspo, on_slurm, tmp_path):
    common = ("algo=gspo", f"seed={LEARNING_SEED}", "train.steps=1", *SAME_FORWARDS, "train.micro_batch_size=2")
    result = on_slurm("sweep", *TINY, *common, *ON_SLURM, "hydra.launcher.tasks_per_node=2", "logger.progress=false",
                      "hydra.sweep.dir=sw", f"output_dir={tmp_path / 'slurm'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(2 task(s) each)" in result.stderr
    (record,) = (tmp_path / "sw" / "runs").glob("*.json")
    two_tasks = job_run_dir(tmp_path / "sw", json.loads(record.read_text()))
    assert json.loads((two_tasks / "run.json").read_text())["world_size"] == 2
    one = one_process(gspo, tmp_path, *common)
    ran = torchrun(gspo, 2, *common, f"output_dir={tmp_path}", "run_id=two")
    assert ran.returncode == 0, ran.stderr[-3000:]

    rows = read_jsonl(one / "metrics.jsonl")
    assert rows[1]["optim/grad_norm"] > 0  # the step learns: there is something to compare
    for other in (two_tasks, tmp_path / "two"):
        assert_rows_match(rows, read_jsonl(other / "metrics.jsonl"))
        a, b = weights(one), weights(other)
        for k in a:
            assert (b[k] - a[k]).abs().max() <= RTOL * a[k].abs().max(), k


def _logged_step(sweep: Path, step: int) -> tuple[str, Path] | None:
    """(the Slurm job, the run) once the sweep's one job has logged `step`, else None."""
    record = sweep / "runs" / "0.json"
    if not record.exists():
        return None
    job = json.loads(record.read_text())
    run = job_run_dir(sweep, job)
    metrics = run / "metrics.jsonl"
    if not metrics.exists() or f'"step": {step},' not in metrics.read_text():
        return None
    return job["slurm_job"], run


def _wait_for(what, timeout: float = 600, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while (got := what()) is None:
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)
    return got


def test_cancelled_and_preempted_jobs_resume_to_the_uninterrupted_runs_numbers(on_slurm, cluster, tmp_path):
    """Three sweeps of the same run side by side: one left alone, one cancelled with scancel (then the same
    command again), one preempted (USR2, the signal Slurm's preemption sends submitit: it requeues the job). Each
    run saves every 5 steps."""
    args = ["sweep", *TINY, "algo=gspo", f"seed={LEARNING_SEED}", "train.steps=30", "train.save_every=5",
            "train.eval_every=0", *QUIET, *ON_SLURM]
    command = {name: [*args, f"hydra.sweep.dir={name}", f"output_dir={tmp_path / name / 'out'}"]
               for name in ("alone", "cancelled", "preempted")}
    procs = {name: on_slurm.start(*argv, cwd=tmp_path) for name, argv in command.items()}
    acts = {"cancelled": ("scancel",), "preempted": ("scancel", "--signal=USR2")}
    ids: dict[str, tuple[str, Path]] = {}
    deadline = time.monotonic() + 600
    while len(ids) < len(acts):  # each acted on as soon as its run has logged step 8 (a run of 30 steps takes ~12 s quiet)
        assert time.monotonic() < deadline, f"timed out waiting for step 8 of {set(acts) - set(ids)}"
        for name in set(acts) - set(ids):
            if got := _logged_step(tmp_path / name, 8):
                cluster.run(*acts[name], got[0])
                ids[name] = got
        time.sleep(0.2)
    (cancelled, _), (preempted, preempted_run) = ids["cancelled"], ids["preempted"]
    # Slurm holds a requeued batch job ~2 minutes before it may start again; the test starts it now, as an
    # operator can (scontrol update), once submitit's requeue has put it back in the queue
    _wait_for(lambda: "PENDING" in cluster.run("squeue", "--noheader", "--format=%T", f"--jobs={preempted}").stdout or None)
    cluster.run("scontrol", "update", f"JobId={preempted}", "StartTime=now")
    outs = {name: p.communicate(timeout=900) for name, p in procs.items()}

    assert procs["alone"].returncode == 0, outs["alone"][1][-3000:]
    # scancel: one line with the job's id, what Slurm did and its log; the sweep ends saying how to resume
    err = outs["cancelled"][1]
    assert procs["cancelled"].returncode == 2, err[-3000:]
    line = next(x for x in err.splitlines() if x.startswith(f"slurm job {cancelled} ") and "its log:" in x)
    assert "cancelled" in line and f"/.submitit/{cancelled}/" in line
    assert "Traceback" not in err and "run the same command again to resume" in err.splitlines()[-1]
    again = on_slurm(*command["cancelled"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(resuming: it was interrupted)" in again.stderr
    # USR2 (preemption): requeued by submitit, the same job id runs again and resumes its run
    assert procs["preempted"].returncode == 0, outs["preempted"][1][-3000:]
    assert f"slurm job {preempted}: sweep job 1/1" in outs["preempted"][1].split("RUNNING")[-1]  # it started again
    assert json.loads((preempted_run / "run.json").read_text())["slurm_jobs"] == [preempted]

    alone = _logged_step(tmp_path / "alone", 30)[1]
    for name in ("cancelled", "preempted"):
        run = _logged_step(tmp_path / name, 30)[1]
        assert json.loads((run / "run.json").read_text())["status"] == "finished"
        assert without_timing(read_jsonl(run / "metrics.jsonl")) == without_timing(read_jsonl(alone / "metrics.jsonl"))
        assert without_timing(read_jsonl(run / "evals.jsonl")) == without_timing(read_jsonl(alone / "evals.jsonl"))


def test_a_job_over_its_memory_limit_is_one_line_and_the_other_run_is_kept(on_slurm, tmp_path):
    """1 GB a job (a small run peaks near 0.45 GB here): the arm with a 65,536-wide MLP (50M parameters) holds
    ~0.8 GB more of weights, gradients and AdamW state, and Slurm kills it; the small one finishes."""
    small = [a for a in TINY if not a.startswith(("model.tiny.intermediate_size=", "model.tiny.sft_max_steps=",
                                                  "model.tiny.hidden_size="))]
    result = on_slurm("sweep", *small, "model.tiny.hidden_size=256", "model.tiny.intermediate_size=64,65536",
                      "model.tiny.sft_max_steps=1",
                      "train.steps=1", *QUIET, *ON_SLURM, "hydra.launcher.mem_gb=1", "hydra.sweep.dir=sw",
                      f"output_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    (killed,) = [x for x in result.stderr.splitlines() if "killed by Slurm's memory limit" in x]
    assert killed.startswith("slurm job ") and "(job 2/2: model.tiny.intermediate_size=65536)" in killed
    assert "its log: " in killed and Path(killed.split("its log: ")[1]).is_file()
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: 1 of 2 Slurm job(s) did not finish")
    kept = job_run_dir(tmp_path / "sw", json.loads((tmp_path / "sw" / "runs" / "0.json").read_text()))
    assert json.loads((kept / "run.json").read_text())["status"] == "finished"
