"""What a sweep says of its progress: `sweep job i/N` with an ETA from the jobs that finished, and before any has,
an early ETA from job 1's first steps (said once, by a watcher thread)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

from gspo.trainer.run.rundir import read_jsonl_lines
from gspo.trainer.run.sweepdir import sweep_jobs
from gspo.vocab.metrics import TIME_STEP


def job_progress(sweep_dir: Path, num: int, jobs: list | None, at_once: int = 1) -> str:
    """`job i/N` and an ETA for the jobs left (this one included) from the mean wall time of the sweep's jobs
    that finished so far, `at_once` of them running side by side; with no plan (a search sweeper) `job i`."""
    total = len(jobs) if jobs else None
    head = f"sweep job {num + 1}/{total}" if total else f"sweep job {num + 1}"
    spans = [j["ended"] - j["started"] for j in sweep_jobs(sweep_dir)
             if j.get("outcome") == "finished" and j.get("ended") and j.get("started")]
    if not total:
        return head
    if not spans:
        return f"{head}, ETA once the job has logged 2 steps"
    per_job = sum(spans) / len(spans)
    left = total - num
    waves = math.ceil(left / at_once)
    return f"{head}, ETA {clock(per_job * waves)} for the {left} left ({clock(per_job)} per job over {len(spans)} done" \
        + (f", {at_once} at once)" if at_once > 1 else ")")


def early_eta(run_dir: Path, steps: int, jobs: int, at_once: int = 1) -> str | None:
    """Before the sweep's first job ends: an ETA for all `jobs`, `at_once` of them side by side, from the steps
    job 1 has logged so far (its time/step_s), or None below 2 steps. Evals, cold starts and a changing load are
    not in it: it says so."""
    rows, _ = read_jsonl_lines(run_dir / "metrics.jsonl")
    times = [float(r[TIME_STEP]) for r in rows if r.get("step", 0) >= 1 and r.get(TIME_STEP) is not None]
    if len(times) < 2:
        return None
    per_step = sum(times) / len(times)
    waves = math.ceil(jobs / at_once)  # job 1 is in the first
    left = per_step * (max(steps - len(times), 0) + steps * (waves - 1))
    return (f"sweep ETA about {clock(left)} for the {jobs} jobs (job 1's first {len(times)} steps at {per_step:.2g} "
            "s/step; held-out evals and cold starts not counted; a firmer ETA once job 1 ends)")


class EarlyEta(threading.Thread):
    """Says `early_eta` once, as soon as job 1 has logged two steps (polled every few seconds)."""

    def __init__(self, run_dir: Path, steps: int, jobs: int, say: Callable[[str], None], every: float = 5.0,
                 at_once: int = 1):
        super().__init__(daemon=True)
        self.args, self.say, self.every, self.done = (run_dir, steps, jobs, at_once), say, every, threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            line = early_eta(*self.args)
            if line:
                self.say(line)
                return


def watch_first_job(sweep_dir: Path, num: int, jobs: list | None, run_dir: Path, steps: int, at_once: int,
                    say: Callable[[str], None]) -> EarlyEta | None:
    """While no job of a planned sweep of several has finished, job 1's watcher that says `early_eta` (started)."""
    if not jobs or len(jobs) < 2 or num > 0 or any(j.get("outcome") == "finished" for j in sweep_jobs(sweep_dir)):
        return None
    watch = EarlyEta(run_dir, steps, len(jobs), say, at_once=at_once)
    watch.start()
    return watch


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
