"""Picking a gradient code from (n, s): the codes by name, in one registry.

A new code is a :class:`~coded_fl.codes.base.GradientCode` subclass in its own module and one
:func:`register_code` line here (its name, how to build it for n, s, K, the field; whether it is
exact). ``kind="auto"`` is resolved in one place, :func:`resolve_kind`.

>>> code_names()
('plain', 'repetition', 'polynomial', 'approximate')
>>> make_code(10, 0)
PlainAggregation(n=10, s=0, K=10, p=2147483647)
>>> make_code(10, 2)  # groups of 4, 3, 3 silos: never mixes replicas
FractionalRepetitionCode(n=10, s=2, K=10, p=2147483647)
>>> make_code(10, 3, kind="polynomial")
PolynomialCode(n=10, s=3, K=10, p=2147483647)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from coded_fl.codes.approximate import ApproximateCode
from coded_fl.codes.base import GradientCode, check_count
from coded_fl.codes.polynomial import PolynomialCode
from coded_fl.codes.repetition import FractionalRepetitionCode, PlainAggregation
from coded_fl.errors import ConfigurationError
from coded_fl.field import PrimeField

__all__ = [
    "CodeKind",
    "code_names",
    "make_code",
    "prefer_repetition",
    "register_code",
    "resolve_kind",
]

CodeKind = Literal["auto", "plain", "repetition", "polynomial", "approximate"]

#: How a registered code is built: (n, s, num_partitions, field, replication) -> the code.
Builder = Callable[[int, int, "int | None", "PrimeField | None", "int | None"], GradientCode]


@dataclass(frozen=True)
class _Entry:
    build: Builder
    exact: bool


_CODES: dict[str, _Entry] = {}


def register_code(name: str, build: Builder, *, exact: bool = True) -> None:
    """Make a gradient code selectable by ``name`` (``make_code(kind=name)``,
    ``ProtocolConfig(code=name)`` where it is exact).

    Parameters
    ----------
    name
        A new name other than ``"auto"``.
    build
        Called with (n, s, num_partitions, field, replication); returns the code, or raises
        :class:`ConfigurationError` naming the setting that does not fit.
    exact
        Whether its decode is exact (secure aggregation takes only exact codes).

    Raises
    ------
    ConfigurationError
        If the name is empty, ``"auto"`` or taken.
    """
    if not name or name == "auto" or name in _CODES:
        raise ConfigurationError(f"a gradient code needs a new name other than 'auto': {name!r}")
    _CODES[name] = _Entry(build, exact)


def code_names(*, exact: bool = False) -> tuple[str, ...]:
    """The registered codes' names (``"auto"`` besides them picks one).

    Parameters
    ----------
    exact
        Only the exact ones (those secure aggregation takes).

    Returns
    -------
    tuple[str, ...]
    """
    return tuple(name for name, e in _CODES.items() if e.exact or not exact)


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
    kinds = ("auto", *_CODES)
    if kind not in kinds:
        raise ConfigurationError(f"kind={kind!r} is unknown; use one of {', '.join(kinds)}")
    n = check_count("n", n, minimum=1)
    s = check_count("s", s, minimum=0)
    if s >= n:
        raise ConfigurationError(f"s={s} must be < n={n}: at least one reply is needed")
    if replication is not None and kind != "approximate":
        raise ConfigurationError(
            f"replication={replication} is only used by kind='approximate' (got kind={kind!r})"
        )
    name = resolve_kind(kind, n, s, num_partitions)
    return _CODES[name].build(n, s, num_partitions, field, replication)


def resolve_kind(kind: str, n: int, s: int, num_partitions: int | None = None) -> str:
    """The registered code ``kind`` names: itself, or for ``"auto"`` plain aggregation at
    s = 0, else the repetition code where it exists (:func:`prefer_repetition`), else the
    polynomial code. This is the one place that rule is written.

    Parameters
    ----------
    kind
        A registered name or ``"auto"``.
    n
        Silos.
    s
        Stragglers tolerated.
    num_partitions
        K (default n).

    Returns
    -------
    str
    """
    if kind != "auto":
        return kind
    if s == 0:
        return "plain"
    return "repetition" if prefer_repetition(n, s, num_partitions) else "polynomial"


def _plain(n: int, s: int, k: int | None, field: PrimeField | None, _r: int | None) -> GradientCode:
    if s != 0:
        raise ConfigurationError(f"kind='plain' tolerates no straggler: s={s} must be 0")
    return PlainAggregation(n, num_partitions=k, field=field)


def _repetition(
    n: int, s: int, k: int | None, field: PrimeField | None, _r: int | None
) -> GradientCode:
    return FractionalRepetitionCode(n, s, num_partitions=k, field=field)


def _polynomial(
    n: int, s: int, k: int | None, field: PrimeField | None, _r: int | None
) -> GradientCode:
    return PolynomialCode(n, s, num_partitions=k, field=field)


def _approximate(
    n: int, s: int, k: int | None, field: PrimeField | None, replication: int | None
) -> GradientCode:
    if replication is None:
        raise ConfigurationError("kind='approximate' needs replication (copies per partition)")
    return ApproximateCode(n, s, replication=replication, num_partitions=k, field=field)


register_code("plain", _plain)
register_code("repetition", _repetition)
register_code("polynomial", _polynomial)
register_code("approximate", _approximate, exact=False)
