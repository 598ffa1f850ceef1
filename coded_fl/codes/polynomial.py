"""The polynomial (Reed-Solomon, cyclic-MDS style) gradient code: exact for every n and s.

In the spirit of Raviv et al. (ICML 2018, cyclic MDS codes) and Halbawi et al. (ISIT 2018,
Reed-Solomon codes), written for GF(p) with fixed public points.

**Construction.** Evaluation points :math:`\\alpha_i` = :func:`public_points` (n distinct
nonzero field elements derived from SHA-256 of a fixed label: public, deterministic, and
pseudo-random, so that if replicas of a partition disagree the decoding coefficients
:math:`a_i B_{ij}` spread the error over the whole field and the dequantizer's range check
refuses the aggregate; with small points such as :math:`i + 1` those coefficients are small
rationals and a disagreement could pass as a plausible sum). Needs :math:`p > n`.

Partition j has the home silo :math:`h_j = \\lfloor j n / K \\rfloor` and the :math:`s + 1`
holders :math:`H_j = \\{h_j, h_j - 1, \\dots, h_j - s\\} \\bmod n` (for K = n the cyclic
placement: silo i holds partitions :math:`i, i+1, \\dots, i+s \\bmod n`). Then

.. math::

    B_{ij} = \\prod_{k \\notin H_j} (\\alpha_i - \\alpha_k),

which is zero unless i holds j.

**Theorem (exact decoding).** For every S with :math:`|S| \\ge n - s`, let R be the
:math:`n - s` smallest ids in S, :math:`a_i = 1 / \\prod_{k \\in R, k \\ne i} (\\alpha_i -
\\alpha_k)` for :math:`i \\in R` and :math:`a_i = 0` for the other ids of S. Then
:math:`a^T B_S = 1^T`.

*Proof.* Column j of B holds :math:`P_j(\\alpha_i)` for the monic polynomial
:math:`P_j(x) = \\prod_{k \\notin H_j}(x - \\alpha_k)` of degree :math:`n - s - 1` (exactly
:math:`s + 1` holders). A polynomial f of degree below :math:`|R| = n - s` equals its Lagrange
interpolant on the distinct points :math:`\\alpha_R`, whose coefficient of :math:`x^{n-s-1}` is
:math:`\\sum_{i \\in R} a_i f(\\alpha_i)`. For :math:`f = P_j` that coefficient is 1. Computing a
costs :math:`O((n - s)^2)` products and one batched inversion, no linear solve.

**Storage.** Silo i holds the partitions whose home lies in the cyclic window
:math:`\\{i, \\dots, i + s\\}`; a window of :math:`s + 1` homes out of the K spread evenly over n
silos holds at most :math:`\\lceil K (s+1) / n \\rceil` of them, the lower bound (exactly
:math:`s + 1` when K = n).

**Consistency.** Honest replies are :math:`y_i = Q(\\alpha_i)` with
:math:`Q = \\sum_j P_j g_j` of degree at most :math:`n - s - 1`: a Reed-Solomon codeword of
length :math:`|S|` and dimension :math:`n - s`, minimum distance :math:`e + 1` with
:math:`e = |S| - (n - s)` extra replies. Hence any :math:`\\le e` corrupted replies are detected
(whatever their values) and any :math:`\\le \\lfloor e/2 \\rfloor` are located exactly
(:mod:`coded_fl.codes.consistency`; location tries sets of that size while there are at most
20,000 of them, e.g. pairs among up to 200 replies).

>>> from coded_fl.linalg import mat_mul
>>> code = PolynomialCode(5, 2)
>>> code.support(4), code.holders(0)
((0, 1, 4), (0, 3, 4))
>>> a = code.decoding_vector([4, 1, 2])
>>> [int(x) for x in mat_mul(a[None, :], code.matrix[[4, 1, 2]], code.field.p)[0]]
[1, 1, 1, 1, 1]
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np

from coded_fl.codes._algebra import prod_mod
from coded_fl.codes.base import GradientCode
from coded_fl.errors import ConfigurationError
from coded_fl.linalg import batch_inverse, rank

__all__ = ["PolynomialCode", "cyclic_placement", "lagrange_weights", "public_points"]

#: Largest number of differences multiplied in one numpy step when building B.
_CHUNK = 1 << 22


def cyclic_placement(n: int, s: int, num_partitions: int) -> list[list[int]]:
    """Holders of each partition: :math:`\\{h_j - t \\bmod n : 0 \\le t \\le s\\}` with
    :math:`h_j = \\lfloor j n / K \\rfloor`.

    >>> cyclic_placement(4, 1, 4)
    [[0, 3], [1, 0], [2, 1], [3, 2]]

    Parameters
    ----------
    n
        Silos.
    s
        Stragglers tolerated (each partition has s + 1 holders).
    num_partitions
        K.

    Returns
    -------
    list[list[int]]
        For each partition, its s + 1 holders.
    """
    homes = [(j * n) // num_partitions for j in range(num_partitions)]
    return [[(h - t) % n for t in range(s + 1)] for h in homes]


@functools.lru_cache(maxsize=64)
def public_points(n: int, p: int) -> np.ndarray:
    """n distinct nonzero elements of GF(p): :math:`1 + (H(t) \\bmod (p-1))` for t = 0, 1, ...
    with H = SHA-256 of ``"coded-fl/points/v1/<t>"``, skipping repeats (read-only array).

    >>> public_points(3, 11).tolist() == public_points(3, 11).tolist()
    True
    >>> sorted(public_points(10, 11).tolist())
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]

    Parameters
    ----------
    n
        How many points.
    p
        The field's prime.

    Returns
    -------
    np.ndarray
    """
    if n >= p:
        raise ConfigurationError(f"GF({p}) has no {n} distinct nonzero points: use p > n")
    seen: dict[int, None] = {}
    t = 0
    while len(seen) < n:
        digest = hashlib.sha256(f"coded-fl/points/v1/{t}".encode()).digest()
        seen.setdefault(1 + int.from_bytes(digest, "little") % (p - 1), None)
        t += 1
    out = np.fromiter(seen, dtype=np.int64, count=n)
    out.setflags(write=False)
    return out


def lagrange_weights(points: np.ndarray, p: int) -> np.ndarray:
    """:math:`w_i = 1 / \\prod_{k \\ne i} (x_i - x_k)` for distinct points (O(m^2) products).

    :math:`\\sum_i w_i f(x_i)` is the coefficient of :math:`x^{m-1}` of the interpolant of f.

    >>> lagrange_weights(np.array([1, 2, 3]), 101).tolist()  # 1/2, -1, 1/2
    [51, 100, 51]

    Parameters
    ----------
    points
        m distinct field elements.
    p
        The modulus.

    Returns
    -------
    numpy.ndarray
        int64, the m weights.

    Raises
    ------
    InputError
        If two points coincide (a zero has no inverse).
    """
    x = np.asarray(points, dtype=np.int64) % p
    diff = (x[:, None] - x[None, :]) % p
    np.fill_diagonal(diff, 1)
    return batch_inverse(prod_mod(diff, p), p)


class PolynomialCode(GradientCode):
    """Exact gradient code for any :math:`n \\ge 1`, :math:`0 \\le s < n` and
    :math:`K (s+1) \\ge n`, over any GF(p) with :math:`p > n` (see the module documentation for
    the construction, the proof and what extra replies detect).

    With more than :math:`n - s` survivors the decoding vector uses the :math:`n - s` smallest
    silo ids (deterministic, depends on the set only); the others get coefficient 0 and serve
    :meth:`check_consistency`.

    Parameters
    ----------
    n
        Silos, :math:`n \\ge 1`.
    s
        Stragglers tolerated, :math:`0 \\le s < n`.
    num_partitions
        K (default n), with :math:`K (s+1) \\ge n`.
    field
        GF(p) with :math:`p > n` (default :math:`p = 2^{31} - 1`).

    Raises
    ------
    ConfigurationError
        If the sizes are out of range or p is too small.
    """

    kind = "polynomial"

    @property
    def points(self) -> np.ndarray:
        """The evaluation points :math:`\\alpha_i` (:func:`public_points`)."""
        return public_points(self.n, self.field.p)

    def _place(self) -> Sequence[Sequence[int]]:
        n, s, K, p = self.n, self.s, self.K, self.field.p
        if n >= p:
            raise ConfigurationError(
                f"n={n} silos need n distinct nonzero points in GF(p): p={p} must be > n; "
                "use a larger p (the default 2^31 - 1)"
            )
        if K * (s + 1) < n:
            raise ConfigurationError(
                f"num_partitions={K} with s={s} leaves silos without data: "
                f"need num_partitions * (s + 1) >= n = {n}"
            )
        return cyclic_placement(n, s, K)

    def _build_matrix(self) -> np.ndarray:
        n, s, K, p = self.n, self.s, self.K, self.field.p
        alpha = self.points
        held = np.array(self._holders, dtype=np.int64)  # K x (s+1), sorted rows
        outside = np.ones((K, n), dtype=bool)
        outside[np.arange(K)[:, None], held] = False
        others = np.nonzero(outside)[1].reshape(K, n - s - 1)
        b = np.zeros((n, K), dtype=np.int64)
        step = max(1, _CHUNK // max(1, (s + 1) * (n - s - 1)))
        for lo in range(0, K, step):
            hi = min(lo + step, K)
            diff = (alpha[held[lo:hi]][:, :, None] - alpha[others[lo:hi]][:, None, :]) % p
            b[held[lo:hi], np.arange(lo, hi)[:, None]] = prod_mod(diff, p)
        return b

    def _solve(self, survivors: tuple[int, ...]) -> np.ndarray:
        r = self.n - self.s
        a = np.zeros(len(survivors), dtype=np.int64)
        a[:r] = lagrange_weights(self.points[list(survivors[:r])], self.field.p)
        return a

    def _locate_radius(self, replies: int) -> int | None:
        return max(0, replies - (self.n - self.s)) // 2

    @functools.cached_property
    def _full_rank(self) -> bool:
        """Whether the :math:`P_j` span all polynomials of degree < n - s (rank B = n - s)."""
        return rank(self._matrix, self.field.p) == self.n - self.s

    def _parity_checks(self, ids: tuple[int, ...]) -> np.ndarray:
        """Rows :math:`h_{l,i} = w_i \\alpha_i^l`, :math:`l < |S| - (n - s)` (the dual
        Reed-Solomon code, O(|S|^2)) when the columns of B span all polynomials of degree below
        :math:`n - s`; otherwise the general left null space of :math:`B_S`."""
        if not self._full_rank:
            return super()._parity_checks(ids)
        e = len(ids) - (self.n - self.s)
        p = self.field.p
        if e <= 0:
            return np.zeros((0, len(ids)), dtype=np.int64)
        x = self.points[list(ids)]
        w = lagrange_weights(x, p)
        rows = np.empty((e, len(ids)), dtype=np.int64)
        rows[0] = w
        for level in range(1, e):
            rows[level] = rows[level - 1] * x % p
        return rows
