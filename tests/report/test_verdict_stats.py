"""The verdict's statistics against hand computations: the paired t interval, Holm's levels, the minimum
detectable effect, seeds for an effect of interest (Cohen's tables), the TOST bound, the group-sequential
boundaries, the variance split of held-out accuracy, the two-level bootstrap, and the pairing check."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from report_runs import fake_run

from gspo.report.heldout import Outcomes, decompose, final_outcomes, paired_bootstrap
from gspo.report.power import equivalence, mde, power, sd_upper, seeds_for
from gspo.report.runs import load_run
from gspo.report.sequential import boundaries, decide, nominal, spent
from gspo.report.stats import Interval, clip_to, holm, paired_ci, sign_flip_floor, sign_flip_p

T2 = 4.302653  # t(0.975, 2)


def test_paired_interval_by_hand():
    # d = 1, 1, 3: mean 5/3, sd sqrt(4/3), se sqrt(4/3) / sqrt(3) = 2/3, half 4.302653 * 2/3
    ci = paired_ci([1.0, 2.0, 4.0], [0.0, 1.0, 1.0])
    assert (ci.mean, ci.n, ci.df) == (pytest.approx(5 / 3), 3, 2) and ci.se == pytest.approx(2 / 3)
    assert (ci.low, ci.high) == (pytest.approx(5 / 3 - T2 * 2 / 3, abs=1e-6), pytest.approx(5 / 3 + T2 * 2 / 3, abs=1e-6))
    # t = 2.5 on 2 df; the t(2) tail has a closed form, P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2
    assert ci.p == pytest.approx(1 - 2.5 / math.sqrt(8.25), abs=1e-9)
    assert paired_ci([1.0, math.nan, 3.0], [0.0, 1.0, 1.0]).n == 2  # a pair with a missing value is dropped
    wide = ci.at(0.99)  # t(0.995, 2) = 9.9248
    assert wide.high - wide.mean == pytest.approx(9.9248 * 2 / 3, abs=1e-3)


def test_holm_levels_by_hand():
    # m = 4: 0.01 <= 0.05/4 rejected; 0.03 > 0.05/3 stops; it and all after are held to 0.05/3
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.0125, 0.05 / 3, 0.05 / 3, 0.05 / 3])
    assert holm([0.001, 0.02]) == pytest.approx([0.025, 0.05])  # both rejected: 0.05/2, then 0.05/1
    # no test (one seed, or seeds that tied): counted in m and never rejected, so it cannot loosen the others
    assert holm([math.nan, 0.01]) == pytest.approx([0.05, 0.025])
    tie = paired_ci([0.5, 0.6, 0.7], [0.4, 0.5, 0.6])  # every seed +0.1: se 0, no test
    assert not tie.tested and math.isnan(tie.p) and math.isnan(mde(tie)) and seeds_for(0.02, tie, True) is None
    levels = holm([tie.p, 0.001, 0.2, 0.3, 0.4, 0.5])
    assert levels[1] == pytest.approx(0.05 / 6) and levels[0] == pytest.approx(0.05 / 5)  # 0.0083, not 0.01


def test_minimum_detectable_effect_and_seeds_for_an_effect_match_the_tables():
    # large df: the normal answer (z_0.975 + z_0.8) se = (1.959964 + 0.841621) se
    big = Interval(0.0, -1, 1, 10**6, se=0.01, df=10**6)
    assert mde(big) == pytest.approx(2.801585 * 0.01, rel=1e-4)
    small = Interval(0.0, -1, 1, 3, se=0.01, df=2)
    assert power(mde(small), 0.01, 2) == pytest.approx(0.8, abs=1e-6) and mde(small) > mde(big) * 2
    # one-sample (paired) t, d = 0.5: 34 pairs (G*Power); two samples, d = 0.5: 64 per arm (Cohen 1988, 2.4.1)
    paired = Interval(0.0, -1, 1, 3, se=1 / math.sqrt(3), df=2)  # sd of a pair's difference 1
    assert seeds_for(0.5, paired, paired=True, upper=None) == 34
    welch = Interval(0.0, -1, 1, 3, se=math.sqrt(2 / 3), df=4)  # pooled sd 1, 3 per arm
    assert seeds_for(0.5, welch, paired=False, upper=None) == 64 and seeds_for(1.0, welch, False, upper=None) == 17
    assert seeds_for(0.0, paired, paired=True) is None and math.isnan(mde(Interval(0.1, math.nan, math.nan, 1)))


def test_tost_bound_by_hand():
    ci = Interval(0.1, 0, 0, 10**6, se=1.0, df=10**6)  # 90% interval 0.1 +- 1.644854
    tost, shown = equivalence(ci, 2.0)
    assert (tost.low, tost.high) == (pytest.approx(0.1 - 1.644854, abs=1e-4), pytest.approx(0.1 + 1.644854, abs=1e-4))
    assert shown and not equivalence(ci, 1.7)[1]


def test_group_sequential_boundaries():
    # the first look spends alpha(t1): c1 = z_0.975 / sqrt(t1) under O'Brien-Fleming-type spending
    obf = boundaries([0.25, 0.5, 0.75, 1.0])
    assert obf[0] == pytest.approx(1.959964 / 0.5, abs=1e-6) and obf[-1] == pytest.approx(2.04, abs=0.01)
    assert boundaries([0.5, 1.0], kind="pocock") == pytest.approx([2.157, 2.201], abs=2e-3)  # Jennison & Turnbull
    assert spent(1.0) == pytest.approx(0.05) and spent(1.0, kind="pocock") == pytest.approx(0.05)
    # the boundaries' crossing probability of a Brownian motion at those looks is alpha (Monte Carlo, 400k paths)
    rng = np.random.default_rng(0)
    z = np.cumsum(rng.normal(size=(400_000, 4)), axis=1) / np.sqrt(np.arange(1, 5))
    assert (np.abs(z) >= np.array(obf)).any(axis=1).mean() == pytest.approx(0.05, abs=0.0015)
    cut = boundaries([0.25, 0.5], final=True)  # a design stopped at half its seeds spends what is left
    z2 = z[:, :2]
    assert (np.abs(z2) >= np.array(cut)).any(axis=1).mean() == pytest.approx(0.05, abs=0.0015)
    d = decide(Interval(0.1, 0, 0, 6, se=0.02, df=5), nominal(obf[1]), 0.02)
    assert d.resolved and not d.equivalent and d.interval.low > 0


def test_variance_split_and_bootstrap_by_hand():
    # k = 2, 4 problems. Run 1: correct 2,1,0,1 (acc 0.5), eval var sum c(k-c)/(k(k-1)) / k / n^2 = 1/2/16;
    # run 2: 2,2,2,1 (acc 0.875), 0.5/2/16. Total var of (0.5, 0.875) = 0.0703125; eval mean 3/128.
    one, two = Outcomes(0, 2, np.array([2, 1, 0, 1]), "x"), Outcomes(0, 2, np.array([2, 2, 2, 1]), "x")
    assert one.sampling_var == pytest.approx(1 / 32) and two.sampling_var == pytest.approx(1 / 64)
    split = decompose([one, two])
    assert (split.total, split.eval, split.seed) == pytest.approx((0.0703125, 3 / 128, 0.0703125 - 3 / 128))
    assert not split.bound and Outcomes(0, 1, np.array([1, 0]), "x").sampling_var == pytest.approx(0.25 / 2)
    # one seed, two problems, differences 0 and 1: the mean of two problems drawn with replacement is 0, 1/2 or 1
    mean, low, high = paired_bootstrap(np.array([[0.0, 1.0]]), np.zeros((1, 2)), draws=4000)
    assert (mean, low, high) == (0.5, 0.0, 1.0)


def _with_outcomes(run, correct: list[int], problems: str = "abc") -> None:
    """Add the per-problem record a real run writes for its final held-out eval, matching its logged accuracy."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    acc = sum(correct) / len(correct)
    rows[-1]["eval/arith/accuracy"] = acc
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    row = {"benchmark": "arith", "metric": "pass@1", "value": acc, "k": 1, "temperature": 1.0, "step": rows[-1]["step"],
           "source": "train", "problems": problems, "correct": correct}
    (run / "evals.jsonl").write_text(json.dumps(row) + "\n")


