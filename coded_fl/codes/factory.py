"""Picking a gradient code from (n, s).

>>> make_code(10, 0)
PlainAggregation(n=10, s=0, K=10, p=2147483647)
>>> make_code(10, 3)
PolynomialCode(n=10, s=3, K=10, p=2147483647)
>>> make_code(10, 1, kind="repetition")
FractionalRepetitionCode(n=10, s=1, K=10, p=2147483647)
"""

from __future__ import annotations

from typing import Literal

from coded_fl.codes.approximate import ApproximateCode
from coded_fl.codes.base import GradientCode, check_count
from coded_fl.codes.polynomial import PolynomialCode
from coded_fl.codes.repetition import FractionalRepetitionCode, PlainAggregation
from coded_fl.errors import ConfigurationError
from coded_fl.field import PrimeField

__all__ = ["CodeKind", "make_code"]

CodeKind = Literal["auto", "plain", "repetition", "polynomial", "approximate"]
_KINDS = ("auto", "plain", "repetition", "polynomial", "approximate")


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

    - ``"auto"``: plain aggregation for s = 0, the polynomial code otherwise (any n, s);
    - ``"plain"``: s must be 0;
    - ``"repetition"``: fractional repetition, needs :math:`(s+1) \\mid n`;
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
        Naming the setting, if the kind does not fit n and s (e.g. repetition without
        :math:`(s+1) \\mid n`) or an argument is out of range.
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
