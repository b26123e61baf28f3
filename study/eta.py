"""What a sweep says of its progress: `sweep job i/N` with an ETA from the jobs that finished (their wall time, evals
included), and before any has, an early ETA from job 1's first steps and its step-0 eval (said once, by a watcher
thread). Each ETA says its basis; jobs a resumed sweep skips (finished already) are not counted as left."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

import yaml

from gspo.trainer.run.progress import clock
from gspo.trainer.run.rundir import read_jsonl_lines
from gspo.trainer.run.sweepdir import sweep_job, sweep_jobs
from gspo.vocab.metrics import TIME_PHASE, TIME_STEP

EVAL_S = TIME_PHASE.format("eval")


def job_progress(sweep_dir: Path, num: int, jobs: list | None, at_once: int = 1) -> str:
    """`job i/N` and an ETA for the jobs left (this one and the later ones not finished already: a resumed sweep
    skips those) from the mean wall time of the sweep's jobs that finished so far (training and evals), `at_once`
    of them running side by side; with no plan (a search sweeper) `job i`."""
    total = len(jobs) if jobs else None
    head = f"sweep job {num + 1}/{total}" if total else f"sweep job {num + 1}"
    spans = [j["ended"] - j["started"] for j in sweep_jobs(sweep_dir)
             if j.get("outcome") == "finished" and j.get("ended") and j.get("started")]
    if not total:
        return head
    if not spans:
        return f"{head}, ETA once the job has logged 2 steps"
    per_job = sum(spans) / len(spans)
    left = sum(1 for i in range(num, total) if (sweep_job(sweep_dir, i) or {}).get("outcome") != "finished")
    if left == 0:
        return head
    waves = math.ceil(left / at_once)
    return f"{head}, ETA {clock(per_job * waves)} for the {left} left ({clock(per_job)} per job, evals included, " \
        f"over {len(spans)} done" + (f", {at_once} at once)" if at_once > 1 else ")")


def _evals(run_dir: Path, steps: int) -> tuple[int, float]:
    """(intermediate held-out evals per job, the final eval's cost relative to one of them) from the run's config:
    step 0 and every train.eval_every steps before the last, then the final one at train.final_eval_k samples per
    problem where the others draw train.eval_k (plus one greedy sample each: train.eval_greedy)."""
    try:
        train = (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("train", {})
    except (OSError, yaml.YAMLError):
        train = {}
    every, k, final_k = train.get("eval_every", 0), train.get("eval_k", 1), train.get("final_eval_k", 1)
    greedy = 1 if train.get("eval_greedy", True) else 0
    middle = 1 + ((steps - 1) // every if every and steps > 1 else 0)
    return middle, (final_k + greedy) / (k + greedy)


def early_eta(run_dir: Path, steps: int, jobs: int, at_once: int = 1) -> str | None:
    """Before the sweep's first job ends: an ETA for all `jobs`, `at_once` of them side by side, from the steps
    job 1 has logged so far (its time/step_s) and its step-0 held-out eval (time/eval_s: each job's intermediate
    evals at that cost, its final one scaled by its samples per problem), or None below 2 steps. Cold starts and
    a changing load are not in it: it says its basis."""
    rows, _ = read_jsonl_lines(run_dir / "metrics.jsonl")
    times = [float(r[TIME_STEP]) for r in rows if r.get("step", 0) >= 1 and r.get(TIME_STEP) is not None]
    if len(times) < 2:
        return None
    per_step = sum(times) / len(times)
    first_eval = next((float(r[EVAL_S]) for r in rows if r.get("step") == 0 and r.get(EVAL_S) is not None), None)
    middle, final = _evals(run_dir, steps)
    evals = 0.0 if first_eval is None else first_eval * (middle + final)
    waves = math.ceil(jobs / at_once)  # job 1 is in the first
    left = per_step * (max(steps - len(times), 0) + steps * (waves - 1)) + evals * waves - (first_eval or 0.0)
    basis = ("held-out evals not counted: job 1 logged no eval time" if first_eval is None else
             f"{middle} held-out eval(s) per job at step 0's {first_eval:.2g} s and the final one at {final:.3g}x that")
    return (f"sweep ETA about {clock(left)} for the {jobs} jobs (job 1's first {len(times)} steps at {per_step:.2g} "
            f"s/step; {basis}; cold starts and a changing load not counted; a firmer ETA once job 1 ends)")


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