def test_pairing_is_checked_from_the_records_and_falls_back_to_welch_in_words(tmp_path):
    from gspo.report.arms import group_arms
    from gspo.report.tables import PAIRED, WELCH, difference, headlines

    head = headlines("arith")[0]
    paths = [fake_run(tmp_path / "a", algo, s) for algo in ("grpo", "gspo") for s in range(3)]
    for i, p in enumerate(paths):
        _with_outcomes(p, [1, 0, 1, i % 2])
    grpo, gspo = group_arms([load_run(p) for p in paths])
    assert final_outcomes(gspo.runs[0], head.metric).problems == "abc"
    d = difference(head, gspo, grpo, 0.02)
    assert d.method == PAIRED and d.ci.n == 3 and d.welch is not None
    _with_outcomes(paths[3], [1, 0, 1, 1], problems="other")  # GSPO seed 0 saw another eval set
    grpo, gspo = group_arms([load_run(p) for p in paths])
    d = difference(head, gspo, grpo, 0.02)
    assert d.method == WELCH and d.why_unpaired == "seed 0's runs were evaluated on different problems"
    grpo, gspo = group_arms([load_run(p) for p in paths[:5]])  # GSPO seed 2 missing
    d = difference(head, gspo, grpo, 0.02)
    assert d.method == WELCH and d.why_unpaired == "the arms' seeds differ (GSPO: 0,1; GRPO: 0,1,2)"


