"""Held-out accuracy per problem: what each run's evals.jsonl records, the split of the accuracy's variance
into eval sampling and training seed (per arm and per paired difference), and intervals over new problems.

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
- the same split of a paired difference (`paired_split`), whose eval part is the arms' shared draws' own where
  the runs recorded each sample's reward (`outcomes`): sample j of problem i draws from the same random numbers
  in both arms (common random numbers), which cancel part of the difference's eval noise;
- a crossed-design interval of a paired difference (`crossed_interval`): seeds and problems as crossed random
  effects, so it covers new problems as well as new seeds (the paired t covers new seeds on these problems);
- a two-level paired bootstrap (`paired_bootstrap`): seeds resampled, then problems resampled within each
  seed (Davison & Hinkley 1997, sec. 3.8; as rliable stratifies). It treats problems as nested in seeds where
  they are crossed, and covered new problems 0.82-0.88 of the time on the real runs (issue 45), so the page
  gives the crossed interval; perf/aa_check.py keeps measuring the bootstrap's A/A rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.stats as sps

import gspo.vocab.metrics as M
from gspo.report.runs import Run
from gspo.report.stats import Interval, clip_to, paired_ci
from gspo.trainer.run.rundir import read_jsonl_lines

BOOTSTRAP = 4000  # draws of the two-level bootstrap
TASK_STATS = {M.EVAL_ACCURACY: False, M.EVAL_ACCURACY_GREEDY: True}  # stat -> greedy


@dataclass(frozen=True)
class Outcomes:
    """One eval of one run: per problem, the samples right out of k; and each sample's reward where the run
    recorded it (evals.jsonl `outcomes`; sample j of problem i drawn from the eval seed + i k + j, so two runs of
    one seed and step share sample (i, j)'s random numbers)."""
    step: int
    k: int
    correct: np.ndarray  # [n problems] int
    problems: str  # fingerprint of the problem set (equal sets, equal fingerprints)
    samples: np.ndarray | None = None  # [n problems, k] float, each sample's reward; None: not recorded

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
def read_eval_rows(path: Path, mtime: float) -> tuple[dict, ...]:
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
    rows = [r for r in read_eval_rows(path, path.stat().st_mtime) if r.get("benchmark") == parts[1]
            and r.get("step") == step and r.get("source") == "train" and (r.get("temperature") == 0) == greedy]
    if not rows:
        return None
    row = rows[-1]  # a resumed run may have evaluated a step twice: the last is the one its metrics hold
    k, correct = int(row.get("k") or 1), np.asarray(row["correct"], dtype=int)
    out = Outcomes(step, k, correct, str(row.get("problems")), _samples(row.get("outcomes"), correct, k))
    return out if math.isclose(out.accuracy, float(logged[metric].iloc[-1]), abs_tol=1e-9) else None


def _samples(recorded, correct: np.ndarray, k: int) -> np.ndarray | None:
    """The row's per-sample rewards [n, k] when they are there and agree with its per-problem counts."""
    try:
        samples = np.asarray(recorded, dtype=float)
    except (TypeError, ValueError):  # ragged or not numbers (absent, in an older run: a 0-d NaN, below)
        return None
    if samples.shape != (len(correct), k) or not np.isfinite(samples).all():
        return None
    return samples if (np.rint(samples.sum(axis=1)) == correct).all() else None


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


def difference_eval_var(a: Outcomes, b: Outcomes) -> float:
    """Eval-sampling variance of one seed's difference of accuracies acc_a - acc_b, both models held fixed, when
    the two evals drew sample (i, j) from the same random numbers: 1/n^2 sum_i s_i^2 / k, s_i^2 the variance over
    j of the per-sample differences a_ij - b_ij (ddof 1: unbiased, as the pairs are independent across j). NaN
    without both runs' per-sample rewards at one k >= 2 on the same problems."""
    if a.samples is None or b.samples is None or a.samples.shape != b.samples.shape or a.k < 2 or a.problems != b.problems:
        return math.nan
    n, k = a.samples.shape
    return float((a.samples - b.samples).var(axis=1, ddof=1).sum() / k / n**2)


@dataclass(frozen=True)
class PairedSplit:
    """The variance across seeds of one paired difference of final held-out accuracy (d_s = acc_a - acc_b of
    seed s), split into the eval's sampling and training seed, as `Split` is for one arm."""
    total: float  # sample variance of d_s across seeds
    eval: float  # mean eval-sampling variance of d_s: the shared draws' where recorded, else `independent`
    independent: float  # what it would be had the arms drawn independently: the mean of Var(acc_a) + Var(acc_b)
    seed: float  # total - eval, at 0 when negative
    k: int
    n_problems: int
    n_seeds: int
    shared: bool  # `eval` is the shared draws' (per-sample rewards recorded), not `independent`
    bound: bool  # `eval` is an upper bound (k = 1 and no shared draws)

    @property
    def eval_share(self) -> float:
        return min(1.0, self.eval / self.total) if self.total > 0 else math.nan

    def half_width(self, eval_factor: float, level: float = 0.95) -> float:
        """The paired t interval's expected half-width were the eval's sampling variance eval_factor times what
        it was (0: an exact eval, k -> infinity; 1/4: four times k): t(n - 1) sqrt((seed + eval_factor eval) / n)."""
        var = self.seed + eval_factor * self.eval
        return float(sps.t.ppf(0.5 + level / 2, self.n_seeds - 1) * math.sqrt(var / self.n_seeds))


def paired_split(pairs: list[tuple[Outcomes, Outcomes]]) -> PairedSplit | None:
    """The split of d_s's variance from the (arm, baseline) final evals of each seed; None below 2 seeds or when
    the pairs' k or problems differ."""
    if len(pairs) < 2 or len({(a.k, b.k, len(a.correct), len(b.correct)) for a, b in pairs}) != 1:
        return None
    d = np.array([a.accuracy - b.accuracy for a, b in pairs])
    total = float(d.var(ddof=1))
    independent = float(np.mean([a.sampling_var + b.sampling_var for a, b in pairs]))
    shared = [difference_eval_var(a, b) for a, b in pairs]
    recorded = not any(math.isnan(v) for v in shared)
    ev = float(np.mean(shared)) if recorded else independent
    k = pairs[0][0].k
    return PairedSplit(total, ev, independent, max(0.0, total - ev), k, len(pairs[0][0].correct), len(pairs),
                       recorded, k < 2 and not recorded)


def crossed_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> Interval | None:
    """mean(a - b) with an interval over new seeds and new problems: a, b [S seeds, P problems] per-problem
    accuracies of the same problems, paired by seed (seeds and problems crossed, every seed evaluating every
    problem). The differences d_sp = mu + seed_s + problem_p + e_sp, each effect random (two-way random effects
    without replication; Searle, Casella & McCulloch 1992, ch. 4), with the mean squares
        MS_S = P sum_s (d_s. - d..)^2 / (S - 1),  MS_P = S sum_p (d_.p - d..)^2 / (P - 1),
        MS_E = sum (d_sp - d_s. - d_.p + d..)^2 / ((S - 1)(P - 1)),
    Var(d..) = s2_seed / S + s2_problem / P + s2_e / (S P) = (MS_S + MS_P - MS_E) / (S P): the paired t's variance
    over seeds, MS_S / (S P) (which holds s2_seed / S + s2_e / (S P)), plus the problem component (MS_P - MS_E) /
    (S P) that a new problem set draws anew (the arm x problem effect), at 0 when MS_P <= MS_E (then the interval
    is the paired t's). t at Satterthwaite's degrees of freedom for that combination of mean squares. None below
    2 seeds or 2 problems."""
    d = np.asarray(a, float) - np.asarray(b, float)  # [S, P]
    s, p = d.shape
    if s < 2 or p < 2:
        return None
    mean, by_seed, by_problem = float(d.mean()), d.mean(axis=1), d.mean(axis=0)
    ms = np.array([p * ((by_seed - mean) ** 2).sum() / (s - 1), s * ((by_problem - mean) ** 2).sum() / (p - 1),
                   ((d - by_seed[:, None] - by_problem[None, :] + mean) ** 2).sum() / ((s - 1) * (p - 1))])
    dfs = np.array([s - 1, p - 1, (s - 1) * (p - 1)])
    problem = float(ms[1] > ms[2])
    coef = np.array([1.0, problem, -problem])
    combo = float(coef @ ms)
    if combo <= 1e-24:
        return Interval(mean, mean, mean, s, se=0.0, df=float(dfs[0]))  # the seeds tied, no problem effect: no test
    df = combo**2 / float(((coef * ms) ** 2 / dfs).sum())
    se = math.sqrt(combo / (s * p))
    half = float(sps.t.ppf(0.5 + level / 2, df)) * se
    return clip_to(Interval(mean, mean - half, mean + half, s, se=se, df=df), (-1.0, 1.0))


def new_problems_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[Interval, str] | None:
    """The interval a page gives for new problems: the crossed interval, or the paired t over seeds where that is
    wider ("crossed" or "paired t"). The crossed one's variance is never below the paired t's, but its
    Satterthwaite df can exceed the seeds' S - 1 and make it narrower: a claim about new problems narrower than
    the one about these problems would say more about what was not measured."""
    crossed = crossed_interval(a, b, level)
    if crossed is None:
        return None
    paired = paired_ci(list(np.asarray(a, float).mean(axis=1)), list(np.asarray(b, float).mean(axis=1)))
    if paired.tested and (not crossed.tested or paired.at(level).high - paired.at(level).low > crossed.high - crossed.low):
        return clip_to(paired.at(level), (-1.0, 1.0)), "paired t"
    return crossed, "crossed"


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
