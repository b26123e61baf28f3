"""Confidence intervals across seeds: Student's t, two-sided 95%.

A seed is one replicate; with n seeds the interval of the mean is mean +- t(0.975, n-1) * s / sqrt(n),
s the sample (Bessel) standard deviation. One seed gives no interval (NaN bounds): the report says so
rather than pretending a single run has no spread. The difference between two arms uses Welch's
interval (unequal variances, Welch-Satterthwaite degrees of freedom).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# t(0.975, df) for df = 1..30 (standard tables); beyond 30 the normal value is within 4% and shrinking.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_Z975 = 1.960


def t975(df: float) -> float:
    """Two-sided 95% Student t quantile; fractional df (Welch) rounds down, the conservative side."""
    if df < 1:
        return math.nan
    k = int(df)
    return _T975[k - 1] if k <= len(_T975) else _Z975


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float  # NaN when n < 2
    high: float
    n: int


def mean_ci(values: list[float]) -> Interval:
    """Mean of `values` (NaN dropped) with its 95% t interval."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(mean, math.nan, math.nan, 1)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, len(xs))


def diff_ci(a: list[float], b: list[float]) -> Interval:
    """mean(a) - mean(b) with Welch's 95% interval; n is the smaller sample size."""
    xs = [float(v) for v in a if not math.isnan(v)]
    ys = [float(v) for v in b if not math.isnan(v)]
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
    """True when the interval exists and lies wholly on one side of zero."""
    return not math.isnan(ci.low) and (ci.low > 0 or ci.high < 0)
