"""Held-out accuracy per problem: what each run's evals.jsonl records, the two-level paired bootstrap, and the
split of the accuracy's variance into eval sampling and training seed.

A training run's held-out eval writes, with its accuracy, how many of the k samples of each problem were
right (`correct`, in the order of the task's eval items) and a fingerprint of the problems (trainer/
evaluate.py). From these:
- the eval-sampling variance of one run's accuracy, the model held fixed: acc = 1/n sum_j c_j / k, so
  Var = 1/n^2 sum_j p_j (1 - p_j) / k, with p_j(1 - p_j) estimated without bias by c_j (k - c_j) / (k (k - 1))
  from k >= 2 samples; from one sample (k = 1) only its upper bound p (1 - p) / n is known (sum_j p_j (1 - p_j)
  <= n p (1 - p) for the mean p), so the split says "at most";
- the split (`decompose`): the variance of the final accuracy across seeds of one arm is eval sampling plus
  training seed (a one-way random-effects model, method of moments): seed = total - mean eval part, at 0
  when negative;
- a two-level paired bootstrap (`paired_bootstrap`): seeds resampled, then problems resampled within each
  seed (Davison & Hinkley 1997, sec. 3.8; as rliable stratifies), the difference of the arms' accuracy on the
  same problems in each draw. Its interval generalises over new eval problems as well as new seeds; with few
  seeds a bootstrap over seeds under-covers (three seeds have ten distinct resamples), which the A/A check in
  tests/report/test_aa.py measures and docs/verdicts.md reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

import gspo.vocab.metrics as M
from gspo.report.runs import Run
from gspo.trainer.run.rundir import read_jsonl_lines

BOOTSTRAP = 4000  # draws of the two-level bootstrap
TASK_STATS = {M.EVAL_ACCURACY: False, M.EVAL_ACCURACY_GREEDY: True}  # stat -> greedy


@dataclass(frozen=True)
class Outcomes:
    """One eval of one run: per problem, the samples right out of k."""
    step: int
    k: int
    correct: np.ndarray  # [n problems] int
    problems: str  # fingerprint of the problem set (equal sets, equal fingerprints)

    @property
    def accuracy(self) -> float:
        return float(self.correct.sum() / (self.k * len(self.correct)))

    @property
    def sampling_var(self) -> float:
        """Eval-sampling variance of the accuracy, the model held fixed (k = 1: its upper bound)."""
        n, k, c = len(self.correct), self.k, self.correct
        if k >= 2:
            return float((c * (k - c)).sum() / (k * (k - 1)) / k / n**2)
        p = self.accuracy
        return p * (1 - p) / n

    @property
    def per_problem(self) -> np.ndarray:
        return self.correct / self.k


@lru_cache(maxsize=512)
def _eval_rows(path: Path, mtime: float) -> tuple[dict, ...]:
    rows, _ = read_jsonl_lines(path)
    return tuple(r for r in rows if isinstance(r, dict) and isinstance(r.get("correct"), list))


def final_outcomes(run: Run, metric: str) -> Outcomes | None:
    """The per-problem outcomes behind `metric`'s final value in `run` (eval/<task>/accuracy or
    accuracy_greedy of the run's own task); None when they were not recorded (an older run) or do not match."""
    parts = metric.split("/")
    if len(parts) != 3 or parts[0] != "eval" or parts[2] not in TASK_STATS or metric not in run.metrics:
        return None
    logged = run.metrics.dropna(subset=[metric, "step"])  # a damaged row's step is missing: not the final's
    if logged.empty:
        return None
    step = int(logged["step"].iloc[-1])
    path = run.path / "evals.jsonl"
    if not path.is_file():
        return None
    greedy = TASK_STATS[parts[2]]
    rows = [r for r in _eval_rows(path, path.stat().st_mtime) if r.get("benchmark") == parts[1]
            and r.get("step") == step and r.get("source") == "train" and (r.get("temperature") == 0) == greedy]
    if not rows:
        return None
    row = rows[-1]  # a resumed run may have evaluated a step twice: the last is the one its metrics hold
    out = Outcomes(step, int(row.get("k") or 1), np.asarray(row["correct"], dtype=int), str(row.get("problems")))
    return out if math.isclose(out.accuracy, float(logged[metric].iloc[-1]), abs_tol=1e-9) else None


@dataclass(frozen=True)
class Split:
    """The variance of one arm's final held-out accuracy across seeds, split in two."""
    total: float  # sample variance across seeds
    eval: float  # mean eval-sampling variance of one run's accuracy
    seed: float  # total - eval, at 0 when negative
    k: int
    n_problems: int
    n_seeds: int
    bound: bool  # eval is an upper bound (k = 1)

    @property
    def eval_share(self) -> float:
        return min(1.0, self.eval / self.total) if self.total > 0 else math.nan


def decompose(outcomes: list[Outcomes]) -> Split | None:
    """The split from the runs of one arm (their final evals); None below 2 runs."""
    if len(outcomes) < 2:
        return None
    acc = np.array([o.accuracy for o in outcomes])
    total = float(acc.var(ddof=1))
    ev = float(np.mean([o.sampling_var for o in outcomes]))
    return Split(total, ev, max(0.0, total - ev), outcomes[0].k, len(outcomes[0].correct), len(outcomes),
                 outcomes[0].k < 2)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, draws: int = BOOTSTRAP, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float, float]:
    """(mean difference, low, high): percentile interval of mean(a - b) over a two-level bootstrap of per-problem
    outcomes a, b [seeds, problems] (the same problems, paired by seed): draw seeds with replacement, then,
    within each drawn seed, problems with replacement."""
    d = np.asarray(a, float) - np.asarray(b, float)  # [S, P]
    s, p = d.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, s, size=(draws, s))  # [B, S]
    problems = rng.integers(0, p, size=(draws, s, p))  # [B, S, P]
    stats = d[seeds[:, :, None], problems].mean(axis=(1, 2))  # [B]
    tail = (1 - level) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    return float(d.mean()), float(low), float(high)
