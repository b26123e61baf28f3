"""Statistics across seeds (scipy): 95% Student-t intervals, paired and Welch differences, Holm, ranges.

A seed is one replicate; with n seeds the interval of the mean is mean +- t(0.975, n-1) * s / sqrt(n),
s the sample (Bessel) standard deviation, t from `scipy.stats.t`. One seed gives no interval (NaN bounds):
the report says so rather than pretending a single run has no spread. The difference between two arms
uses Welch's interval (unequal variances, Welch-Satterthwaite degrees of freedom, fractional as scipy
takes them). With two seeds a t interval is too wide to mean much and often leaves a metric's range, so
bands drawn from n < 3 seeds are the seeds' min-max instead (`band`), and every interval is clipped to
its metric's valid range (`clip_to`).

Arms that share a seed share the initial model, the prompt stream and the sampling seeds (common random
numbers), so their difference is best read from the per-seed differences d_s = a_s - b_s (`paired_ci`): mean
d, interval mean +- t(0.975, n-1) * sd(d) / sqrt(n), the one-sample t test on the differences (Student 1908);
the seed-to-seed variance both arms share cancels. Where the pairing does not hold (report/pairing.py) the
difference falls back to Welch's. Several comparisons of one metric in one report are controlled by Holm's
step-down procedure (Holm 1979; `holm`): family-wise error 5% without assuming independence.

Power, the minimum detectable effect, equivalence and the seeds an effect of interest needs are
report/power.py's.

For few seeds, as rliable (Agarwal et al., 2021) reports them: the interquartile mean (scipy's trim_mean)
and the probability of improvement P(X > Y) + P(X = Y) / 2 over every pair of seeds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

LEVEL = 0.95
POWER = 0.8
# A page's confirmatory lines (its primary score's comparisons and its collapse tests) share one family-wise
# level 1 - LEVEL (weighted Holm over their union, `holm`): this share of alpha is set aside for the collapse
# tests, the rest for the primary comparisons, each split equally within its kind; a rejected line passes its
# share on. 0.2: the primary question keeps 0.04 of its 0.05 on a page where nothing collapsed.
COLLAPSE_SHARE = 0.2


def t975(df: float) -> float:
    """Two-sided 95% Student t quantile (scipy); NaN below one degree of freedom."""
    if not df >= 1:
        return math.nan
    return float(sps.t.ppf(0.5 + LEVEL / 2, df))


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float  # NaN when n < 2
    high: float
    n: int
    how: str = "t"  # "t": 95% t interval; "min-max": the seeds' range (n < 3); "clipped": t cut at the range
    se: float = math.nan  # standard error of `mean` (differences: of the mean difference)
    df: float = math.nan  # degrees of freedom of its t distribution (Welch's are fractional)
    valid: tuple[float | None, float | None] | None = None  # the range the bounds are cut to for display (clip_to)

    def at(self, level: float) -> Interval:
        """The same estimate at another two-sided confidence level (its t quantile at `df`), cut to `valid` again
        where it was cut (the test is the t's, whatever the display)."""
        if not self.tested:
            return self
        half = float(sps.t.ppf(0.5 + level / 2, self.df)) * self.se
        wide = Interval(self.mean, self.mean - half, self.mean + half, self.n, "t", self.se, self.df)
        return clip_to(wide, self.valid) if self.valid is not None else wide

    @property
    def tested(self) -> bool:
        """Whether a t test exists: a standard error above zero on at least one degree of freedom. Seeds that
        tied (se 0) are no test: zero spread from a few seeds is not certainty."""
        return self.df >= 1 and self.se > 0 and math.isfinite(self.se)

    @property
    def p(self) -> float:
        """Two-sided p-value of the t test of no difference; NaN where there is no test (no se, or se 0)."""
        if not self.tested:
            return math.nan
        return float(2 * sps.t.sf(abs(self.mean) / self.se, self.df))

    @property
    def uninformative(self) -> bool:
        """The interval was cut at both ends of its valid range: it rules out no possible value."""
        return self.valid is not None and self.how == "clipped" and (self.low, self.high) == self.valid


def _clean(values) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def mean_ci(values: list[float]) -> Interval:
    """Mean of `values` (NaN dropped) with its 95% t interval."""
    xs = _clean(values)
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(mean, math.nan, math.nan, 1)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, len(xs))


