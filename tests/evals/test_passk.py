"""pass@k and avg@k against hand-computed values."""

import doctest
from math import comb

import pytest

import gspo.evals.passk as passk_mod
from gspo.conf.errors import GspoError
from gspo.evals.passk import aggregate, avg_at_k, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 1, 1, 0.25),  # pass@1 is c/n
        (8, 0, 4, 0.0),
        (8, 5, 4, 1.0),  # only 3 wrong samples: every 4-subset holds a correct one
        (8, 8, 8, 1.0),
        (8, 1, 8, 1.0),
    ],
)
def test_pass_at_k_hand_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_large_n_matches_exact_binomials():
    n, c, k = 200, 10, 100
    exact = 1 - comb(n - c, k) / comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001, abs=1e-15)


def test_k_larger_than_samples_is_a_user_error():
    with pytest.raises(GspoError, match="pass@8 needs at least 8 samples"):
        pass_at_k(4, 1, 8)


def test_inconsistent_counts_raise():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        avg_at_k(0, 0)


def test_aggregate_averages_problems_equally():
    metrics = aggregate([(4, 1), (4, 0), (4, 4)], k=2)
    # avg: (1/4 + 0 + 1)/3; pass@2: (1 - C(3,2)/C(4,2) + 0 + 1)/3 = (0.5 + 0 + 1)/3
    assert metrics == pytest.approx({"avg@2": 1.25 / 3, "pass@1": 1.25 / 3, "pass@2": 0.5})


def test_aggregate_of_nothing_is_nan_not_zero():
    metrics = aggregate([], k=4)
    assert all(v != v for v in metrics.values())


def test_docstring_examples():
    result = doctest.testmod(passk_mod)
    assert result.attempted >= 4 and result.failed == 0
