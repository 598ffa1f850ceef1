"""Repetition codes: silos in groups, every member of a group holds the group's partitions.

Silo i replies with the plain sum of its group's partitions (0/1 coefficients). One reply per
group gives the exact total, so decoding reads only one vector per group and multiplies by 1:
the cheapest decode there is.

**Fractional repetition** (Tandon et al., ICML 2017): :math:`(s+1) \\mid n`, groups of
:math:`s + 1` consecutive silos, partition j in group :math:`\\lfloor j g / K \\rfloor` of
:math:`g = n / (s+1)`. *Guarantee:* s stragglers cannot silence a whole group of
:math:`s + 1`, so any :math:`n - s` replies hold one per group. Storage
:math:`\\lceil K / g \\rceil = \\lceil K (s+1) / n \\rceil`, the lower bound. With more replies
than groups the decoding vector takes the smallest surviving id of each group.

**Plain aggregation** is the case s = 0: groups of one, every silo its own partitions, a = 1.

**Consistency.** Replicas of a group must send identical vectors. A corrupted reply is detected
exactly when its group has another survivor with a different reply; it is located when the
replies of its group that agree with each other form a strict majority there (one corrupted
reply needs two honest ones beside it). Otherwise the whole group is named as suspects.

>>> code = FractionalRepetitionCode(6, 2)
>>> code.support(4), code.coefficients(4).tolist()
((3, 4, 5), [1, 1, 1])
>>> code.decoding_vector([5, 0, 1, 4]).tolist()  # smallest survivor of each group
[0, 1, 0, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.codes.base import GradientCode, check_count
from coded_fl.errors import ConfigurationError, DecodingError
from coded_fl.field import PrimeField

__all__ = ["FractionalRepetitionCode", "GroupCode", "PlainAggregation", "balanced_groups"]


def balanced_groups(n: int, g: int) -> list[list[int]]:
    """n silos in g groups of consecutive ids, sizes :math:`\\lfloor n/g \\rfloor` or
    :math:`\\lceil n/g \\rceil`: silo i is in group :math:`\\lfloor i g / n \\rfloor`.

    >>> balanced_groups(7, 3)
    [[0, 1, 2], [3, 4], [5, 6]]

    Parameters
    ----------
    n
        Silos.
    g
        Groups, :math:`1 \\le g \\le n`.

    Returns
    -------
    list[list[int]]
        The silos of each group.
    """
    groups: list[list[int]] = [[] for _ in range(g)]
    for i in range(n):
        groups[(i * g) // n].append(i)
    return groups


class GroupCode(GradientCode):
    """Silos in ``groups`` balanced groups; group :math:`\\lfloor j g/K \\rfloor` holds partition j.

    The common machinery of :class:`FractionalRepetitionCode`, :class:`PlainAggregation` and
    :class:`coded_fl.codes.ApproximateCode`; subclasses choose the number of groups.

    Parameters
    ----------
    n
        Silos.
    s
        Stragglers tolerated.
    groups
        g, the number of groups (:func:`balanced_groups`).
    num_partitions
        K (default n).
    field
        GF(p) (default :math:`p = 2^{31} - 1`).

    Raises
    ------
    ConfigurationError
        If the sizes are out of range.
    """

    kind = "group"

    def __init__(
        self,
        n: int,
        s: int,
        *,
        groups: int,
        num_partitions: int | None = None,
        field: PrimeField | None = None,
    ) -> None:
        self._num_groups = check_count("groups", groups, minimum=1)
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and groups > n:
            raise ConfigurationError(
                f"groups={groups} exceeds the n={n} silos: some groups would be empty"
            )
        super().__init__(n, s, num_partitions=num_partitions, field=field)

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The silo groups (consecutive ids)."""
        return self._groups

    def group_of(self, silo: int) -> int:
        """The index of the group silo ``silo`` belongs to."""
        return (self._silo(silo) * self._num_groups) // self.n

    def _place(self) -> Sequence[Sequence[int]]:
        g, K = self._num_groups, self.K
        if g > K:
            raise ConfigurationError(
                f"num_partitions={K} is fewer than the {g} silo groups (n={self.n}, s={self.s}): "
                f"some silos would hold no data; use num_partitions >= {g}"
            )
        self._groups = tuple(tuple(grp) for grp in balanced_groups(self.n, g))
        return [self._groups[(j * g) // K] for j in range(K)]

    def _build_matrix(self) -> np.ndarray:
        b = np.zeros((self.n, self.K), dtype=np.int64)
        for j, hs in enumerate(self._holders):
            b[list(hs), j] = 1
        return b

    def _lost_groups(self, survivors: Sequence[int]) -> list[int]:
        alive = {self.group_of(i) for i in survivors}
        return [q for q in range(self._num_groups) if q not in alive]

    def _solve(self, survivors: tuple[int, ...]) -> np.ndarray:
        lost = self._lost_groups(survivors)
        if lost:
            missing = [j for j, hs in enumerate(self._holders) if self.group_of(hs[0]) in lost]
            raise DecodingError(
                f"no reply from any holder of partition(s) {missing} (silo groups "
                f"{[list(self._groups[q]) for q in lost]}): the exact sum cannot be formed"
                + self._lost_hint()
            )
        a = np.zeros(len(survivors), dtype=np.int64)
        seen: set[int] = set()
        for k, i in enumerate(survivors):  # sorted: the first of a group is its smallest id
            q = self.group_of(i)
            if q not in seen:
                seen.add(q)
                a[k] = 1
        return a

    def _lost_hint(self) -> str:
        return ""

    def _check(self, ids: tuple[int, ...], vectors: list[torch.Tensor]) -> int:
        """Compare the replies within each group; return the number of equalities checked.

        Raises :class:`DecodingError` naming as suspects, in each group whose replies differ,
        those outside the strict majority of identical replies (else the whole group). Replicas
        are compared bit for bit and not range-checked here: :meth:`decode` validates the reply
        it reads from each group, which the others then equal. A group with one survivor is
        not read at all (plain aggregation pays nothing for the check).
        """
        by_group: dict[int, list[int]] = {}
        for k, i in enumerate(ids):
            by_group.setdefault(self.group_of(i), []).append(k)
        suspects: list[int] = []
        checked = 0
        for members in by_group.values():
            classes: list[list[int]] = []
            for k in members:
                for cls in classes:
                    if torch.equal(vectors[cls[0]], vectors[k]):
                        cls.append(k)
                        break
                else:
                    classes.append([k])
            checked += len(members) - 1
            if len(classes) == 1:
                continue
            sizes = sorted((len(c) for c in classes), reverse=True)
            if sizes[0] > sizes[1] and 2 * sizes[0] > len(members):
                honest = max(classes, key=len)
                suspects += [ids[k] for k in members if k not in honest]
            else:
                suspects += [ids[k] for k in members]
        if suspects:
            raise DecodingError(
                f"replicas disagree: silo(s) {sorted(suspects)} sent replies that differ from "
                "their group's (a whole group is named when no strict majority agrees); "
                "the aggregate was not formed",
                suspects=tuple(sorted(suspects)),
            )
        return checked


class FractionalRepetitionCode(GroupCode):
    """Fractional repetition: needs :math:`(s+1) \\mid n`; 0/1 coefficients; exact for any
    :math:`n - s` replies, decoded from one reply per group (see the module documentation).

    Parameters
    ----------
    n
        Silos, a multiple of s + 1.
    s
        Stragglers tolerated.
    num_partitions
        K (default n).
    field
        GF(p) (default :math:`p = 2^{31} - 1`).

    Raises
    ------
    ConfigurationError
        If s + 1 does not divide n.
    """

    kind = "repetition"

    def __init__(
        self,
        n: int,
        s: int,
        *,
        num_partitions: int | None = None,
        field: PrimeField | None = None,
    ) -> None:
        n, s = check_count("n", n, minimum=1), check_count("s", s, minimum=0)
        valid = s < n  # numpy integers count as ints (np.int64(6) built a one-group code)
        if valid and n % (s + 1):
            raise ConfigurationError(
                f"fractional repetition needs s+1 to divide n: s+1={s + 1} does not divide "
                f"n={n}; use kind='polynomial' (any n and s) or change s"
            )
        groups = n // (s + 1) if valid else 1  # invalid settings are refused by the base
        super().__init__(n, s, groups=groups, num_partitions=num_partitions, field=field)


class PlainAggregation(FractionalRepetitionCode):
    """s = 0: every silo sends the sum of its own partitions (K = n: its one partition) with
    coefficient 1 and the server adds all n replies. The uncoded run on the same code path.

    Parameters
    ----------
    n
        Silos.
    num_partitions
        K (default n).
    field
        GF(p) (default :math:`p = 2^{31} - 1`).
    """

    kind = "plain"

    def __init__(
        self, n: int, *, num_partitions: int | None = None, field: PrimeField | None = None
    ) -> None:
        super().__init__(n, 0, num_partitions=num_partitions, field=field)