def clip_to(ci: Interval, valid: tuple[float | None, float | None]) -> Interval:
    """The interval cut to the metric's valid range (lo, hi; None: unbounded); `how` says when it was. The cut is
    for display only: se and df stay, so its test (p, Holm, a sequential look, MDE) is the t interval's, and
    `at` cuts an interval at another level again. Zero lies inside any range of differences, so the cut never
    changes whether an interval excludes zero."""
    lo, hi = valid
    low = ci.low if lo is None or math.isnan(ci.low) else max(ci.low, lo)
    high = ci.high if hi is None or math.isnan(ci.high) else min(ci.high, hi)
    if (low, high) == (ci.low, ci.high) or (math.isnan(low) and math.isnan(ci.low)):
        return replace(ci, valid=valid) if ci.tested else ci
    return Interval(ci.mean, low, high, ci.n, "clipped", ci.se, ci.df, valid)


def band(values: list[float], valid: tuple[float | None, float | None] = (None, None)) -> Interval:
    """What a plot shades: the 95% t interval clipped to the valid range from 3 seeds up; the seeds' min-max
    with 2 (a t interval of two seeds is 12.7 standard errors wide); nothing with 1."""
    xs = _clean(values)
    if len(xs) == 2:
        return Interval(statistics.fmean(xs), min(xs), max(xs), 2, "min-max")
    return clip_to(mean_ci(xs), valid)


def diff_ci(a: list[float], b: list[float]) -> Interval:
    """mean(a) - mean(b) with Welch's 95% interval; n is the smaller sample size."""
    xs, ys = _clean(a), _clean(b)
    if not xs or not ys:
        return Interval(math.nan, math.nan, math.nan, 0)
    d = statistics.fmean(xs) - statistics.fmean(ys)
    n = min(len(xs), len(ys))
    if n < 2:
        return Interval(d, math.nan, math.nan, n)
    va, vb = statistics.variance(xs) / len(xs), statistics.variance(ys) / len(ys)
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(d, d, d, n, se=0.0, df=len(xs) + len(ys) - 2)
    df = (va + vb) ** 2 / (va**2 / (len(xs) - 1) + vb**2 / (len(ys) - 1))
    half = t975(df) * se
    return Interval(d, d - half, d + half, n, se=se, df=df)


def paired_ci(a: list[float], b: list[float]) -> Interval:
    """mean(a_s - b_s) over pairs (a_s, b_s) of one seed each, with the paired 95% t interval: mean d +-
    t(0.975, n - 1) * sd(d) / sqrt(n). `a` and `b` are in pair order; a pair with a NaN is dropped."""
    ds = [x - y for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if not ds:
        return Interval(math.nan, math.nan, math.nan, 0)
    d = statistics.fmean(ds)
    if len(ds) < 2:
        return Interval(d, math.nan, math.nan, 1)
    sd = statistics.stdev(ds)
    # equal differences in binary floating point (0.7 - 0.6 vs 0.8 - 0.7) leave an sd of rounding error: a tie
    se = 0.0 if sd <= 1e-12 * max(abs(x) for x in ds) else sd / math.sqrt(len(ds))
    half = t975(len(ds) - 1) * se
    return Interval(d, d - half, d + half, len(ds), se=se, df=len(ds) - 1)


def holm(p: list[float], alpha: float = 1 - LEVEL, weights: list[float] | None = None) -> list[float]:
    """Holm's step-down levels: for each p-value, the level it is tested at, alpha / (m - j) for the j-th
    smallest (j from 0) while every smaller one was rejected, and the level of the first not rejected for
    it and all after (so an interval drawn at that level excludes zero exactly when Holm rejects). A NaN
    p-value (no test: one seed, or seeds that tied) is counted in m and never rejected, as a p of 1: a tie
    must not loosen the other comparisons' levels. `weights` (positive; None: equal): weighted Holm (Holm 1979,
    sec. 4), the hypothesis with the smallest p / w among those left tested at alpha w / (the weights left), so
    a share of alpha set aside for some lines (the collapse tests, COLLAPSE_SHARE) passes to the others as they
    are rejected; the family-wise error stays at alpha under any dependence."""
    m = len(p)
    w = [1.0] * m if weights is None else [float(x) for x in weights]
    order = sorted(range(m), key=lambda i: math.inf if math.isnan(p[i]) else p[i] / w[i])
    levels = [alpha / max(m, 1)] * m
    left, stopped = sum(w), None  # the weight of the hypotheses not yet rejected; its value where testing stopped
    for i in order:
        if stopped is None and p[i] <= alpha * w[i] / left:
            levels[i] = alpha * w[i] / left
            left -= w[i]
            continue
        stopped = left if stopped is None else stopped
        levels[i] = alpha * w[i] / stopped
    return levels


def excludes_zero(ci: Interval) -> bool:
    """True when the interval exists, has width, and lies wholly on one side of zero."""
    return not math.isnan(ci.low) and ci.high > ci.low and (ci.low > 0 or ci.high < 0)


def zero_width(ci: Interval) -> bool:
    """An interval of no width from several seeds: the seeds tied, which is not certainty."""
    return ci.n >= 2 and not math.isnan(ci.low) and ci.low == ci.high


SIGN_FLIP_MAX = 16  # seeds up to which the sign-flip p is enumerated exactly (2^16 sign patterns)


def sign_flip_p(a: list[float], b: list[float]) -> float:
    """The exact two-sided sign-flip (randomisation) p of the paired differences d_s = a_s - b_s: the share of
    the 2^n patterns of signs under which |mean d| is at least the observed one (Fisher 1935; exact whenever
    each d_s is symmetric about 0 under no difference, whatever its shape). Its floor is 2 / 2^n (0.25 at 3
    seeds): no n-seed result goes below it. NaN below 2 pairs; above SIGN_FLIP_MAX pairs by Monte Carlo
    (`sign_flip_mc`: seeded, its error `sign_flip_error`), never silently none."""
    ds = np.array([x - y for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))])
    n = len(ds)
    if n < 2:
        return math.nan
    if n > SIGN_FLIP_MAX:
        return sign_flip_mc(ds)
    signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)  # [2^n, n] every pattern of +-1
    flipped = np.abs(signs @ ds)
    return float((flipped >= abs(ds.sum()) * (1 - 1e-12)).mean())


