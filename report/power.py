"""What a comparison could have resolved, and what it rules out (scipy's noncentral t).

Post-hoc power ("seeds to resolve the observed difference") says little: a tiny observed difference always
"needs" hundreds of seeds, and the observed difference is the noisiest number on the page (Hoenig & Heisey,
"The abuse of power", Am. Stat. 2001). What a reader needs instead, all at the comparison's own test:
- the minimum detectable effect (`mde`): the smallest true difference the current seeds resolve with 80%
  power at the standard error they measured;
- when nothing is resolved, the equivalence bound (`equivalence`): the two one-sided tests at 5% each
  (TOST, Schuirmann 1987) rule out every difference beyond the 90% interval, so "the difference lies within
  -a to +b", and equivalence within the smallest effect of interest +-e is shown when a, b < e;
- the seeds per arm that would resolve that smallest effect of interest with 80% power (`seeds_for`).

A comparison's test is a t test on a mean difference with standard error `se` from n units (pairs of seeds,
or seeds per arm): T = D / se on `df` degrees of freedom. With a true difference delta, T is noncentral t
with noncentrality delta / se, so power(delta) = P(|T| > t_crit) = nct.sf(t_crit, df, nc) +
nct.cdf(-t_crit, df, nc). At n' units the standard error is se * sqrt(n / n') and df is n' - 1 (paired) or
2 n' - 2 (two samples, equal n: Student's pooled test, which Welch's approaches at equal variances).
"""

from __future__ import annotations

import math

from scipy import optimize
from scipy import stats as sps

from gspo.report.stats import LEVEL, POWER, Interval

MAX_SEEDS = 10_000  # seeds_for gives up (None) beyond this


def power(delta: float, se: float, df: float, alpha: float = 1 - LEVEL) -> float:
    """Power of the two-sided level-`alpha` t test on df degrees of freedom at true difference `delta`."""
    crit = sps.t.ppf(1 - alpha / 2, df)
    nc = abs(delta) / se
    upper, lower = sps.nct.sf(crit, df, nc), sps.nct.cdf(-crit, df, nc)
    # scipy's noncentral t gives NaN far in a tail: there the lower tail is 0 and the upper 1 past the critical value
    upper = upper if not math.isnan(upper) else float(nc > crit)
    return float(upper + (lower if not math.isnan(lower) else 0.0))


def mde(ci: Interval, alpha: float = 1 - LEVEL, target: float = POWER) -> float:
    """The smallest true difference this comparison's test (its se and df) resolves with `target` power;
    NaN where there is no test (one seed, or seeds that tied: se 0 measures no spread)."""
    if not ci.tested:
        return math.nan
    upper = ci.se * 100
    if power(upper, ci.se, ci.df, alpha) < target:  # df 1 and a tiny alpha: no difference within 100 se
        return math.inf
    return float(optimize.brentq(lambda d: power(d, ci.se, ci.df, alpha) - target, 0.0, upper, xtol=ci.se * 1e-6))


def _df(n: int, paired: bool) -> int:
    return n - 1 if paired else 2 * n - 2


SD_UPPER = 0.8  # seeds_for plans at the sd's one-sided 80% upper confidence bound (see seeds_for)


def sd_upper(ci: Interval, confidence: float = SD_UPPER) -> float:
    """The one-sided `confidence` upper bound of the sd of one unit (a pair's difference, or sqrt(2) x the pooled
    sd) behind `ci`: s sqrt(df / chi2_{1 - confidence}(df)) (the chi-square interval of a normal variance)."""
    return ci.se * math.sqrt(ci.n) * math.sqrt(ci.df / sps.chi2.ppf(1 - confidence, ci.df))


def seeds_for(effect: float, ci: Interval, paired: bool, alpha: float = 1 - LEVEL, target: float = POWER,
              upper: float | None = SD_UPPER) -> int | None:
    """Seeds per arm for `target` power to resolve a true difference `effect`, planned at the sd per unit this
    comparison measured (se * sqrt(n)) raised to its one-sided `upper` confidence bound (None: the sd as
    measured). From 3 seeds the sd is known only within a factor of about 3, and planning at the point estimate
    gives about 70% power on average instead of 80% (issue 45); at the bound the power is at least `target`
    with probability `upper`. None: no estimate (no test, no effect, or more than MAX_SEEDS), 2 at the least."""
    if not ci.tested or ci.n < 2 or effect <= 0:
        return None
    unit = ci.se * math.sqrt(ci.n) if upper is None else sd_upper(ci, upper)

    def enough(n: int) -> bool:
        return power(effect, unit / math.sqrt(n), _df(n, paired), alpha) >= target

    if not enough(MAX_SEEDS):
        return None
    lo, hi = 1, 2  # power grows with n: double until reached, then bisect to the smallest such n
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not enough(mid) else (lo, mid)
    return hi


def equivalence(ci: Interval, effect: float, alpha: float = 1 - LEVEL) -> tuple[Interval, bool]:
    """(the TOST interval, shown): the (1 - 2 alpha) interval, outside which the two one-sided level-alpha tests
    rule the difference out; equivalence within +-`effect` is shown when it lies strictly inside."""
    tost = ci.at(1 - 2 * alpha)
    shown = ci.tested and -effect < tost.low and tost.high < effect  # seeds that tied show no equivalence
    return tost, shown
