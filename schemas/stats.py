"""Tolerances for the validator's statistical checks, derived from the sample size.

A check that compares an observed share with the share the build config implies accepts
exactly the shares that a binomial count of that size reaches with probability above a level
`alpha`, stated as a normal quantile `z` (z = 5: alpha = 5.7e-7, two-sided).

The one-sample tolerance uses the Chernoff bound P(k/n >= x) <= exp(-n * KL(x || p)) for
x > p (and its mirror below p), so the false-alarm probability is at most alpha for every n and
p, small samples and shares near 0 or 1 included, with no normal approximation. Comparing one
group with the rest uses the likelihood-ratio (G) test of a 2x2 table.

Where draws fall among k categories (the masks among the tenths of their rows), each category's
share gets its own interval, at the level that keeps the k of them together at z (Bonferroni).
The bound still holds when the draws have different probabilities (a Poisson-binomial count is
more concentrated than the binomial of the same mean) and when a row's draws are without
replacement (a hypergeometric count is, too), so it holds for the sum over rows of any sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def normal_tail(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def log_normal_tail(z: float) -> float:
    """log P(Z > z), finite for every finite z: `erfc` underflows to 0 for z beyond about 38,
    where the asymptotic series of Mills' ratio takes over (its error there is far below a
    float's precision)."""
    tail = normal_tail(z)
    if tail > 1e-300:
        return math.log(tail)
    inv = 1.0 / (z * z)
    series = 1.0 - inv + 3.0 * inv * inv - 15.0 * inv**3
    return -0.5 * z * z - math.log(z) - 0.5 * math.log(2.0 * math.pi) + math.log(series)


def quantile_of_log_tail(log_tail: float) -> float:
    """The z with log P(Z > z) = log_tail (< 0), by bisection on `log_normal_tail`; works where
    the tail itself is too small for a float."""
    return _bisect(log_normal_tail, log_tail, max(40.0, math.sqrt(-2.0 * log_tail) + 10.0))


def normal_quantile(tail: float) -> float:
    """The z with P(Z > z) = tail (0 < tail < 1), by bisection on `normal_tail`."""
    if not 0.0 < tail < 1.0:
        raise ValueError(f"a tail probability must lie in (0, 1) (got {tail})")
    return _bisect(normal_tail, tail, 40.0)


def _bisect(decreasing, target: float, hi: float) -> float:
    """The z in [-40, hi] where the decreasing function `decreasing` meets `target`."""
    lo = -40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if decreasing(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def kl_bernoulli(x: float, p: float) -> float:
    """KL(Bernoulli(x) || Bernoulli(p)), in nats; infinite where x is impossible under p."""

    def term(a: float, b: float) -> float:
        if a == 0.0:
            return 0.0
        return math.inf if b == 0.0 else a * math.log(a / b)

    return term(x, p) + term(1.0 - x, 1.0 - p)


@dataclass(frozen=True)
class Tolerance:
    """Shares a Binomial(n, p) count stays within, except with probability <= alpha per side."""

    p: float  # the share the config implies
    n: int  # sample size (independent draws)
    lo: float
    hi: float
    z: float  # the level, as a normal quantile

    def __contains__(self, share: float) -> bool:
        return self.lo <= share <= self.hi

    def describe(self) -> str:
        return f"expected {self.p:.4f}, accepted [{self.lo:.4f}, {self.hi:.4f}] at n={self.n:,}"


def binomial_tolerance(p: float, n: int, z: float = 5.0) -> Tolerance:
    """The acceptance interval for the share k/n of a Binomial(n, p) count at level z.

    Each side holds the shares x with n * KL(x || p) <= log(1 / P(Z > z)); by the Chernoff
    bound a share beyond it has probability at most P(Z > z).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a share must lie in [0, 1] (got {p})")
    if n <= 0:
        return Tolerance(p, n, 0.0, 1.0, z)
    budget = -log_normal_tail(z) / n
    lo = p if p == 0.0 else _solve_kl(p, 0.0, budget)
    hi = p if p == 1.0 else _solve_kl(p, 1.0, budget)
    return Tolerance(p, n, lo, hi, z)


def _solve_kl(p: float, edge: float, budget: float) -> float:
    """The share x between p and `edge` with KL(x || p) = budget (or `edge` if never reached)."""
    if kl_bernoulli(edge, p) <= budget:
        return edge
    inside, outside = p, edge
    for _ in range(100):
        mid = 0.5 * (inside + outside)
        if kl_bernoulli(mid, p) <= budget:
            inside = mid
        else:
            outside = mid
    return inside


def bonferroni_z(z: float, tests: int) -> float:
    """The per-test level that keeps the family-wise false-alarm rate of `tests` two-sided tests
    at that of one test at level z."""
    if tests <= 1:
        return z
    return quantile_of_log_tail(log_normal_tail(z) - math.log(tests))


def category_tolerances(expected: list[float], n: int, z: float = 5.0) -> list[Tolerance]:
    """Per category, the interval its share of `n` draws stays within, `expected` the shares
    the draws give on average; together at level z (each at the Bonferroni level over them)."""
    each = bonferroni_z(z, len(expected))
    return [binomial_tolerance(min(max(p, 0.0), 1.0), n, each) for p in expected]


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial share k/n (for reporting an observed share)."""
    if n <= 0:
        return 0.0, 1.0
    share = k / n
    denom = 1.0 + z * z / n
    centre = (share + z * z / (2 * n)) / denom
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
