"""Approximate gradient coding: fewer than s + 1 copies of each partition, bounded error.

For users whose storage cannot afford :math:`s + 1` copies: silos form :math:`g = \\lfloor n/r
\\rfloor` groups of at least r (``replication``) consecutive silos and every member of a group
holds the group's partitions (a fractional-repetition placement with r copies). The server
still waits for :math:`n - s` replies. Over GF(p) a partial combination is only meaningful
with coefficient 1 on every partition it contains (any other coefficient makes garbage), so the
estimate is the exact sum over the partitions that still have a surviving holder:

.. math::

    \\hat g = \\sum_{j \\in C} g_j, \\qquad C = \\{j : \\text{a holder of } j \\text{ replied}\\}.

*Best possible:* a partition without a surviving holder enters no reply, so no decoder can
recover any part of it; :math:`\\hat g` recovers every other partition exactly.

*Error bound:* with the partitions' vectors lifted to signed integers bounded by A
(the quantization's ``max_abs``), every coordinate obeys
:math:`|\\hat g - \\sum_j g_j| \\le |M| A` for the missing set M; the rescaled estimate
:math:`(K/|C|)\\,\\hat g` (unbiased when the missing partitions are a uniformly random subset)
obeys :math:`\\le 2 |M| A`.

*Exact region:* up to :math:`r - 1` stragglers never silence a group, so then the result is
exact. For t uniformly random stragglers a group of size r is lost with probability
:math:`\\binom{n - r}{t - r} / \\binom{n}{t}` (:meth:`ApproximateCode.expected_missing_fraction`).

>>> code = ApproximateCode(6, 3, replication=2)
>>> F = code.field
>>> g = [F.element([j + 1]) for j in range(6)]
>>> replies = {i: code.encode(i, [g[j] for j in code.support(i)]) for i in (0, 1, 4)}
>>> est = code.estimate(replies)  # silos 2 and 3 (group 1: partitions 2, 3) straggled
>>> est.total.tolist(), est.missing, est.error_bound(10)
([14], (2, 3), 20.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from coded_fl.codes.base import check_count
from coded_fl.codes.repetition import GroupCode
from coded_fl.errors import ConfigurationError, InputError
from coded_fl.field import PrimeField

__all__ = ["ApproximateCode", "ApproximateEstimate"]


@dataclass(frozen=True)
class ApproximateEstimate:
    """What survived: the exact field sum over the recovered partitions and what is missing."""

    #: :math:`\sum_{j \in C} g_j` in GF(p) (exact).
    total: torch.Tensor
    recovered: tuple[int, ...]
    missing: tuple[int, ...]
    num_partitions: int

    @property
    def exact(self) -> bool:
        """True when nothing is missing (``total`` is then the full sum)."""
        return not self.missing

    @property
    def missing_fraction(self) -> float:
        """:math:`|M| / K`."""
        return len(self.missing) / self.num_partitions

    @property
    def scale(self) -> float:
        """:math:`K / |C|`: multiply the dequantized total by this for the rescaled estimate."""
        return self.num_partitions / len(self.recovered)

    def error_bound(self, max_abs: float, *, rescaled: bool = False) -> float:
        """Largest possible error of one coordinate when every partition's coordinate is a
        signed integer of magnitude at most ``max_abs``: :math:`|M| A`, or :math:`2 |M| A` for
        the estimate multiplied by :attr:`scale`.

        Parameters
        ----------
        max_abs
            The largest magnitude of one partition's coordinate (a signed integer).
        rescaled
            Bound the estimate multiplied by scale instead of the estimate.

        Returns
        -------
        float
        """
        if not math.isfinite(max_abs) or max_abs < 0:
            raise InputError(f"max_abs must be a finite number >= 0, got {max_abs!r}")
        return float((2 if rescaled else 1) * len(self.missing) * max_abs)


class ApproximateCode(GroupCode):
    """Approximate gradient code: r = ``replication`` copies (:math:`1 \\le r \\le s`) of each
    partition, :math:`n - s` replies awaited, the best estimate plus its error bound from
    :meth:`estimate`. :meth:`decode` and :meth:`decoding_vector` work (exactly) whenever no
    group was silenced and raise :class:`coded_fl.errors.DecodingError` otherwise.

    Parameters
    ----------
    n
        Silos.
    s
        Stragglers tolerated (replies awaited: n - s).
    replication
        r, copies of each partition, :math:`1 \\le r \\le s`.
    num_partitions
        K (default n).
    field
        GF(p) (default :math:`p = 2^{31} - 1`).

    Raises
    ------
    ConfigurationError
        If r is outside 1..s or the sizes do not fit.
    """

    exact = False
    kind = "approximate"

    def __init__(
        self,
        n: int,
        s: int,
        *,
        replication: int,
        num_partitions: int | None = None,
        field: PrimeField | None = None,
    ) -> None:
        r = check_count("replication", replication, minimum=1)
        n = check_count("n", n, minimum=1)
        s = check_count("s", s, minimum=0)
        if r > s:
            raise ConfigurationError(
                f"replication={r} with s={s}: an approximate code keeps fewer than s+1 copies "
                f"(replication <= {s}); with {s + 1} copies use an exact code "
                "(kind='polynomial' or 'repetition')"
            )
        if r > n:
            raise ConfigurationError(f"replication={r} cannot exceed n={n}")
        self._replication = r
        super().__init__(n, s, groups=n // r, num_partitions=num_partitions, field=field)

    @property
    def exact_tolerance(self) -> int:
        """Stragglers that never cost a partition: the smallest group size minus one."""
        return min(len(grp) for grp in self.groups) - 1

    def _lost_hint(self) -> str:
        return "; this is an approximate code: estimate() gives the best estimate and its bound"

    def estimate(
        self, replies: Mapping[int, torch.Tensor], *, check: bool = True
    ) -> ApproximateEstimate:
        """The exact sum over every partition with a surviving holder, and what is missing.

        Needs :attr:`min_replies` replies; with ``check`` replicas are compared first
        (:meth:`check_consistency`).

        Parameters
        ----------
        replies
            Silo -> its reply (field vectors of one shape).
        check
            Compare replicas first.

        Returns
        -------
        ApproximateEstimate
        """
        ids, vectors = self._replies(replies)
        if check:
            self.check_consistency(replies)
        lost = set(self._lost_groups(ids))
        chosen: dict[int, int] = {}
        for k in np.argsort(ids):  # the smallest surviving id of each group
            chosen.setdefault(self.group_of(ids[k]), int(k))
        picked = [vectors[k] for k in sorted(chosen.values())]
        total = self.field.lincomb([1] * len(picked), picked, validate=True)
        missing = tuple(j for j, hs in enumerate(self._holders) if self.group_of(hs[0]) in lost)
        recovered = tuple(j for j in range(self.K) if j not in set(missing))
        return ApproximateEstimate(total, recovered, missing, self.K)

    def expected_missing_fraction(self, stragglers: int | None = None) -> float:
        """Expected :math:`|M|/K` when ``stragglers`` (default s) silos, chosen uniformly at
        random, do not reply: :math:`\\sum_q (K_q/K) \\binom{n - r_q}{t - r_q}/\\binom{n}{t}`.

        Parameters
        ----------
        stragglers
            Silos that do not reply (default s).

        Returns
        -------
        float
        """
        t = self.s if stragglers is None else check_count("stragglers", stragglers, minimum=0)
        if t > self.n:
            raise InputError(f"stragglers={t} exceeds n={self.n}")
        total = 0.0
        for q, grp in enumerate(self.groups):
            size = len(grp)
            parts = sum(1 for hs in self._holders if self.group_of(hs[0]) == q)
            if t >= size:
                total += parts * math.comb(self.n - size, t - size) / math.comb(self.n, t)
        return total / self.K
