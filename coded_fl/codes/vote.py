"""A per-coordinate vote among the replicas of each silo group (the repetition code).

Silos of one group hold the same partitions and train them on their own machines. Their group
sums :math:`G^{(i)}` are equal only where their floats agree: across CPU instruction sets,
thread counts or GPUs they drift apart with training, by a little almost everywhere (measured
by ``python -m simulations.hetero.measure``). A deviating silo's sum may differ by anything.
One rule serves both (``docs/protocol.md``, "Replicas that disagree"):

* The server unmasks, besides the decoded sum :math:`\\sum_q G^{(ref_q)}` (one reference
  reply per group), one comparison per other survivor j of a group:
  :math:`G^{(ref)} - G^{(j)}` (:meth:`coded_fl.codes.GroupCode.comparisons`). Under aligned
  masks the masks cancel in it; with shared masks it is one more weight row.
* Per group and coordinate, the members' values relative to the reference,
  :math:`v_j = G^{(j)} - G^{(ref)}` (:math:`v_{ref} = 0`, centred field elements), are put to a
  vote: the group's value is their **median** (the mean of the two middle values, rounded down,
  for an even count), and the coordinate is **settled** when a strict majority of the group's
  members lie within ``tolerance`` of it.
* A settled coordinate takes the median; a member beyond the tolerance there is **located**
  as off at that coordinate (counted against it, overruled). An unsettled coordinate (no
  majority within the tolerance: two members that differ by more than twice the tolerance, say)
  is **erased**: no update there this round, and every member beyond the tolerance is counted
  in ``unresolved``.

What a deviating member can do (at most T deviating silos, fewer than half of its group's
survivors): nothing beyond the honest members' spread in a group where honest members form a
strict majority (the median lies between honest values); up to ``tolerance`` per coordinate
in a group of two survivors (the mean of two values within twice the tolerance of each other),
or erase coordinates, which is counted and bounded by the caller; anything within the clip
range where it is its group's only survivor (as any FedAvg client can with its own update).
The comparisons reveal the replicas' differences, which the server of an aligned round sees
anyway (the members share a mask).

>>> import torch
>>> from coded_fl.field import PrimeField
>>> F = PrimeField(101)
>>> sums = torch.tensor([[10, 20, 30], [0, 100, 0], [0, 2, 99]], dtype=torch.uint32)
>>> # group 0: reference (position 0) and members 1, 2 (rows 1, 2 are G_ref - G_j)
>>> out = vote_rows(F, sums, [(0, 1), (0, 2)], tolerance=[1], bound=50)
>>> out.value.tolist(), out.disagreeing, out.corrected, out.located  # member 2 is off twice
([10, 20, 30], 2, 2, {2: 2})
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.codes.resolve import Resolution, finish
from coded_fl.errors import InputError
from coded_fl.field import PrimeField

__all__ = ["sparse_comparisons", "vote", "vote_rows"]

#: Coordinates voted on at once (bounds the temporary arrays: members x chunk int64).
_CHUNK = 1 << 18


def _groups(pairs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Reference position -> the rows (1-based, into ``sums``) of its group's comparisons."""
    out: dict[int, list[int]] = {}
    members: set[int] = set()
    for row, (ref, member) in enumerate(pairs, start=1):
        if ref == member or member in members or member in out or ref in members:
            raise InputError(f"comparison {row} ({ref}, {member}) overlaps another group's")
        members.add(member)
        out.setdefault(ref, []).append(row)
    return out


