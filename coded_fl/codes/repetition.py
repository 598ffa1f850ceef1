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

>>> code = FractionalRepetitionCode(6, 2)
>>> code.support(4), len(set(code.coefficients(4).tolist()))  # one scale r_4 for the row
((3, 4, 5), 1)
>>> (code.decoding_vector([5, 0, 1, 4]) != 0).tolist()  # smallest survivor of each group
[False, True, False, True]
>>> FractionalRepetitionCode(7, 2).groups  # 7 silos, s = 2: groups of 4 and 3
((0, 1, 2, 3), (4, 5, 6))

Length: about 180 lines of code; the rest is the documentation of the group layout, the
decoding and the consistency checks, with doctests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.codes.base import GradientCode, check_count
from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField, as_numpy_u32, typed_list
from coded_fl.kernels import cpu as _cpu

__all__ = [
    "FractionalRepetitionCode",
    "GroupCode",
    "PlainAggregation",
    "balanced_groups",
    "spread_partitions",
]


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


def _even_counts(total: int, parts: int) -> list[int]:
    """``total`` over ``parts`` slots as evenly as possible: slot r gets
    :math:`\\lceil (r+1) T / L \\rceil - \\lceil r T / L \\rceil`, i.e. item j goes to slot
    :math:`\\lfloor j L / T \\rfloor`."""
    edges = [-(-r * total // parts) for r in range(parts + 1)]
    return [edges[r + 1] - edges[r] for r in range(parts)]


def spread_partitions(sizes: Sequence[int], num_partitions: int) -> list[int]:
    """How many of K partitions each silo group holds, for the least storage (the repetition
    code's choice).

    Every member of group q holds all :math:`K_q` partitions of its group, so silo storage is
    :math:`K_q` and the total number of copies is :math:`\\sum_q |G_q| K_q`. The counts are
    chosen in this order of priority:

    1. the maximum storage :math:`\\max_q K_q` is :math:`c = \\lceil K / g \\rceil`, the least
       possible (the g counts sum to K);
    2. every group holds at least one partition (every silo trains on data), and subject to
       1. the total :math:`\\sum_q |G_q| K_q` (n times the mean storage) is the least possible:
       each group starts with one partition and the rest fill the smallest groups first, up to
       c each (a linear cost under box constraints: moving a partition from a larger group to a
       smaller one with room never raises it, so the greedy fill is optimal);
    3. within groups of one size the counts are as even as possible; with all sizes equal this
       is exactly partition j in group :math:`\\lfloor j g / K \\rfloor`.

    >>> spread_partitions([3, 2, 2], 7)  # n = 7, s = 1: max 3 partitions, 15 copies
    [1, 3, 3]
    >>> spread_partitions([2, 2, 2], 7)  # equal groups: as even as possible
    [3, 2, 2]

    Parameters
    ----------
    sizes
        :math:`|G_q|`, the silos of each group (each >= 1).
    num_partitions
        K, at least the number of groups.

    Returns
    -------
    list[int]
        :math:`K_q` for each group, in the order of ``sizes``; they sum to K.

    Raises
    ------
    ConfigurationError
        If there are no groups, a size is below 1, or K is below the number of groups.
    """
    sizes = [check_count("group size", m, minimum=1) for m in sizes]
    g = len(sizes)
    if g < 1:
        raise ConfigurationError("spread_partitions needs at least one group (sizes is empty)")
    K = check_count("num_partitions", num_partitions, minimum=1)
    if g > K:
        raise ConfigurationError(
            f"num_partitions={K} is fewer than the {g} silo groups: some silos would hold no "
            f"data; use num_partitions >= {g}"
        )
    cap = -(-K // g)
    counts = [0] * g
    left = K
    for size in sorted(set(sizes)):
        members = [q for q in range(g) if sizes[q] == size]
        later = sum(1 for m in sizes if m > size)  # each larger group still needs one
        take = min(len(members) * cap, left - later)
        for q, c in zip(members, _even_counts(take, len(members)), strict=True):
            counts[q] = c
        left -= take
    return counts


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
        """The index of the group silo ``silo`` belongs to.

        Parameters
        ----------
        silo
            The silo's index.

        Returns
        -------
        int
        """
        return (self._silo(silo) * self._num_groups) // self.n

    def _place(self) -> Sequence[Sequence[int]]:
        g, K = self._num_groups, self.K
        if g > K:
            raise ConfigurationError(
                f"num_partitions={K} is fewer than the {g} silo groups (n={self.n}, s={self.s}): "
                f"some silos would hold no data; use num_partitions >= {g}"
            )
        self._groups = tuple(tuple(grp) for grp in balanced_groups(self.n, g))
        holders: list[tuple[int, ...]] = []
        for grp, count in zip(self._groups, self._partition_counts(), strict=True):
            holders += [grp] * count  # consecutive partitions per group, in group order
        return holders

    def _partition_counts(self) -> list[int]:
        """Partitions per group, summing to K, in group order (consecutive partition ids);
        here as even as possible: partition j in group :math:`\\lfloor j g / K \\rfloor`."""
        return _even_counts(self.K, self._num_groups)

    def _scales(self) -> np.ndarray:
        """Silo -> the nonzero coefficient of its reply (every coefficient of its row); 1 here."""
        return np.ones(self.n, dtype=np.int64)

    def _build_matrix(self) -> np.ndarray:
        b = np.zeros((self.n, self.K), dtype=np.int64)
        r = self._row_scale = self._scales()  # once: decoding and the checks read it
        for j, hs in enumerate(self._holders):
            b[list(hs), j] = r[list(hs)]
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
        r = self._row_scale
        seen: set[int] = set()
        for k, i in enumerate(survivors):  # sorted: the first of a group is its smallest id
            q = self.group_of(i)
            if q not in seen:
                seen.add(q)
                a[k] = pow(int(r[i]), -1, self.field.p)
        return a

    def _lost_hint(self) -> str:
        return ""

    def partitions_of_group(self, group: int) -> int:
        """How many partitions the members of ``group`` hold (:math:`K_q`).

        Parameters
        ----------
        group
            The group's index.

        Returns
        -------
        int
        """
        first = self._groups[group][0]
        return len(self.support(first))

    def comparisons(self, survivors: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """Every survivor compared with its group's reference: (reference, member) positions.

        The reference of a group is its smallest surviving id, the reply the decoding vector
        reads. Each other survivor of the group gives one comparison; the order is canonical
        (the second survivor of every group in group order, then every group's third, ...),
        so a prefix compares as many groups as possible. The comparison row
        :math:`r_{ref}^{-1} e_{ref} - r_j^{-1} e_j` is a parity check of the code on S
        (:meth:`comparison_rows`), and unmasking it gives the difference of the two replicas'
        group sums, :math:`G_{ref} - G_j`.

        Parameters
        ----------
        survivors
            S, distinct silo ids (any order; positions refer to it).

        Returns
        -------
        tuple[tuple[int, int], ...]
            (reference position, member position) pairs, |S| - (groups in S) of them.

        >>> FractionalRepetitionCode(6, 1).comparisons([0, 1, 2, 3, 4, 5])  # groups of 2
        ((0, 1), (2, 3), (4, 5))
        >>> FractionalRepetitionCode(7, 2).comparisons([6, 0, 1, 2, 5])  # groups of 4 and 3
        ((1, 2), (4, 0), (1, 3))
        """
        ids = self._distinct(survivors)
        ref: dict[int, int] = {}
        rank: dict[int, int] = {}
        keyed: list[tuple[int, int, int, int]] = []
        for k in sorted(range(len(ids)), key=lambda k: ids[k]):
            q = self.group_of(ids[k])
            if q not in ref:
                ref[q], rank[q] = k, 0
                continue
            rank[q] += 1
            keyed.append((rank[q], q, ref[q], k))
        return tuple((r, k) for _, _, r, k in sorted(keyed))

    def differences(
        self,
        survivors: Sequence[int],
        pairs: Sequence[tuple[int, int]],
        replies: Sequence[torch.Tensor],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The comparisons of ``pairs`` where they are nonzero, without forming them.

        Member j's reply is :math:`r_j (G^{(j)} + \\zeta)`: it agrees with the reference's
        exactly where :math:`y_j = (r_j / r_{ref}) y_{ref}`, which one fused pass over the
        replies checks (:func:`coded_fl.kernels.cpu.disagreements`); only the coordinates that
        differ are then compared, :math:`r_{ref}^{-1} y_{ref} - r_j^{-1} y_j`. Under aligned
        masks the group mask :math:`\\zeta` cancels in it.

        Parameters
        ----------
        survivors
            S (positions refer to it).
        pairs
            (reference position, member position) pairs, as from :meth:`comparisons`.
        replies
            The survivors' replies, aligned with S (canonical ``uint32``, one shape).

        Returns
        -------
        tuple[numpy.ndarray, numpy.ndarray]
            ``len(pairs) x b`` ``int64`` field elements (the comparisons at those coordinates)
            and the b coordinates where some comparison is nonzero (increasing).
        """
        ids = self._distinct(survivors)
        p, r = self.field.p, self._row_scale
        inv = [pow(int(r[i]), -1, p) for i in ids]
        flat = [v.reshape(-1) for v in replies]
        if not pairs:
            return np.zeros((0, 0), dtype=np.int64), np.empty(0, dtype=np.int64)
        if flat[0].device.type == "cpu":
            refs = np.array([a for a, _ in pairs], dtype=np.int64)
            members = np.array([b for _, b in pairs], dtype=np.int64)
            coeffs = np.array([int(r[ids[b]]) * inv[a] % p for a, b in pairs], dtype=np.int64)
            mask = np.empty(flat[0].numel(), dtype=np.uint8)
            vs = typed_list([as_numpy_u32(v) for v in flat])
            marked = _cpu.disagreements(vs, refs, members, coeffs, mask, p)
            cols = np.flatnonzero(mask) if marked else np.empty(0, dtype=np.int64)
        else:  # other devices: form the comparisons, keep where they are nonzero
            rows = [self.field.lincomb([inv[a], p - inv[b]], [flat[a], flat[b]]) for a, b in pairs]
            cols = torch.nonzero(torch.stack(rows).ne(0).any(0)).flatten().cpu().numpy()
        at = torch.from_numpy(cols)
        diffs = np.empty((len(pairs), cols.size), dtype=np.int64)
        for k, (a, b) in enumerate(pairs):  # < 2^31 each: the products fit in int64
            ya = flat[a][at.to(flat[a].device)].cpu().numpy().astype(np.int64)
            yb = flat[b][at.to(flat[b].device)].cpu().numpy().astype(np.int64)
            diffs[k] = (ya * inv[a] - yb * inv[b]) % p
        return diffs, cols

    def comparison_rows(
        self, survivors: Sequence[int], pairs: Sequence[tuple[int, int]]
    ) -> np.ndarray:
        """The parity-check rows of ``pairs`` (from :meth:`comparisons`), aligned with S.

        Parameters
        ----------
        survivors
            S, as given to :meth:`comparisons`.
        pairs
            (reference position, member position) pairs.

        Returns
        -------
        numpy.ndarray
            ``len(pairs) x |S|`` canonical ``int64``: :math:`r_{ref}^{-1}` at the reference,
            :math:`-r_j^{-1}` at the member, 0 elsewhere.
        """
        ids = self._distinct(survivors)
        p, r = self.field.p, self._row_scale
        rows = np.zeros((len(pairs), len(ids)), dtype=np.int64)
        for row, (a, b) in zip(rows, pairs, strict=True):
            if self.group_of(ids[a]) != self.group_of(ids[b]) or a == b:
                raise InputError(f"positions {a} and {b} are not two members of one group")
            row[a] = pow(int(r[ids[a]]), -1, p)
            row[b] = (p - pow(int(r[ids[b]]), -1, p)) % p
        return rows

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
        r = self._row_scale
        if bool((r != 1).any()):  # compare the sums the replies scale: r_i^-1 y_i
            p = self.field.p
            vectors = [
                v if r[i] == 1 else self.field.lincomb([pow(int(r[i]), -1, p)], [v])
                for i, v in zip(ids, vectors, strict=True)
            ]
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
