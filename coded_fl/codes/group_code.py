"""The group code: silos in groups of replicas, one reply per group decodes.

:class:`GroupCode` is the common machinery of the repetition codes
(:mod:`coded_fl.codes.repetition`) and of :class:`coded_fl.codes.ApproximateCode`: the group
placement, decoding from each group's smallest surviving id, and the consistency checks that
compare the replicas of a group (:meth:`~GroupCode.comparisons`,
:meth:`~GroupCode.differences`, :meth:`~GroupCode.comparison_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.codes.base import GradientCode
from coded_fl.codes.groups import _even_counts, balanced_groups
from coded_fl.codes.structure import check_count
from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField, as_numpy_u32, typed_list
from coded_fl.kernels import cpu as _cpu

__all__ = ["GroupCode"]


class GroupCode(GradientCode):
    """Silos in ``groups`` balanced groups; group :math:`\\lfloor j g/K \\rfloor` holds partition j.

    The common machinery of :class:`~coded_fl.codes.repetition.FractionalRepetitionCode`,
    :class:`~coded_fl.codes.repetition.PlainAggregation` and
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

        >>> from coded_fl.codes.repetition import FractionalRepetitionCode
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