def _median(rel: np.ndarray) -> np.ndarray:
    """Column medians of int64 ``rel`` (m x c); the two middle values' floor mean for even m."""
    m = rel.shape[0]
    srt = np.sort(rel, axis=0)
    if m % 2:
        return srt[m // 2]
    lo, hi = srt[m // 2 - 1], srt[m // 2]
    return lo + (hi - lo) // 2  # no overflow: |values| < p


def vote(
    field: PrimeField,
    total: torch.Tensor,
    diffs: np.ndarray,
    cols: np.ndarray,
    pairs: Sequence[tuple[int, int]],
    *,
    tolerance: Sequence[int],
    bound: int,
    exact: Sequence[int] = (),
) -> Resolution:
    """Decode by a vote of each group's members, coordinate by coordinate.

    Parameters
    ----------
    field
        GF(p).
    total
        ``D`` field elements: the sum of the groups' reference replies (decoded:
        :math:`\\sum_q G^{(ref_q)}`).
    diffs
        ``c x b`` field elements (``int64``): comparison k at the coordinates ``cols``,
        :math:`G^{(ref)} - G^{(j)}` for ``pairs[k]`` (zero at every other coordinate).
    cols
        The b coordinates where some comparison is nonzero, strictly increasing.
    pairs
        (reference position, member position) per comparison (positions in S); the
        comparisons of one group share its reference.
    tolerance
        Per group, in order of first appearance of its reference in ``pairs``: the largest
        distance (in quantized units) from the group's median at which a member still counts as
        agreeing.
    bound
        The largest magnitude of a true sum (K x max|q|): beyond it a coordinate is erased.
    exact
        Coordinates where replicas must agree exactly (tolerance 0 there), e.g. the weight.

    Returns
    -------
    Resolution
        ``disagreeing``: the coordinates ``cols``; ``corrected``: of those, the settled ones
        (taking the median); ``within_tolerance``: of those, the ones where every member is
        within the tolerance; ``located``: position -> settled coordinates where that member
        was beyond the tolerance; ``unresolved``: position -> erased coordinates where it was.

    Raises
    ------
    InputError
        If the shapes, pairs or tolerances disagree, or a tolerance or ``bound`` is negative.
    """
    groups = _groups(pairs)
    tol = [int(t) for t in tolerance]
    cols = np.asarray(cols, dtype=np.int64)
    if total.ndim != 1 or diffs.shape != (len(pairs), cols.size):
        raise InputError(
            f"vote needs a vector total and {len(pairs)} x {cols.size} comparisons, got "
            f"{tuple(total.shape)} and {diffs.shape}"
        )
    if len(tol) != len(groups) or min(tol, default=0) < 0 or bound < 0:
        raise InputError(
            f"vote needs one tolerance >= 0 per group ({len(groups)}) and bound >= 0, got "
            f"{tol} and {bound}"
        )
    p = field.p
    # NumPy, one thread: a pass over d plus work on the disagreeing coordinates only
    value = total.detach().cpu().numpy().astype(np.int64)  # a copy: settled/erased are written
    d = value.shape[0]
    erase = np.zeros(d, dtype=bool)
    located: dict[int, int] = {}
    unresolved: dict[int, int] = {}
    exact_idx = np.asarray(sorted({int(i) for i in exact if 0 <= int(i) < d}), dtype=np.int64)
    all_within = np.ones(cols.size, dtype=bool)
    for (ref, members), t in zip(groups.items(), tol, strict=True):
        positions = [ref] + [pairs[r - 1][1] for r in members]
        need = len(positions) // 2 + 1
        for start in range(0, cols.size, _CHUNK):
            at = cols[start : start + _CHUNK]
            diff = diffs[[r - 1 for r in members], start : start + at.size]  # G_ref - G_j
            rel = np.where(diff > p // 2, p - diff, -diff)  # centred G_j - G_ref
            if not rel.any():
                continue
            rel = np.vstack([np.zeros((1, at.size), dtype=np.int64), rel])
            med = _median(rel)
            limit = np.full(at.size, t, dtype=np.int64)
            if exact_idx.size:
                limit[np.isin(at, exact_idx)] = 0
            off = np.abs(rel - med) > limit
            settled = (len(positions) - off.sum(axis=0)) >= need
            all_within[start : start + at.size] &= ~off.any(axis=0)
            value[at[settled]] = (value[at[settled]] + med[settled]) % p
            erase[at[~settled]] = True
            for pos, row_off in zip(positions, off, strict=True):
                hit = int(np.count_nonzero(row_off & settled))
                if hit:
                    located[pos] = located.get(pos, 0) + hit
                miss = int(np.count_nonzero(row_off & ~settled))
                if miss:
                    unresolved[pos] = unresolved.get(pos, 0) + miss
    return finish(
        value,
        erase,
        cols,
        p=p,
        bound=bound,
        dtype=np.dtype(np.uint32),
        device=total.device,
        located=located,
        within_tolerance=int(np.count_nonzero(all_within)),
        unresolved=unresolved,
    )


def sparse_comparisons(sums: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(diffs, cols) for :func:`vote` from whole rows: ``sums`` is ``(1 + c) x D``, row 0 the
    decoded sum, rows 1.. the comparisons; cols are the coordinates where some comparison is
    nonzero, diffs (``int64``) the comparisons there.

    Parameters
    ----------
    sums
        The unmasked weight rows.

    Returns
    -------
    tuple[numpy.ndarray, numpy.ndarray]
    """
    rows = sums.detach().cpu().numpy()[1:]
    cols = np.flatnonzero(rows.any(axis=0)) if rows.shape[0] else np.empty(0, np.int64)
    return rows[:, cols].astype(np.int64), cols


def vote_rows(
    field: PrimeField,
    sums: torch.Tensor,
    pairs: Sequence[tuple[int, int]],
    *,
    tolerance: Sequence[int],
    bound: int,
    exact: Sequence[int] = (),
) -> Resolution:
    """:func:`vote` from whole rows: ``sums`` is ``(1 + c) x D``, row 0 the decoded reference
    sum, row k the unmasked comparison ``pairs[k - 1]`` (as a secret-shared round recovers
    them; the module's example). Parameters as in :func:`vote`.
    """
    if sums.ndim != 2 or sums.shape[0] != 1 + len(pairs):
        raise InputError(f"vote needs 1 + {len(pairs)} rows of sums, got shape {tuple(sums.shape)}")
    diffs, cols = sparse_comparisons(sums)
    return vote(field, sums[0], diffs, cols, pairs, tolerance=tolerance, bound=bound, exact=exact)
