"""Seeds added until the answer is known: a group-sequential design with Lan-DeMets alpha spending.

Looking at a comparison after every round of seeds and stopping at the first interval that excludes zero
inflates the false-positive rate far above 5% (Armitage, McPherson & Rowe 1969). A group-sequential design
keeps it at alpha by spending alpha over the looks (Lan & DeMets, "Discrete sequential boundaries for clinical
trials", Biometrika 1983): at information fraction t = n / n_max (n pairs of seeds of n_max at most) the total
false-positive probability spent so far is alpha(t), with
- O'Brien-Fleming-type spending: alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)): almost nothing
  early, nearly the whole alpha at the last look, so the final test is hardly penalised;
- Pocock-type spending (the default, verdict.spending): alpha(t) = alpha ln(1 + (e - 1) t): more early, a
  stricter last look; with 3-seed rounds its 6-seed look can claim, O'Brien-Fleming's cannot.
The critical value c_k of look k solves P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) -
alpha(t_{k-1}) for the standardised statistics Z_k of a Brownian motion observed at t_1 < t_2 < ... (corr(Z_j,
Z_k) = sqrt(t_j / t_k)); computed by recursive numerical integration of the continuation density (Armitage,
McPherson & Rowe 1969; Jennison & Turnbull, "Group Sequential Methods", 2000, ch. 19). The looks may fall
anywhere (a round cut short), since only the spent alpha is fixed. The last look (n_max reached, or no
further round will start) spends what is left.

Few seeds: the variance is estimated, and the t statistics of the looks are not the z's (their joint tails are
heavier: the z looks' levels with t quantiles, Jennison & Turnbull 2000 sec. 11.2, spend about 0.053 at 3 -> 6 ->
9 seeds); and a look resolves a paired comparison only where the exact sign-flip p of its per-seed differences is
within the look's level too (without that gate a collapse-like A/A, d in {-0.6, 0, +0.6}, passes 8%: issue 45).
The sign-flip p is discrete (2/2^n at its smallest), so levels calibrated on the t alone under-spend (0.027-0.046 of
0.05, issue 57). `plan_levels` calibrates each look's level pi_k on the rule as it decides: a paired comparison is
claimed at pi when max(t p, sign-flip p) <= pi, and pi_k is the largest level whose claims, among A/A paths still
running, spend at most alpha(t_k) less what the looks before spent (the last look: all that is left). The t p and
the sign-flip p are simulated together on 200,000 A/A paths of normal differences with a fixed seed (a Monte
Carlo error of about 0.0005 on a design's total, stated on the page). A look whose smallest claim would spend more
than its share (at 3 seeds about 0.22: every sign alike) claims nothing and its share carries on; a look's level
can stop just below an atom of the sign-flip p (0.0624 at 6 seeds, below 4/64), so a level can exceed alpha's
share while the rule spends within it. An unpaired comparison (no gate) takes the t alone's levels: exactly the
share while nothing was spent (the marginal t), simulated on the same paths after. The repeated confidence
interval of look k, mean +- t_{1 - pi_k / 2, df} se, is the t part of the rule: a verdict reads it with the gate.
With m comparisons of the primary metric each gets alpha / m (Bonferroni: a sequential Holm has no simple form).
A round stops a comparison when it resolves or its repeated interval lies within +-effect (equivalent: a futility
stop, which can only lower the false-positive rate). perf/rounds_spend.py measures each design's A/A spend and
power; tests/report/test_sequential.py repeats the spend with fewer repetitions.
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


PATHS = 200_000  # simulated A/A paths per planning call: the MC error of a look's spend is sqrt(a (1 - a) / PATHS)
PLAN_SEED = 45  # the planner's fixed random seed: the same looks always get the same levels
PLAN_EXACT = 12  # the planner enumerates the sign patterns up to 12 seeds; above, PLAN_DRAWS random ones
PLAN_DRAWS = 4095


@dataclass(frozen=True)
class Levels:
    """Each look's nominal two-sided level (0: no claim possible at that look) for a paired comparison (the
    rule: t and sign-flip gate together) and for an unpaired one (the t alone), with the A/A probability the
    paired rule has spent by each look (simulated: `error` is the Monte Carlo error of the total)."""

    paired: list[float]
    unpaired: list[float]
    spent: list[float]
    error: float


def paths_t_p(s: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """The two-sided one-sample t p of paths whose first n differences sum to s with squares summing to q (1: no
    spread)."""
    var = np.maximum(q - s**2 / n, 0) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(var > 0, np.abs(s / n) / np.sqrt(var / n), 0.0)
    return np.where(var > 0, 2 * sps.t.sf(t, n - 1), 1.0)


def flip_rows(d: np.ndarray, signs: np.ndarray | None = None) -> np.ndarray:
    """The sign-flip p of each row of d [R, n]: exact over the 2^n patterns, or with `signs` [B, n] random
    patterns the Monte Carlo p (1 + hits) / (1 + B) of stats.sign_flip_mc. In blocks of rows (memory)."""
    n = d.shape[1]
    exact = signs is None
    if exact:
        signs = (1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)).astype(float)  # [2^n, n]
    out = np.empty(len(d))
    step = max(1, 2**22 // len(signs))
    for i in range(0, len(d), step):
        block = d[i:i + step]  # [b, n]
        hits = (np.abs(block @ signs.T) >= np.abs(block.sum(1))[:, None] * (1 - 1e-12)).sum(1)
        out[i:i + step] = hits / len(signs) if exact else (1 + hits) / (1 + len(signs))
    return out


def claim_level(q: np.ndarray, budget: int) -> tuple[float, int]:
    """(the largest level pi at which at most `budget` of the combined p's `q` (a path is claimed at pi when
    q <= pi) are claimed, how many it claims); (0, 0) when even the smallest q is shared by more (an atom of the
    sign-flip p: the look can claim nothing without overspending)."""
    if budget <= 0 or not len(q):
        return 0.0, 0
    qs = np.sort(q)
    if budget >= len(qs):
        return float(qs[-1]), len(qs)
    below = int(np.searchsorted(qs, qs[budget], side="left"))  # claimed paths strictly below the first refused
    return (float(qs[below - 1]), below) if below > 0 else (0.0, 0)


def _gated_look(d: np.ndarray, tp: np.ndarray, alive: np.ndarray, budget: int, signs: np.ndarray | None
                ) -> tuple[float, np.ndarray]:
    """(level, the paths it claims) of one look of the rule as it decides: a path still running is claimed at
    level pi when its t p and its sign-flip p (d [paths, n]) are both within pi, i.e. when q = max(t p, flip p)
    <= pi; pi is the largest level claiming at most `budget` paths. The sign-flip p is computed only where the
    t p is below `hi` (doubled until more than `budget` paths have q <= hi, so no path above it matters)."""
    floor = sign_flip_floor(d.shape[1])
    hi = min(1.0, 2 * budget / len(d) + 2 * floor)
    while True:
        cand = np.flatnonzero(alive & (tp <= hi))
        q = np.maximum(tp[cand], flip_rows(d[cand], signs))
        if hi >= 1 or int((q <= hi).sum()) > budget:
            break
        hi = min(1.0, 2 * hi)
    level, _ = claim_level(q, budget)
    claimed = np.zeros(len(d), dtype=bool)
    claimed[cand[q <= level]] = level > 0
    return level, claimed


def _targets(seeds: list[int], max_seeds: int, alpha: float, kind: str, final: bool) -> list[float]:
    """alpha(t_k), the spending function's total by each look (the last, `final`, spends all of alpha)."""
    return [alpha if final and k == len(seeds) - 1 else spent(n / max_seeds, alpha, kind) for k, n in enumerate(seeds)]