def test_exact_sign_flip_p_by_hand():
    # d = 1, 1, 3: of the 8 sign patterns only all + and all - reach |sum| 5: 2/8, the floor at 3 seeds
    assert sign_flip_p([1.0, 2.0, 4.0], [0.0, 1.0, 1.0]) == pytest.approx(0.25) == sign_flip_floor(3)
    # d = 1, -1, 2, 3 (sum 5): |s1 + s2 + 2 s3 + 3 s4| >= 5 for all +, and for one of the two 1s flipped: 3 of 16,
    # and their mirrors: 6/16
    assert sign_flip_p([1.0, 0.0, 2.0, 3.0], [0.0, 1.0, 0.0, 0.0]) == pytest.approx(6 / 16)
    assert sign_flip_p([0.5, 0.6, 0.7], [0.4, 0.5, 0.6]) == pytest.approx(0.25)  # a tie has an exact p: the floor


def test_a_cut_interval_keeps_its_test_and_a_tie_has_none():
    """(0.92, 0.55, 0.95) vs (0.02, 0.05, 0.03): d = 0.90, 0.50, 0.92, mean 0.7733, sd 0.2369, se 0.13679 on 2 df;
    the 95% interval 0.7733 +- 4.3027 x 0.13679 = 0.185 to 1.362 is cut to 1 for display, and keeps se, df and
    its p (t = 5.653 on 2 df: (1 - t / sqrt(t^2 + 2)) = 0.0299), so Holm counts it and a sequential look reads it."""
    cut = clip_to(paired_ci([0.92, 0.55, 0.95], [0.02, 0.05, 0.03]), (-1.0, 1.0))
    t = 0.7733333 / 0.1367886
    assert (cut.low, cut.high, cut.how) == (pytest.approx(0.7733333 - T2 * 0.1367886, abs=1e-5), 1.0, "clipped")
    assert cut.p == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-6) and cut.tested
    assert cut.at(0.99).high == 1.0 and cut.at(0.99).low == pytest.approx(0.7733333 - 9.9248 * 0.1367886, abs=1e-3)
    assert cut.at(1 - 0.0007).uninformative and not cut.uninformative
    tie = paired_ci([0.5, 0.6, 0.7], [0.4, 0.5, 0.6])
    tost, shown = equivalence(tie, 0.2)
    assert not shown and not tie.tested  # a zero-width interval inside +-0.2 is not equivalence


def test_seeds_are_planned_at_the_sds_upper_confidence_bound():
    # df 2: chi2(0.2, 2) = -2 ln(0.8) = 0.446287 (the chi-square of 2 df is exponential), so the 80% upper bound of
    # the sd is s sqrt(2 / 0.446287) = 2.1169 s; planning at it equals planning at that sd as if known
    paired = Interval(0.0, -1, 1, 3, se=1 / math.sqrt(3), df=2)  # the sd of a pair's difference: 1
    assert sd_upper(paired) == pytest.approx(math.sqrt(2 / (-2 * math.log(0.8))), abs=1e-6)
    wider = Interval(0.0, -1, 1, 3, se=sd_upper(paired) / math.sqrt(3), df=2)
    assert seeds_for(0.5, paired, paired=True) == seeds_for(0.5, wider, paired=True, upper=None) > 34 * 4


def test_a_look_resolves_only_where_the_sign_flip_p_is_within_its_level():
    """t = 50 on 5 df is far past any level, but 6 differences with one of the other sign have a sign-flip p of
    at least 4/64 = 0.0625: at a look of level 0.02 that is no claim; with every sign alike (2/64) it resolves."""
    ci = Interval(0.5, 0, 0, 6, se=0.01, df=5)
    assert decide(ci, 0.02, 0.02).resolved  # without the gate (an unpaired comparison has none)
    assert not decide(ci, 0.02, 0.02, flip_p=4 / 64).resolved
    assert decide(ci, 0.04, 0.02, flip_p=2 / 64).resolved
