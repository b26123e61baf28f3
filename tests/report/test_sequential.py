"""The rounds' levels (report/sequential.py, issue 57): calibrated on the rule as it decides (a paired comparison
resolves where its t p and its sign-flip p are both within the look's level), exact where the value is known (the
t alone while nothing was spent), the sign-flip p by seeded Monte Carlo above its exact range; and a seeded
simulation of every documented design's A/A spend (perf/rounds_spend.py, fewer repetitions)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from gspo.report.sequential import claim_level, decide, flip_rows, plan_levels, spent
from gspo.report.stats import Interval, sign_flip_error, sign_flip_floor, sign_flip_p

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def perf():
    spec = importlib.util.spec_from_file_location("gspo_rounds_spend", ROOT / "perf" / "rounds_spend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_level_claims_the_most_paths_within_its_budget_and_never_splits_an_atom():
    """q = max(t p, sign-flip p) of five paths; a budget of 3 paths cannot take the tied pair at 0.03 (that would
    claim 4): the level is 0.02, claiming 2. A budget below the smallest atom claims nothing (level 0)."""
    q = np.array([0.05, 0.03, 0.01, 0.03, 0.02])
    assert claim_level(q, 3) == (0.02, 2)
    assert claim_level(q, 4) == (0.03, 4)
    assert claim_level(q, 0) == (0.0, 0)
    assert claim_level(np.full(5, 0.25), 2) == (0.0, 0)


def test_the_unpaired_t_alone_is_exact_while_nothing_was_spent():
    """The marginal t of n seeds is exactly t on n - 1 df, so while no earlier look spent anything a look's level is
    its share of alpha itself, not a simulated order statistic (issue 57 D6: 0.050566 was printed as a "repeated
    0.949 CI" where the value is 0.05)."""
    assert plan_levels([9], 9, final=True).unpaired == [pytest.approx(0.05, abs=1e-15)]
    assert plan_levels([9], 12, kind="pocock").unpaired == [spent(0.75, kind="pocock")]
    obf = plan_levels([3, 6, 9], 9, kind="obrien_fleming", final=True)
    assert obf.unpaired[0] == pytest.approx(2 - 2 * sps.norm.cdf(sps.norm.ppf(0.975) * math.sqrt(3)), rel=1e-12)
    assert 0 < obf.unpaired[1] < 0.0164 and 0 < obf.unpaired[2] < 0.05  # after a look spent: simulated, below


def test_paired_levels_follow_the_sign_flip_atoms():
    """3 seeds: the smallest claim (every sign alike, t p within 2/2^3) spends about 0.22 under A/A, so even a last
    look spending all of 0.05 claims nothing. 6 seeds of 12, Pocock (share 0.031): the smallest claim (every sign
    alike, t p within 2/64) spends about 0.021, so the level rises to just below the next sign-flip value 4/64,
    spending what it can (about 0.029); O'Brien-Fleming's share at 6 of 12 (0.0056) claims nothing and carries on.
    The last look spends what is left: the design spends alpha, less at most one sign-flip atom (2/2^12 = 0.0005)."""
    assert plan_levels([3], 9, final=True).paired == [0.0]
    pocock = plan_levels([3, 6, 9, 12], 12, kind="pocock", final=True)
    assert pocock.paired[0] == 0.0 and 0.062 < pocock.paired[1] < 4 / 64
    assert pocock.spent[1] == pytest.approx(0.0288, abs=0.002) and 0.05 - 2 / 2**12 <= pocock.spent[-1] <= 0.05
    assert pocock.error == pytest.approx(math.sqrt(0.05 * 0.95 / 200_000), rel=0.01)
    obf = plan_levels([3, 6, 9, 12], 12, kind="obrien_fleming", final=True)
    assert obf.paired[:2] == [0.0, 0.0] and obf.paired[2] > sign_flip_floor(9) and 0.05 - 2 / 2**12 <= obf.spent[-1] <= 0.05
    assert pocock == plan_levels([3, 6, 9, 12], 12, kind="pocock", final=True)  # a fixed seed: same looks, same levels


def test_the_planner_s_sign_flip_p_is_stats_own(perf):
    """Exact at 7 seeds; at 20 the simulation's Monte Carlo patterns are the ones stats.sign_flip_mc draws."""
    rng = np.random.default_rng(3)
    d = rng.normal(0.5, 1, (20, 7))
    assert flip_rows(d) == pytest.approx([sign_flip_p(list(r), [0.0] * 7) for r in d], abs=1e-12)
    d = rng.normal(0.4, 1, (3, 20))
    assert flip_rows(d, perf.mc_signs(20)) == pytest.approx([sign_flip_p(list(r), [0.0] * 20) for r in d], abs=1e-12)


def test_above_sixteen_seeds_the_sign_flip_p_is_monte_carlo_not_off():
    """Issue 57 D4: above 16 seeds sign_flip_p was NaN and the gate let every t through. Twenty differences of equal
    size, 15 positive: the exact p is P(|2B - 20| >= 10), B ~ Bin(20, 1/2), = 2 P(B >= 15) = 0.0414; the Monte Carlo
    p (65,535 seeded patterns) is within four of its errors, the same every call; every sign alike: its floor."""
    a = [1.0] * 15 + [-1.0] * 5
    exact = 2 * sps.binom.sf(14, 20, 0.5)
    p = sign_flip_p(a, [0.0] * 20)
    assert p == pytest.approx(exact, abs=4 * sign_flip_error(20, p)) and p == sign_flip_p(a, [0.0] * 20)
    assert 0 < sign_flip_error(20, p) < 0.001 and sign_flip_error(16, 0.04) == 0.0
    assert sign_flip_floor(20) == 1 / 65536 <= sign_flip_p([1.0] * 20, [0.0] * 20) < 1e-4
    ci = Interval(0.5, 0, 0, 20, se=0.1, df=19)  # t = 5: far past the level; the gate refuses p = 0.041 at 0.01
    assert not decide(ci, 0.01, 0.02, p).resolved and decide(ci, 0.05, 0.02, p).resolved
    assert decide(ci, 0.01, 0.02, p).refused


def test_every_documented_design_spends_close_to_alpha_under_a_a(perf):
    """30,000 seeded A/A repetitions of each design in docs/verdicts.md, decided as the rounds decide: the spend is
    between 0.045 and 0.05 within four Monte Carlo errors (the repetitions' binomial se at 0.05, 0.0013, with the
    planner's 0.0005). The t-calibrated levels they replace spent 0.035 (Pocock 3 -> 6 -> 9) and fail this."""
    rng = np.random.default_rng(57)
    reps = 30_000
    bound = 4 * math.sqrt(0.05 * 0.95 / reps + 0.05 * 0.95 / 200_000)
    for seeds, kind in perf.DESIGNS:
        levels = plan_levels(seeds, seeds[-1], kind=kind, final=True)
        rate, _ = perf.rounds(rng.standard_normal((reps, seeds[-1])), seeds, levels.paired)
        assert 0.045 - bound <= rate <= 0.05 + bound, (seeds, kind, rate)