def _rule_levels(x: np.ndarray, seeds: list[int], targets: list[float], gate: bool) -> tuple[list[float], list[float]]:
    """(each look's level, the total spent by it) of the rule on the A/A paths x [paths, n_K]: `gate`, the t and
    the sign-flip p together (paired); else the t alone (unpaired: exact, the marginal t quantile, while no look
    has spent anything). What a look could not spend (an atom of the sign-flip p in the way) carries on."""
    paths = len(x)
    s, q = np.cumsum(x, axis=1), np.cumsum(np.square(x), axis=1)
    signs = np.random.default_rng(PLAN_SEED + 1).choice([-1.0, 1.0], size=(PLAN_DRAWS, x.shape[1]))
    alive = np.ones(paths, dtype=bool)
    out, total, done = [], [], 0.0
    for n, target in zip(seeds, targets, strict=True):
        tp = paths_t_p(s[:, n - 1], q[:, n - 1], n)
        budget = max(target - done, 0.0)
        count = int(math.floor(budget * paths + 1e-9))
        if gate:
            level, claimed = _gated_look(x[:, :n], tp, alive, count, None if n <= PLAN_EXACT else signs[:, :n])
            done += int(claimed.sum()) / paths
        elif alive.all():  # nothing spent yet: the look's t is the marginal t, its level exactly the budget
            level, claimed = budget, tp <= budget
            done += budget
        else:
            level, _ = claim_level(tp[alive], count)
            claimed = alive & (tp <= level) & (level > 0)
            done += int(claimed.sum()) / paths
        alive &= ~claimed
        out.append(level)
        total.append(float(done))
    return out, total


