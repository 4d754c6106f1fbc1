"""Binomial tolerances: the Chernoff interval keeps its promise for small n, exactly."""

from __future__ import annotations

import math

import pytest

from schemas.stats import (
    binomial_tolerance,
    bonferroni_z,
    kl_bernoulli,
    normal_quantile,
    normal_tail,
    wilson_interval,
)


@pytest.mark.parametrize("z", [1.0, 2.5, 5.0, 8.0])
def test_normal_quantile_inverts_the_tail(z):
    assert normal_quantile(normal_tail(z)) == pytest.approx(z, abs=1e-9)
    assert normal_tail(5.0) == pytest.approx(2.8665e-7, rel=1e-3)


def test_kl_is_zero_at_p_and_infinite_where_impossible():
    assert kl_bernoulli(0.3, 0.3) == 0.0
    assert kl_bernoulli(0.5, 0.0) == math.inf
    assert kl_bernoulli(0.0, 0.2) == pytest.approx(-math.log(0.8))


def binomial_pmf(k: int, n: int, p: float) -> float:
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


@pytest.mark.parametrize("n", [10, 50, 400])
@pytest.mark.parametrize("p", [0.02, 0.1, 0.5, 0.8])
@pytest.mark.parametrize("z", [1.5, 2.5, 3.5])
def test_tolerance_tails_are_below_the_level(n, p, z):
    tol = binomial_tolerance(p, n, z)
    assert tol.lo <= p <= tol.hi
    below = sum(binomial_pmf(k, n, p) for k in range(n + 1) if k / n < tol.lo)
    above = sum(binomial_pmf(k, n, p) for k in range(n + 1) if k / n > tol.hi)
    assert below <= normal_tail(z)
    assert above <= normal_tail(z)


def test_tolerance_narrows_with_the_sample_and_handles_edges():
    widths = [
        binomial_tolerance(0.1, n).hi - binomial_tolerance(0.1, n).lo for n in (10, 10**3, 10**6)
    ]
    assert widths[0] > widths[1] > widths[2] > 0
    assert (binomial_tolerance(0.0, 100).lo, binomial_tolerance(0.0, 100).hi) == (0.0, 0.0)
    assert (binomial_tolerance(1.0, 100).lo, binomial_tolerance(1.0, 100).hi) == (1.0, 1.0)
    assert (binomial_tolerance(0.3, 0).lo, binomial_tolerance(0.3, 0).hi) == (0.0, 1.0)
    assert 0.8 in binomial_tolerance(0.8, 1000)
    with pytest.raises(ValueError):
        binomial_tolerance(1.5, 10)


def test_bonferroni_keeps_the_family_level():
    assert bonferroni_z(5.0, 1) == 5.0
    zb = bonferroni_z(5.0, 100)
    assert zb > 5.0
    assert 100 * normal_tail(zb) == pytest.approx(normal_tail(5.0), rel=1e-6)


def test_wilson_interval_holds_the_share():
    lo, hi = wilson_interval(30, 100)
    assert lo < 0.3 < hi
    assert wilson_interval(0, 0) == (0.0, 1.0)
