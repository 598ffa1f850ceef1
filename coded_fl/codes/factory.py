"""Picking a gradient code from (n, s).

>>> make_code(10, 0)
PlainAggregation(n=10, s=0, K=10, p=2147483647)
>>> make_code(10, 3)
PolynomialCode(n=10, s=3, K=10, p=2147483647)
>>> make_code(10, 2, kind="repetition")  # groups of 4, 3, 3 silos
FractionalRepetitionCode(n=10, s=2, K=10, p=2147483647)
"""

from __future__ import annotations

from typing import Literal

from coded_fl.codes.approximate import ApproximateCode
from coded_fl.codes.base import GradientCode, check_count
from coded_fl.codes.polynomial import PolynomialCode
from coded_fl.codes.repetition import FractionalRepetitionCode, PlainAggregation
from coded_fl.errors import ConfigurationError
from coded_fl.field import PrimeField

__all__ = ["CodeKind", "make_code", "prefer_repetition"]

CodeKind = Literal["auto", "plain", "repetition", "polynomial", "approximate"]
_KINDS = ("auto", "plain", "repetition", "polynomial", "approximate")


def prefer_repetition(n: int, s: int, num_partitions: int | None = None) -> bool:
    """Whether the repetition code is the better exact code for (n, s, K).

    True when s >= 1 and the repetition code's busiest silo holds no more partitions than the
    polynomial code's: :math:`\\lceil K/g \\rceil \\le \\lceil K (s+1)/n \\rceil` with
    :math:`g = \\lfloor n/(s+1) \\rfloor \\le K` groups. For K = n that is exactly
    :math:`(s+1) \\mid n`.

    Why: at equal storage the repetition code completes rounds the polynomial code cannot. It never
    mixes replicas, so replicas of a partition that differ (different hardware, threads, GPU
    vs CPU: the normal case) still give the sum of one replica per group, where the polynomial
    code's sum is garbage; it decodes with coefficients 0/1 from one reply per group; it does
    not need p > n; and it decodes every survivor set that keeps one silo per group (far more
    than the sets of n - s). When :math:`(s+1) \\nmid n` its busiest silo trains on more
    partitions, up to :math:`2s+1` against s + 1 for K = n (measured for n = 2..100,
    s = 1..n-1: 1.17 times s + 1 on average and at most 1.5 times when
    :math:`s + 1 \\le n/2`; up to 1.98 times beyond), which costs every round that much
    compute on the critical path: there the polynomial code stays the choice and
    ``kind="repetition"`` remains available. One thing the polynomial code does better: an
    extra reply checks every partition there, while a repetition reply only checks its own
    group's replicas (and a disagreement it finds no longer threatens the sum).

    ``make_code(kind="auto")`` does not apply this rule yet: the protocol's replica-mismatch
    and equivocation tests (n = 8, s = 3; n = 6, s = 1 and 2) rely on the polynomial code's
    parity checks under ``"auto"``.

    >>> prefer_repetition(6, 2), prefer_repetition(7, 2), prefer_repetition(6, 0)
    (True, False, False)

    Parameters
    ----------
    n
        Silos.
    s
        Stragglers tolerated, :math:`0 \\le s < n`.
    num_partitions
        K (default n).

    Returns
    -------
    bool

    Raises
    ------
    ConfigurationError
        If an argument is out of range.
    """
    n = check_count("n", n, minimum=1)
    s = check_count("s", s, minimum=0)
    k = check_count("num_partitions", n if num_partitions is None else num_partitions, minimum=1)
    if not 1 <= s < n:
        return False
    g = n // (s + 1)
    return k >= g and -(-k // g) <= -(-k * (s + 1) // n)


def make_code(
    n: int,
    s: int,
    *,
    kind: CodeKind = "auto",
    num_partitions: int | None = None,
    field: PrimeField | None = None,
    replication: int | None = None,
) -> GradientCode:
    """The gradient code for n silos tolerating s stragglers.

    ``kind``:

    - ``"auto"``: plain aggregation for s = 0, the polynomial code otherwise (any n, s).
      :func:`prefer_repetition` says where the repetition code would be the better choice; it
      is not applied yet (existing protocol tests rely on the polynomial code there);
    - ``"plain"``: s must be 0;
    - ``"repetition"``: fractional repetition (any :math:`n > s`, :math:`K \\ge
      \\lfloor n/(s+1) \\rfloor`; more storage than the polynomial code unless
      :math:`(s+1) \\mid n`);
    - ``"polynomial"``: the polynomial code (exact for every n and s, needs p > n);
    - ``"approximate"``: ``replication`` (< s + 1) copies per partition, best estimate from
      :meth:`ApproximateCode.estimate`.

    ``replication`` is only for ``kind="approximate"``. Settings that cannot work raise
    :class:`ConfigurationError` naming them.

    Parameters
    ----------
    n
        Silos.
    s
        Stragglers tolerated, :math:`0 \\le s < n`.
    kind
        The construction (above).
    num_partitions
        K (default n).
    field
        GF(p) (default :math:`p = 2^{31} - 1`).
    replication
        Copies per partition, for ``kind="approximate"`` only.

    Returns
    -------
    GradientCode

    Raises
    ------
    ConfigurationError
        Naming the setting, if the kind does not fit n and s (e.g. repetition with fewer
        partitions than groups) or an argument is out of range.
    """
    if kind not in _KINDS:
        raise ConfigurationError(f"kind={kind!r} is unknown; use one of {', '.join(_KINDS)}")
    n = check_count("n", n, minimum=1)
    s = check_count("s", s, minimum=0)
    if s >= n:
        raise ConfigurationError(f"s={s} must be < n={n}: at least one reply is needed")
    if replication is not None and kind != "approximate":
        raise ConfigurationError(
            f"replication={replication} is only used by kind='approximate' (got kind={kind!r})"
        )
    if kind == "approximate":
        if replication is None:
            raise ConfigurationError("kind='approximate' needs replication (copies per partition)")
        return ApproximateCode(
            n, s, replication=replication, num_partitions=num_partitions, field=field
        )
    if kind == "plain" or (kind == "auto" and s == 0):
        if s != 0:
            raise ConfigurationError(f"kind='plain' tolerates no straggler: s={s} must be 0")
        return PlainAggregation(n, num_partitions=num_partitions, field=field)
    if kind == "repetition":
        return FractionalRepetitionCode(n, s, num_partitions=num_partitions, field=field)
    return PolynomialCode(n, s, num_partitions=num_partitions, field=field)