def plan_levels(seeds: list[int], max_seeds: int, alpha: float = 1 - LEVEL, kind: str = Spending.POCOCK,
                final: bool = False, paths: int = PATHS) -> Levels:
    """The levels of looks at n_1 < n_2 < ... seeds per arm (`seeds`) of `max_seeds`, calibrated on the rule as
    it decides: look k may spend alpha(n_k / max_seeds) less what the looks before it spent (the last, `final`,
    all that is left), where a paired comparison is claimed when its t p and its sign-flip p are both within the
    level. The t p and the sign-flip p are simulated together on `paths` A/A paths of normal differences (the t
    does not depend on their sd) with a fixed seed; the unpaired t alone is exact while nothing was spent, and
    simulated on the same paths after. A sign-flip p is discrete (2/2^n at its smallest: 0.25 at 3 seeds), so a
    look whose smallest claim would spend more than its share claims nothing and its share carries on."""
    x = np.random.default_rng(PLAN_SEED).standard_normal((paths, max(seeds)))
    targets = _targets(seeds, max_seeds, alpha, kind, final)
    paired, total = _rule_levels(x, seeds, targets, gate=True)
    unpaired, _ = _rule_levels(x, seeds, targets, gate=False)
    return Levels(paired, unpaired, total, math.sqrt(total[-1] * (1 - total[-1]) / paths))


def t_levels(seeds: list[int], max_seeds: int, alpha: float = 1 - LEVEL, kind: str = Spending.POCOCK,
             final: bool = False, paths: int = PATHS) -> list[float]:
    """The paired comparisons' levels of `plan_levels` (the rule: t and sign-flip gate)."""
    return plan_levels(seeds, max_seeds, alpha, kind, final, paths).paired


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
    flip_p: float = math.nan  # the sign-flip p the gate read (NaN: no gate, an unpaired comparison)
    level: float = 0.0  # the look's level it was held to

    @property
    def settled(self) -> bool:
        return self.resolved or self.equivalent

    @property
    def refused(self) -> bool:
        """The repeated interval excludes zero but the sign-flip gate said no: a line must say why."""
        return not self.resolved and self.level > 0 and excludes_zero(self.interval) and not math.isnan(self.flip_p)


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
    return Decision(rci, resolved, equivalent, flip_p, level)
