"""The Slurm watch's pieces that need no cluster (study/slurm.py, study/launch.py): the torch threads a Slurm task
takes, the words a killed job's log gives, a job's label, and submitit's sacct warning said once. The cluster
itself is tests/study/test_slurm.py's."""

from __future__ import annotations

import logging

from gspo.study.launch import slurm_threads
from gspo.study.slurm import _OneSacctWarning, ended_without_result, job_words


def test_a_slurm_task_takes_the_cpus_slurm_gave_it():
    assert slurm_threads({"SUBMITIT_EXECUTOR": "slurm", "SLURM_CPUS_PER_TASK": "3"}) == 3
    assert slurm_threads({"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_CPUS_PER_NODE": "8(x2)",
                          "SLURM_NTASKS_PER_NODE": "4"}) == 2
    assert slurm_threads({"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_CPUS_PER_NODE": "1",
                          "SLURM_TASKS_PER_NODE": "2"}) == 1  # never 0
    assert slurm_threads({"SLURM_CPUS_PER_TASK": "3"}) is None  # not a submitit job: the launcher's own policy
    assert slurm_threads({"SUBMITIT_EXECUTOR": "slurm"}) is None  # Slurm said nothing: torch's default


def test_a_killed_jobs_log_says_what_killed_it(tmp_path):
    log = tmp_path / "log.err"
    log.write_text("step 0: ...\nslurmstepd-vm: error: StepId=4.0 exceeded memory limit (328396800 > 209715200), "
                   "being killed\n")
    assert ended_without_result("FAILED", log) == "killed by Slurm's memory limit (Slurm state FAILED)"
    log.write_text("slurmstepd: error: *** JOB 7 ON vm CANCELLED AT 2026-12-07T14:11:21 DUE TO TIME LIMIT ***\n")
    assert ended_without_result("TIMEOUT", log) == "killed at its time limit (Slurm state TIMEOUT)"
    log.write_text("slurmstepd: error: *** JOB 7 ON vm CANCELLED AT 2026-12-07T14:11:21 ***\n")
    assert ended_without_result("CANCELLED", log) == "cancelled (Slurm state CANCELLED)"
    assert ended_without_result("", tmp_path / "none") == "ended without a result (no longer listed by Slurm)"


def test_a_jobs_traceback_is_not_relayed_but_its_next_start_is(tmp_path):
    from gspo.study.slurm import Watched

    class Job:
        job_id = "7"

        class paths:
            folder = tmp_path
            stderr = tmp_path / "7_0_log.err"

    log = tmp_path / "7_0_log.err"
    log.write_text("sweep job 1/1: algo=gspo -> run\nstep 5: eval 0.1\nTraceback (most recent call last):\n"
                   '  File "x.py", line 1, in <module>\nKeyboardInterrupt: signal 15\n')
    w = Watched(Job(), 0, "algo=gspo", 1)
    assert w.new_lines() == ["sweep job 1/1: algo=gspo -> run", "step 5: eval 0.1"]
    with open(log, "a") as f:
        f.write("sweep job 1/1: algo=gspo -> run (resuming: it was interrupted)\nstep 6: eval 0.2\npartial")
    assert w.new_lines() == ["sweep job 1/1: algo=gspo -> run (resuming: it was interrupted)", "step 6: eval 0.2"]
    log.write_text("sweep job 1/1: begun anew\n")  # a log rewritten from its start
    assert w.new_lines() == ["sweep job 1/1: begun anew"]


def test_a_job_is_named_by_what_differs_between_the_jobs():
    jobs = [["a=1", "algo=grpo", "seed=0"], ["a=1", "algo=gspo", "seed=0"], ["a=1", "algo=gspo", "seed=1"]]
    assert job_words(jobs[1], jobs) == "algo=gspo seed=0"
    assert job_words(["a=1"], [["a=1"]]) == "a=1"
    assert job_words(["a=1", "algo=gspo", "seed=3"], [["a=1", "algo=gspo", "seed=3"]], ("algo", "seed")) == "algo=gspo seed=3"


def test_submitits_sacct_warning_is_said_once():
    f = _OneSacctWarning()
    records = [logging.LogRecord("submitit", logging.WARNING, "", 0, "Call #%d - Bypassing sacct error", (i,), None)
               for i in range(3)]
    passed = [r for r in records if f.filter(r)]
    assert len(passed) == 1 and "accounting off" in passed[0].getMessage()
    other = logging.LogRecord("submitit", logging.WARNING, "", 0, "something else", (), None)
    assert f.filter(other)
