"""Picking a gradient code from (n, s).

>>> make_code(10, 0)
PlainAggregation(n=10, s=0, K=10, p=2147483647)
>>> make_code(10, 2)  # groups of 4, 3, 3 silos: never mixes replicas
FractionalRepetitionCode(n=10, s=2, K=10, p=2147483647)
>>> make_code(10, 3, kind="polynomial")
PolynomialCode(n=10, s=3, K=10, p=2147483647)
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
    """Whether ``make_code(kind="auto")`` picks the repetition code for (n, s, K): whenever it
    exists, i.e. s >= 1 and :math:`K \\ge g = \\lfloor n/(s+1) \\rfloor`.

    Why: replicas of a partition computed on different machines are not bit-identical (thread
    counts, CPU instruction sets, GPU vs CPU), and the gap grows with training. The repetition
    code never mixes replicas: it decodes from one reply per group of silos holding the same
    partitions, so its sum is always a sum of one replica per partition, whatever the replicas
    differ by. The polynomial code mixes them, and a disagreeing coordinate becomes an arbitrary
    field element that must be corrected (extra replies) or erased. Measured with the main
    job's CNN, 2 local epochs, half the silos on 2 torch threads (n = 10, s = 2,
    ``python -m simulations.bench hetero``): the polynomial code erased 2-9 coordinates per round
    and in round 2 lost 4,765 of 11,124 coordinates (the round refused), where the repetition
    code completed every round with nothing erased. It also decodes with one scalar per group
    from one reply per group, does not need p > n and decodes every survivor set that keeps a
    silo per group. Its cost: when :math:`(s+1) \\nmid n` its busiest silo trains on
    :math:`\\lceil K/g \\rceil` partitions instead of s + 1 (for K = n, n = 2..100,
    s = 1..n-1: 1.17 times s + 1 on average and at most 1.5 times when s + 1 <= n/2; up to
    1.98 times beyond). Sites known to compute bit-identical replicas can choose
    ``kind="polynomial"`` for the lower storage. An extra reply of the repetition code checks
    only its own group's replicas (and a disagreement it finds never threatens the sum).

    >>> prefer_repetition(6, 2), prefer_repetition(7, 2), prefer_repetition(6, 0)
    (True, True, False)
    >>> prefer_repetition(10, 2, num_partitions=2)  # 3 groups, 2 partitions
    False

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
    return k >= n // (s + 1)


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

    - ``"auto"``: plain aggregation for s = 0, else the repetition code, which never mixes
      replicas (:func:`prefer_repetition` says why; with fewer partitions than groups no
      exact code serves, and the polynomial code's error says which setting to change);
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
    if kind == "repetition" or (kind == "auto" and prefer_repetition(n, s, num_partitions)):
        return FractionalRepetitionCode(n, s, num_partitions=num_partitions, field=field)
    return PolynomialCode(n, s, num_partitions=num_partitions, field=field)
