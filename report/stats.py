"""Statistics across seeds (scipy): 95% Student-t intervals, Welch differences, seeds needed, ranges.

A seed is one replicate; with n seeds the interval of the mean is mean +- t(0.975, n-1) * s / sqrt(n),
s the sample (Bessel) standard deviation, t from `scipy.stats.t`. One seed gives no interval (NaN bounds):
the report says so rather than pretending a single run has no spread. The difference between two arms
uses Welch's interval (unequal variances, Welch-Satterthwaite degrees of freedom, fractional as scipy
takes them). With two seeds a t interval is too wide to mean much and often leaves a metric's range, so
bands drawn from n < 3 seeds are the seeds' min-max instead (`band`), and every interval is clipped to
its metric's valid range (`clip_to`).

Seeds needed (`seeds_needed`): the smallest n per arm at which a two-sided two-sample t test (equal n,
pooled variance, alpha 0.05) detects a true difference `delta` with probability `power` (0.8), the
variance taken from the seeds observed: effect size d = |delta| / s_pooled, power(n) = P(|T| > t_crit)
with T noncentral t of df = 2n - 2 and noncentrality d * sqrt(n / 2) (what statsmodels' TTestIndPower
solves; here by scipy's noncentral t, counting n up).

For few seeds, as rliable (Agarwal et al., 2021) reports them: the interquartile mean (scipy's trim_mean)
and the probability of improvement P(X > Y) + P(X = Y) / 2 over every pair of seeds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

LEVEL = 0.95
POWER = 0.8
MAX_SEEDS = 10_000  # seeds_needed gives up (returns None) beyond this: the difference is too small to chase


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
    """The interval cut to the metric's valid range (lo, hi; None: unbounded); `how` says when it was."""
    lo, hi = valid
    low = ci.low if lo is None or math.isnan(ci.low) else max(ci.low, lo)
    high = ci.high if hi is None or math.isnan(ci.high) else min(ci.high, hi)
    if (low, high) == (ci.low, ci.high) or (math.isnan(low) and math.isnan(ci.low)):
        return ci
    return Interval(ci.mean, low, high, ci.n, "clipped")


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
        return Interval(d, d, d, n)
    df = (va + vb) ** 2 / (va**2 / (len(xs) - 1) + vb**2 / (len(ys) - 1))
    half = t975(df) * se
    return Interval(d, d - half, d + half, n)


def excludes_zero(ci: Interval) -> bool:
    """True when the interval exists, has width, and lies wholly on one side of zero."""
    return not math.isnan(ci.low) and ci.high > ci.low and (ci.low > 0 or ci.high < 0)


def zero_width(ci: Interval) -> bool:
    """An interval of no width from several seeds: the seeds tied, which is not certainty."""
    return ci.n >= 2 and not math.isnan(ci.low) and ci.low == ci.high


def pooled_sd(a: list[float], b: list[float]) -> float:
    """The pooled sample standard deviation of two samples (NaN below 2 values in either)."""
    xs, ys = _clean(a), _clean(b)
    if len(xs) < 2 or len(ys) < 2:
        return math.nan
    ss = statistics.variance(xs) * (len(xs) - 1) + statistics.variance(ys) * (len(ys) - 1)
    return math.sqrt(ss / (len(xs) + len(ys) - 2))


def t_test_power(d: float, n: int, alpha: float = 1 - LEVEL) -> float:
    """Power of the two-sided two-sample t test with n per arm at effect size d (Cohen's d)."""
    df = 2 * n - 2
    crit = sps.t.ppf(1 - alpha / 2, df)
    nc = abs(d) * math.sqrt(n / 2)
    return float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))


def seeds_needed(a: list[float], b: list[float], delta: float | None = None, power: float = POWER) -> int | None:
    """Seeds per arm for 80% power to detect a true difference `delta` (default: the observed mean
    difference) at the seeds' pooled variance. None: no estimate (fewer than 2 seeds in an arm, or no
    difference, or more than MAX_SEEDS); 2 at the least."""
    xs, ys = _clean(a), _clean(b)
    sd = pooled_sd(xs, ys)
    if math.isnan(sd):
        return None
    if delta is None:
        delta = statistics.fmean(xs) - statistics.fmean(ys)
    if delta == 0:
        return None
    if sd == 0:
        return 2
    d = abs(delta) / sd
    if t_test_power(d, MAX_SEEDS) < power:
        return None
    lo, hi = 1, 2  # power grows with n: double until it is reached, then bisect to the smallest such n
    while t_test_power(d, hi) < power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if t_test_power(d, mid) < power else (lo, mid)
    return hi


def iqm(values: list[float]) -> float:
    """Interquartile mean (rliable): the mean of the middle 50% of the values (scipy's trim_mean)."""
    xs = _clean(values)
    return float(sps.trim_mean(xs, 0.25)) if xs else math.nan


def prob_improvement(a: list[float], b: list[float]) -> float:
    """P(a > b) + P(a = b) / 2 over every pair of seeds (rliable's probability of improvement)."""
    xs, ys = np.asarray(_clean(a)), np.asarray(_clean(b))
    if not len(xs) or not len(ys):
        return math.nan
    gt = (xs[:, None] > ys[None, :]).mean()
    eq = (xs[:, None] == ys[None, :]).mean()
    return float(gt + eq / 2)
