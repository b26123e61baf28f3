"""Seeds added until the answer is known: a group-sequential design with Lan-DeMets alpha spending.

Looking at a comparison after every round of seeds and stopping at the first interval that excludes zero
inflates the false-positive rate far above 5% (Armitage, McPherson & Rowe 1969). A group-sequential design
keeps it at alpha by spending alpha over the looks (Lan & DeMets, "Discrete sequential boundaries for clinical
trials", Biometrika 1983): at information fraction t = n / n_max (n pairs of seeds of n_max at most) the total
false-positive probability spent so far is alpha(t), with
- O'Brien-Fleming-type spending (the default): alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)): almost nothing
  early, nearly the whole alpha at the last look, so the final test is hardly penalised;
- Pocock-type spending: alpha(t) = alpha ln(1 + (e - 1) t): more early, a stricter last look.
The critical value c_k of look k solves P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) -
alpha(t_{k-1}) for the standardised statistics Z_k of a Brownian motion observed at t_1 < t_2 < ... (corr(Z_j,
Z_k) = sqrt(t_j / t_k)); computed by recursive numerical integration of the continuation density (Armitage,
McPherson & Rowe 1969; Jennison & Turnbull, "Group Sequential Methods", 2000, ch. 19). The looks may fall
anywhere (a round cut short), since only the spent alpha is fixed. The last look (n_max reached, or no
further round will start) spends what is left.

Few seeds: the variance is estimated, and the t statistics of the looks are not the z's (their joint tails are
heavier): keeping each z look's nominal level with the t quantile of its degrees of freedom (Jennison &
Turnbull 2000, sec. 11.2) spends about 0.053 instead of 0.05 at 3 -> 6 -> 9 seeds. The looks' levels come from
`t_levels` instead: the t process at the planned seeds simulated with a fixed seed, each look's critical
value spending exactly its share of alpha. The repeated confidence interval of look k, mean +- t_{1 - pi_k / 2, df} se, covers the true
difference at every look at once with probability about 1 - alpha (Jennison & Turnbull 1989), so a verdict
read from it stays valid however many rounds ran. With m comparisons of the primary metric each gets alpha / m
(Bonferroni: a sequential Holm has no simple form). A round stops a comparison when its repeated interval
excludes zero (resolved) or lies within +-effect (equivalent: a futility stop, which can only lower the
false-positive rate). The A/A check (tests/report/test_aa.py, docs/verdicts.md) measures the rate under
repeated looks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from gspo.report.stats import LEVEL, Interval, excludes_zero, sign_flip_floor
from gspo.vocab.choices import Spending

GRID = 801  # points of the continuation region in the numerical integration


def spent(t: float, alpha: float = 1 - LEVEL, kind: str = Spending.OBRIEN_FLEMING) -> float:
    """alpha(t): the false-positive probability spent by information fraction t (0 <= t <= 1)."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if kind == Spending.POCOCK:
        return alpha * math.log(1 + (math.e - 1) * t)
    return float(2 - 2 * sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


def _exit(mass: np.ndarray, grid: np.ndarray, step: float, bound: float) -> float:
    """P(|S_k| >= bound, still running at look k - 1): the continuation mass at `grid` moved by N(0, step^2)."""
    return float((mass * (sps.norm.cdf((-bound - grid) / step) + sps.norm.sf((bound - grid) / step))).sum())


def _bound(mass: np.ndarray, grid: np.ndarray, step: float, budget: float, top: float) -> float:
    """The score bound b whose exit probability is `budget` (inf: nothing to spend)."""
    if budget <= 0:
        return math.inf
    if _exit(mass, grid, step, 1e-9) <= budget:
        return 1e-9
    return float(optimize.brentq(lambda b: _exit(mass, grid, step, b) - budget, 1e-9, top, xtol=1e-10))


def _trapezoid(grid: np.ndarray) -> np.ndarray:
    weights = np.full(len(grid), grid[1] - grid[0])
    weights[[0, -1]] /= 2
    return weights


def boundaries(fractions: list[float], alpha: float = 1 - LEVEL, kind: str = Spending.OBRIEN_FLEMING,
               final: bool = False) -> list[float]:
    """Two-sided critical values c_k (z scale) of looks at increasing information `fractions`; `final`: the
    last look spends all that is left of alpha (inf where a look has nothing to spend)."""
    out: list[float] = []
    grid = dens = None  # the continuation density of the score S_k (Var S_k = t_k) on a grid
    done = 0.0
    for k, t in enumerate(fractions):
        budget = (alpha if final and k == len(fractions) - 1 else spent(t, alpha, kind)) - done
        if k == 0:
            b = float(sps.norm.ppf(1 - budget / 2)) * math.sqrt(t) if budget > 0 else math.inf
        else:
            step = math.sqrt(t - fractions[k - 1])
            mass = dens * _trapezoid(grid)  # [GRID]
            b = _bound(mass, grid, step, budget, 40 * math.sqrt(t))
        edge = b if math.isfinite(b) else 12 * math.sqrt(t)
        new = np.linspace(-edge, edge, GRID)
        if k == 0:
            dens = sps.norm.pdf(new, scale=math.sqrt(t))
        else:  # f_k(s) = sum_u f_{k-1}(u) w_u phi((s - u) / step) / step over the continuation region
            dens = (mass[None, :] * sps.norm.pdf((new[:, None] - grid[None, :]) / step) / step).sum(axis=1)
        grid = new
        out.append(b / math.sqrt(t))
        done += max(budget, 0.0)
    return out


T_PATHS = 400_000  # simulated paths of the t process per planning call (MC error of the total alpha ~ 0.0004)
T_MIN_EXITS = 25  # a look whose budget is fewer paths than this takes its marginal t quantile (conservative)
T_SEED = 45  # the planner's fixed random seed: the same looks always get the same levels


def t_levels(seeds: list[int], max_seeds: int, alpha: float = 1 - LEVEL, kind: str = Spending.OBRIEN_FLEMING,
             final: bool = False, paths: int = T_PATHS) -> list[float]:
    """Each look's nominal two-sided level pi_k for the one-sample t statistics of n_1 < n_2 < ... paired
    differences (`seeds`, cumulative per arm; df n_k - 1), calibrated to the t process itself: the crossing
    probability of look k, still running, is alpha(t_k) - alpha(t_{k-1}) at t_k = n_k / max_seeds. The z-scale
    boundaries with each look's t quantile (`boundaries`, Jennison & Turnbull sec. 11.2) let the t's heavier
    joint tails through (0.053 at 3 -> 6 -> 9 measured in issue 45); here the statistics are simulated at the
    planned seeds from normal differences (the t process does not depend on the sd), `paths` of them with a
    fixed seed, and look k's critical value is the order statistic of the surviving paths' |T_k| that spends
    the budget exactly. The first look is exact (T_1 is t on n_1 - 1 df); a later budget smaller than
    T_MIN_EXITS paths takes its marginal t quantile, which can only spend less. A look whose level is below the
    sign-flip floor 2 / 2^n (decide's exact gate: 0.25 at 3 seeds) can claim nothing: it spends nothing and
    its budget carries to the next look. About 1 s for 4 looks on a loaded 2-core machine."""
    rng = np.random.default_rng(T_SEED)
    top = max(seeds)
    x = rng.standard_normal((paths, top), dtype=np.float32)  # [paths, n_K] per-pair differences
    s, q = np.cumsum(x, axis=1, dtype=np.float64), np.cumsum(np.square(x, dtype=np.float64), axis=1)
    alive = np.ones(paths, dtype=bool)
    out, done = [], 0.0
    for k, n in enumerate(seeds):
        target = alpha if final and k == len(seeds) - 1 else spent(n / max_seeds, alpha, kind)
        budget, df = max(target - done, 0.0), n - 1
        if budget <= 0:
            out.append(0.0)
            continue
        tk = np.abs(s[:, n - 1] / n) / np.sqrt(np.maximum(q[:, n - 1] - s[:, n - 1] ** 2 / n, 0) / df / n)
        exits = int(round(budget * paths))
        if k == 0 or exits < T_MIN_EXITS or exits >= alive.sum():
            c = float(sps.t.isf(budget / 2, df))
        else:
            c = float(np.partition(tk[alive], -exits)[-exits])
        level = float(2 * sps.t.sf(c, df))
        if sign_flip_floor(n) > level * (1 + 1e-9):
            out.append(0.0)  # no sign pattern of n seeds reaches it (decide's exact gate): the budget carries on
            continue
        alive &= tk < c
        out.append(level)
        done += budget
    return out


def nominal(c: float) -> float:
    """The two-sided nominal level of critical value c (z scale)."""
    return float(2 * sps.norm.sf(c)) if math.isfinite(c) else 0.0


def repeated_interval(ci: Interval, level: float) -> Interval:
    """The repeated confidence interval of a look: the estimate's t interval at two-sided nominal `level`
    (1 - pi_k); a point with no width when no alpha was spent at this look (pi_k = 0: nothing can be claimed)."""
    if level <= 0:
        return Interval(ci.mean, -math.inf, math.inf, ci.n, ci.how, ci.se, ci.df)
    return ci.at(1 - level)


@dataclass(frozen=True)
class Decision:
    interval: Interval  # the repeated confidence interval
    resolved: bool
    equivalent: bool  # within +-effect

    @property
    def settled(self) -> bool:
        return self.resolved or self.equivalent


def decide(ci: Interval, level: float, effect: float, flip_p: float = math.nan) -> Decision:
    """One comparison at one look: resolved when its repeated interval excludes zero and (paired: `flip_p`, the
    exact sign-flip p of its per-seed differences) the sign-flip p is within the look's level too; equivalent
    when it lies within +-effect. The sign-flip gate is exact whatever the differences' shape: without it a
    collapse-like A/A (each run collapsing with probability 1/2, so d is -0.6, 0 or +0.6) passes the t's
    boundaries 8% of the time at 3 -> 6 -> 9 seeds (issue 45)."""
    rci = repeated_interval(ci, level)
    gate = math.isnan(flip_p) or flip_p <= level * (1 + 1e-9)
    resolved = ci.tested and excludes_zero(rci) and gate  # seeds that tied (se 0) are no test: the rounds go on
    equivalent = ci.tested and not resolved and math.isfinite(rci.low) and -effect < rci.low and rci.high < effect
    return Decision(rci, resolved, equivalent)
