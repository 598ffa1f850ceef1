"""Silo times and the order-statistic theory of waiting for them (seed 003).

n silos; in every round silo i needs an independent :math:`X_i \\sim \\mathrm{Exp}(\\lambda_i)`
seconds. Waiting for every silo costs :math:`E[X_{(n)}]`, waiting for the fastest n - s costs
:math:`E[X_{(n-s)}]` (:math:`X_{(k)}` the k-th smallest). With equal rates
:math:`\\lambda_i = \\mu`:

.. math:: E[T_\\mathrm{all}] = H_n / \\mu, \\qquad E[T_\\mathrm{coded}] = (H_n - H_s) / \\mu

(:math:`H_k` the k-th harmonic number). The heavy tail of seed 003 ("the slowest 5 % of workers
can be 5-10x slower than the median") is a fixed 5 % of the silos whose mean time is 5-10x
longer; its expectations have no closed form and are integrated numerically,
:math:`E[X_{(k)}] = \\int_0^\\infty P(N(t) < k)\\,dt` with :math:`N(t)` the number of silos done
by time t (a sum of independent Bernoulli variables).

>>> m = SiloTimes.iid(100, mu=1.0)
>>> round(m.expected_wait_all(), 4), round(m.expected_wait_coded(20), 4)
(5.1874, 1.5896)
>>> round(m.theoretical_speedup(20), 3)
3.263
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SiloTimes", "harmonic", "silo_times"]


def harmonic(k: int) -> float:
    """:math:`H_k = \\sum_{j=1}^k 1/j` (:math:`H_0 = 0`)."""
    if k < 0:
        raise ValueError(f"harmonic number of a negative index {k}")
    return float(np.sum(1.0 / np.arange(1, k + 1))) if k else 0.0


@dataclass(frozen=True)
class SiloTimes:
    """Independent exponential silo times: ``mu`` for most silos, ``mu / factor`` for the slow.

    Parameters
    ----------
    n
        Silos.
    mu
        Rate of an ordinary silo (its mean time is 1/mu seconds).
    slow
        Indices of the slow silos.
    factors
        Their mean-time multipliers (same length as ``slow``).
    """

    n: int
    mu: float
    slow: tuple[int, ...] = ()
    factors: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if not (math.isfinite(self.mu) and self.mu > 0):
            raise ValueError(f"mu must be a positive rate, got {self.mu}")
        if len(self.slow) != len(self.factors):
            raise ValueError("slow and factors must have the same length")
        if len(set(self.slow)) != len(self.slow) or any(not 0 <= i < self.n for i in self.slow):
            raise ValueError(f"slow silos must be distinct indices in 0..{self.n - 1}")
        if any(not f >= 1 for f in self.factors):
            raise ValueError("slow factors must be >= 1")

    @classmethod
    def iid(cls, n: int, *, mu: float) -> SiloTimes:
        return cls(n=n, mu=mu)

    @classmethod
    def heavy_tail(
        cls,
        n: int,
        *,
        mu: float,
        fraction: float = 0.05,
        low: float = 5.0,
        high: float = 10.0,
        seed: int = 0,
    ) -> SiloTimes:
        """``max(1, round(fraction * n))`` silos (chosen with ``seed``) are ``low``-``high`` times
        slower on average, their factors spread evenly over that range."""
        k = max(1, round(fraction * n))
        chosen = np.random.default_rng([seed, n, 77]).choice(n, size=k, replace=False)
        factors = tuple(low + (high - low) * (j + 0.5) / k for j in range(k))
        return cls(n=n, mu=mu, slow=tuple(int(i) for i in sorted(chosen)), factors=factors)

    @property
    def kind(self) -> str:
        return "heavy_tail" if self.slow else "iid"

    def rates(self) -> np.ndarray:
        r = np.full(self.n, self.mu, dtype=np.float64)
        for i, f in zip(self.slow, self.factors, strict=True):
            r[i] = self.mu / f
        return r

    # ------------------------------------------------------------------ draws
    def draw(self, rng: np.random.Generator, rounds: int) -> np.ndarray:
        """``(rounds, n)`` silo times."""
        return rng.exponential(1.0, size=(rounds, self.n)) / self.rates()

    def draw_round(self, *, seed: int, round_: int) -> np.ndarray:
        """The n silo times of one round, a pure function of (seed, n, round): every process
        that knows the seed draws the same (server, silos, plain and coded runs alike)."""
        rng = np.random.default_rng([seed, self.n, round_])
        return rng.exponential(1.0, size=self.n) / self.rates()

    # ------------------------------------------------------------------ theory
    def expected_order_statistic(self, k: int) -> float:
        """:math:`E[X_{(k)}]`, the expected time until k silos are done (1 <= k <= n)."""
        if not 1 <= k <= self.n:
            raise ValueError(f"k must be in 1..{self.n}, got {k}")
        if not self.slow:
            return (harmonic(self.n) - harmonic(self.n - k)) / self.mu
        return _integrate_order_statistic(self.rates(), k, fast_rate=self.mu)

    def expected_wait_all(self) -> float:
        return self.expected_order_statistic(self.n)

    def expected_wait_coded(self, s: int) -> float:
        return self.expected_order_statistic(self.n - s)

    def theoretical_speedup(self, s: int) -> float:
        """:math:`E[X_{(n)}] / E[X_{(n-s)}]`: H_n / (H_n - H_s) for equal rates."""
        return self.expected_wait_all() / self.expected_wait_coded(s)


def silo_times(kind: str, n: int, *, mu: float, seed: int) -> SiloTimes:
    """The experiments' two models by name: ``"iid"`` or ``"heavy"`` (the heavy tail)."""
    if kind == "heavy":
        return SiloTimes.heavy_tail(n, mu=mu, seed=seed)
    if kind == "iid":
        return SiloTimes.iid(n, mu=mu)
    raise ValueError(f"unknown silo-time model {kind!r}")


def _integrate_order_statistic(rates: np.ndarray, k: int, *, fast_rate: float) -> float:
    """:math:`\\int_0^\\infty P(N(t) < k) dt`: the ``fast_rate`` silos count as one binomial
    group, the others enter a small dynamic programme; trapezoid rule on a fine grid."""
    from scipy.stats import binom

    fast = rates == fast_rate
    m = int(fast.sum())
    others = rates[~fast]
    t_max = math.log(len(rates) * 1e14) / float(rates.min())
    t = t_max * np.linspace(0.0, 1.0, 40_001) ** 2  # dense near 0, where small k live
    # pmf of the number of finished "other" silos at every t: (G, len(others) + 1)
    pmf = np.zeros((t.size, others.size + 1))
    pmf[:, 0] = 1.0
    for j, lam in enumerate(others):
        p = -np.expm1(-lam * t)
        pmf[:, 1 : j + 2] = pmf[:, 1 : j + 2] * (1 - p)[:, None] + pmf[:, : j + 1] * p[:, None]
        pmf[:, 0] *= 1 - p
    p_fast = -np.expm1(-fast_rate * t)
    below = np.zeros_like(t)
    for j in range(min(k, others.size + 1)):  # others done = j, fast done <= k - 1 - j
        below += pmf[:, j] * binom.cdf(k - 1 - j, m, p_fast)
    return float(np.trapezoid(below, t))
