"""95% intervals across seeds, hand-computed (t(0.975, 2) = 4.3027 from scipy, the table's 4.303)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gspo.report.stats import diff_ci, excludes_zero, mean_ci, t975


def test_mean_ci_three_seeds():
    # mean 2, sample std 1, half width 4.302653 * 1 / sqrt(3)
    ci = mean_ci([1.0, 2.0, 3.0])
    assert (ci.mean, ci.n) == (2.0, 3)
    assert ci.low == pytest.approx(2 - 4.302653 / math.sqrt(3), abs=1e-6)
    assert ci.high == pytest.approx(2 + 4.302653 / math.sqrt(3), abs=1e-6)


def test_identical_seeds_collapse_to_a_point():
    ci = mean_ci([0.25, 0.25, 0.25])
    assert (ci.mean, ci.low, ci.high, ci.n) == (0.25, 0.25, 0.25, 3)
    d = diff_ci([0.5, 0.5], [0.25, 0.25])
    assert (d.mean, d.low, d.high) == (0.25, 0.25, 0.25)


def test_one_seed_gives_no_interval_and_nan_is_dropped():
    ci = mean_ci([0.7, math.nan])
    assert (ci.mean, ci.n) == (0.7, 1) and math.isnan(ci.low) and math.isnan(ci.high)
    assert not excludes_zero(ci)
    assert mean_ci([]).n == 0


def test_welch_difference():
    # a - b = 2 - 4 = -2; var/n: 1/3 and 4/3, se = sqrt(5/3);
    # df = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = 50/17 = 2.941 -> t(0.975, 2.941) = 3.2188 (scipy, fractional df)
    d = diff_ci([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    half = 3.2188 * math.sqrt(5 / 3)
    assert d.mean == -2.0 and d.n == 3
    assert (d.low, d.high) == (pytest.approx(-2 - half, abs=1e-3), pytest.approx(-2 + half, abs=1e-3))
    assert not excludes_zero(d)


def test_t_table():
    # the printed t table (two-sided 95%) to its 3 decimals; the normal 1.960 far out
    assert [round(t975(df), 3) for df in (1, 4, 30)] == [12.706, 2.776, 2.042] and round(t975(1e6), 3) == 1.960
    assert 3.182 < t975(2.9) < 4.303 and math.isnan(t975(0))


def test_log_axis_bands_stop_at_half_the_smallest_positive_value():
    from types import SimpleNamespace

    from gspo.report.plots import _log_floor

    runs = [SimpleNamespace(metrics=pd.DataFrame({"clip/token_frac": [0.0, 0.004, 0.02]})),
            SimpleNamespace(metrics=pd.DataFrame({"clip/token_frac": [0.3, None, 0.001]}))]
    arms = [SimpleNamespace(runs=runs[:1]), SimpleNamespace(runs=runs[1:])]
    assert _log_floor(arms, "clip/token_frac") == 0.0005  # zeros cannot sit on a log axis
    assert _log_floor(arms, "policy/entropy") is None
