"""Repetition codes: silos in groups, every member of a group holds the group's partitions.

Silo i replies with the sum of its group's partitions times a public pseudo-random nonzero
scale r_i (1 for plain aggregation). One reply per group gives the exact total, so decoding
reads only one vector per group and multiplies it by r_i^-1: one scalar multiply per group.
The scale costs nothing in the encode (a coefficient like any other) and makes an error in one
reply reach the sum as a random-looking field element, which the range check refuses with
probability 1 - 2^-headroom_bits; with coefficients 1 a small error (a flipped low bit) would
be a plausible sum.

**Fractional repetition** (Tandon et al., ICML 2017, there for :math:`(s+1) \\mid n`; here
any :math:`n > s`): :math:`g = \\lfloor n/(s+1) \\rfloor` groups of at least :math:`s + 1`
consecutive silos, the K partitions in consecutive blocks per group
(:func:`spread_partitions`). *Guarantee:* s stragglers cannot silence a whole group of
:math:`s + 1` or more, so any :math:`n - s` replies hold one per group, and the decoded sum is
always one replica's sum per group (replicas are never mixed). Storage
:math:`\\lceil K / g \\rceil`, the least of any group code; it is the lower bound
:math:`\\lceil K (s+1) / n \\rceil` when :math:`(s+1) \\mid n`, and below twice s + 1 otherwise
(figures in :class:`FractionalRepetitionCode`). With more replies than groups the decoding
vector takes the smallest surviving id of each group.

**Plain aggregation** is the case s = 0: groups of one, every silo its own partitions, a = 1.

**Consistency.** Replicas of a group must send identical vectors. A corrupted reply is detected
exactly when its group has another survivor with a different reply; it is located when the
replies of its group that agree with each other form a strict majority there (one corrupted
reply needs two honest ones beside it). Otherwise the whole group is named as suspects.

The group layout is in :mod:`coded_fl.codes.groups`, the machinery common to the group codes
(decoding, the replicas' comparisons) in :class:`~coded_fl.codes.group_code.GroupCode`.

>>> code = FractionalRepetitionCode(6, 2)
>>> code.support(4), len(set(code.coefficients(4).tolist()))  # one scale r_4 for the row
((3, 4, 5), 1)
>>> (code.decoding_vector([5, 0, 1, 4]) != 0).tolist()  # smallest survivor of each group
[False, True, False, True]
>>> FractionalRepetitionCode(7, 2).groups  # 7 silos, s = 2: groups of 4 and 3
((0, 1, 2, 3), (4, 5, 6))
"""

from __future__ import annotations

import hashlib

import numpy as np

from coded_fl.codes.group_code import GroupCode
from coded_fl.codes.groups import balanced_groups, spread_partitions
from coded_fl.codes.structure import check_count
from coded_fl.field import PrimeField

__all__ = [
    "FractionalRepetitionCode",
    "GroupCode",
    "PlainAggregation",
    "balanced_groups",
    "spread_partitions",
]


class FractionalRepetitionCode(GroupCode):
    """Fractional repetition for any :math:`n \\ge s + 1`: one scale per silo, exact for any
    :math:`n - s` replies, decoded from one reply per group, never mixing replicas (see the
    module documentation).

    **Groups.** :math:`g = \\lfloor n/(s+1) \\rfloor` groups of consecutive silos
    (:func:`balanced_groups`), sizes :math:`\\lfloor n/g \\rfloor \\ge s+1` or one more.
    Any s stragglers leave at least one survivor in every group.

    **Partitions** (:func:`spread_partitions`): the K partitions go to the groups in
    consecutive blocks of :math:`K_q` with :math:`\\max_q K_q = \\lceil K/g \\rceil`, each
    group at least one, the rest filling the smallest groups first (least total copies).
    When :math:`(s+1) \\mid n` the groups are equal and partition j is in group
    :math:`\\lfloor j g / K \\rfloor`, as in Tandon et al.

    **Storage.** The busiest silo holds :math:`\\lceil K/g \\rceil` partitions. That is the
    least of any group code (silos split into groups whose members hold the same partitions,
    as needed to never mix replicas): a group holding data needs at least s + 1 members, so at
    most g groups hold the K partitions. It is the lower bound
    :math:`\\lceil K(s+1)/n \\rceil` of any exact code when :math:`(s+1) \\mid n`, and at
    most :math:`2s+1` (K = n) otherwise, below twice s + 1. Measured for K = n, n = 2..100,
    s = 1..n-1 (4,950 settings; busiest silo and mean over silos, divided by s + 1):

    ==========================  ========  ===================  ===================
    settings                    count     max / (s+1)          mean / (s+1)
                                          average, worst       average, worst
    ==========================  ========  ===================  ===================
    all                         4,950     1.28, 1.98           1.25, 1.98
    :math:`(s+1) \\mid n`        382       1, 1                 1, 1
    g >= 2 (s + 1 <= n/2)       2,401     1.17, 1.50           1.12, 1.49
    g >= 10                     369       1.18, 1.50           1.01, 1.09
    g = 1 (s + 1 > n/2)         2,549     1.37, 1.98           1.37, 1.98
    ==========================  ========  ===================  ===================

    The worst case is n = 99, s = 49: one group, every silo holds all 99 partitions against
    50. Of the 4,950 settings the busiest silo holds exactly s + 1 in 382 (those with
    :math:`(s+1) \\mid n`), at most 1.25 (s+1) in 2,933, at most 1.5 (s+1) in 4,150.

    Parameters
    ----------
    n
        Silos, at least s + 1.
    s
        Stragglers tolerated.
    num_partitions
        K (default n), at least g.
    field
        GF(p) (default :math:`p = 2^{31} - 1`).

    Raises
    ------
    ConfigurationError
        If K is below the number of groups g, or n, s are out of range.
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
        groups = n // (s + 1) if s < n else 1  # invalid settings are refused by the base
        super().__init__(n, s, groups=groups, num_partitions=num_partitions, field=field)

    def _partition_counts(self) -> list[int]:
        return spread_partitions([len(grp) for grp in self._groups], self.K)

    def _scales(self) -> np.ndarray:
        """Silo i scales its reply by a public pseudo-random nonzero r_i (s >= 1), and the
        decoding vector reads r_i^-1 of it. Replicas are still never mixed, and an error in
        one reply (a flipped bit, a tampered value) reaches the sum multiplied by r_i^-1: a
        random-looking field element that the range check refuses with probability
        1 - 2^-headroom_bits, as with the polynomial code, where with coefficients 1 a small
        error would be a plausible value. s = 0 (plain aggregation) keeps coefficients 1."""
        if self.s == 0:
            return super()._scales()
        p = self.field.p
        out = np.empty(self.n, dtype=np.int64)
        for i in range(self.n):
            h = hashlib.sha256(f"codedfl-repetition-scale/{p}/{self.n}/{i}".encode()).digest()
            out[i] = 1 + int.from_bytes(h[:8], "little") % (p - 1)
        return out


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