SIGN_FLIP_DRAWS = 2**SIGN_FLIP_MAX - 1  # random sign patterns of the Monte Carlo p above SIGN_FLIP_MAX pairs
SIGN_FLIP_SEED = 57  # their fixed seed: the same differences always get the same p


def sign_flip_mc(ds: np.ndarray, draws: int = SIGN_FLIP_DRAWS, seed: int = SIGN_FLIP_SEED) -> float:
    """The Monte Carlo sign-flip p of the differences `ds`: (1 + the draws of `draws` random sign patterns whose
    |sum| reaches the observed one) / (1 + draws) (a p that is valid, not only consistent: Phipson & Smyth 2010),
    the patterns drawn with a fixed seed. Its Monte Carlo error is `sign_flip_error`."""
    rng = np.random.default_rng(seed)
    hits = 0
    for i in range(0, draws, 8192):  # [block, n] patterns at a time (memory)
        signs = rng.choice([-1.0, 1.0], size=(min(8192, draws - i), len(ds)))
        hits += int((np.abs(signs @ ds) >= abs(ds.sum()) * (1 - 1e-12)).sum())
    return (1 + hits) / (1 + draws)


def sign_flip_error(n: int, p: float) -> float:
    """The Monte Carlo standard error of a sign-flip p of n pairs: 0 where it is exact (n <= SIGN_FLIP_MAX)."""
    return 0.0 if n <= SIGN_FLIP_MAX or math.isnan(p) else math.sqrt(p * (1 - p) / SIGN_FLIP_DRAWS)


def sign_flip_floor(n: int) -> float:
    """The smallest p the sign-flip test can give with n pairs: 2 / 2^n (above SIGN_FLIP_MAX pairs the Monte Carlo
    p's, 1 / (1 + SIGN_FLIP_DRAWS), where that is larger)."""
    return 2.0 / 2**n if n <= SIGN_FLIP_MAX else max(2.0 / 2**n, 1 / (1 + SIGN_FLIP_DRAWS))


IQM_MIN = 5  # below 5 seeds the interquartile mean trims nothing the mean keeps (at 3 seeds it is the mean)


def iqm(values: list[float]) -> float:
    """Interquartile mean (rliable): the mean of the middle 50% of the values (scipy's trim_mean); NaN below
    IQM_MIN values, where trimming a quarter from each end removes no whole value."""
    xs = _clean(values)
    return float(sps.trim_mean(xs, 0.25)) if len(xs) >= IQM_MIN else math.nan


def prob_improvement(a: list[float], b: list[float], paired: bool = False) -> float:
    """P(a > b) + P(a = b) / 2: over every pair of seeds (rliable's probability of improvement), or, `paired`,
    over the pairs of one seed (a[s] against b[s]: the comparison the design makes)."""
    if paired:
        ds = [x - y for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))]
        return float(np.mean([(d > 0) + (d == 0) / 2 for d in ds])) if ds else math.nan
    xs, ys = np.asarray(_clean(a)), np.asarray(_clean(b))
    if not len(xs) or not len(ys):
        return math.nan
    gt = (xs[:, None] > ys[None, :]).mean()
    eq = (xs[:, None] == ys[None, :]).mean()
    return float(gt + eq / 2)
