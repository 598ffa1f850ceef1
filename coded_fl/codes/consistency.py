"""Checking replies against each other when more arrived than decoding needs.

Honest replies of the silos in S are :math:`Y = B_S G` (row i is silo i's reply, G stacks the K
partition vectors), so every column of Y lies in the column space of :math:`B_S`. A basis
:math:`H` (``e x |S|``) of the left null space of :math:`B_S` gives ``e`` parity checks:
:math:`H Y = 0` for honest replies, whatever G is. Replies :math:`Y + E` with an error E pass
all checks exactly when every column of E lies in the column space of :math:`B_S`; that is the
only thing a linear check can ever miss, so this is the strongest one.

**Locating.** When :math:`\\Sigma = H(Y + E) = H E \\ne 0`, the silos whose replies are wrong are
sought as the smallest set T with :math:`\\Sigma` in the column space of :math:`H_T`: then some
:math:`E'` supported on T has :math:`H E' = \\Sigma`, i.e. the replies of :math:`S \\setminus T`
are consistent. If two sets T, T' explain :math:`\\Sigma`, then :math:`E - E'` (support within
:math:`T \\cup T'`) lies in the column space of :math:`B_S`; when every nonzero vector there has
weight above :math:`|T| + |T'|` (true for the polynomial code whenever
:math:`2|T| \\le |S| - (n - s)`), :math:`E = E'` and T is exactly the set of corrupted replies.
The search works on a few syndrome columns, then verifies a candidate on all d columns; a
column that refutes every candidate joins the search. Sets of up to ``e // 2`` silos are tried
while the number of candidates stays below ``max_candidates``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import torch

from coded_fl.errors import DecodingError
from coded_fl.field import PrimeField, as_numpy_u32
from coded_fl.kernels import cpu as _cpu
from coded_fl.linalg import batch_inverse, left_null_space, mat_mul

__all__ = ["Location", "check_replies", "locate"]

#: Candidate sets of suspects tried per size before giving up on locating (detection is exact).
MAX_CANDIDATES = 20_000


def _syndromes(
    field: PrimeField, h: np.ndarray, vectors: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """The rows of :math:`H Y`; one fused pass per check, inputs validated (< p)."""
    return [field.lincomb(row, vectors, validate=True).reshape(-1) for row in h]


def _is_zero(x: torch.Tensor) -> bool:
    if x.device.type == "cpu":
        return int(_cpu.max_element(as_numpy_u32(x))) == 0
    return not bool(x.any())


def _singletons(h: np.ndarray, sigma: np.ndarray, p: int) -> list[tuple[int, ...]]:
    """Every i with :math:`\\Sigma = h_i x^T` for some x (vectorised over i)."""
    nonzero = h != 0
    usable = np.flatnonzero(nonzero.any(axis=0))
    if usable.size == 0:
        return []
    hu = h[:, usable]
    pivot = np.argmax(nonzero[:, usable], axis=0)  # first nonzero row of each column
    inv = batch_inverse(hu[pivot, np.arange(usable.size)], p)
    x = sigma[pivot] * inv[:, None] % p  # (u, c): the error value each candidate would need
    fits = (hu.T[:, :, None] * x[:, None, :] % p == sigma[None, :, :]).all(axis=(1, 2))
    return [(int(usable[i]),) for i in np.flatnonzero(fits)]


def _explained(h_t: np.ndarray, sigma: np.ndarray, p: int) -> bool:
    w = left_null_space(h_t, p)
    return w.shape[0] == 0 or not np.any(mat_mul(w, sigma, p))


def _minimal_sets(
    h: np.ndarray, sigma: np.ndarray, p: int, t_max: int, max_candidates: int
) -> list[tuple[int, ...]] | None:
    """All smallest T (|T| <= t_max) that explain ``sigma``; [] if none, None if too many."""
    m = h.shape[1]
    for t in range(1, t_max + 1):
        if t == 1:
            found = _singletons(h, sigma, p)
        else:
            if math.comb(m, t) > max_candidates:
                return None
            found = [T for T in combinations(range(m), t) if _explained(h[:, T], sigma, p)]
        if found:
            return found
    return []


def _first_refuting_column(
    field: PrimeField, h: np.ndarray, subset: tuple[int, ...], syn: torch.Tensor
) -> int | None:
    """None if every column of ``syn`` is in the span of :math:`H_T`, else the first one not."""
    w = left_null_space(h[:, list(subset)], field.p)
    rows = list(syn)
    for row in w:
        bad = torch.nonzero(field.lincomb(row, rows) != 0)
        if bad.numel():
            return int(bad[0, 0])
    return None


@dataclass(frozen=True)
class Location:
    """What :func:`locate` found out about failed parity checks.

    Attributes
    ----------
    sets
        Every smallest set T of reply positions (columns of the checks, in increasing order)
        that explains all the syndromes; one set means the corrupted replies are located, several
        that they cannot be told apart, none that no set of at most ``radius`` replies explains
        them. ``((),)`` when every check passed.
    why
        With no set: why (empty when the search ran out of refuting columns).
    """

    sets: tuple[tuple[int, ...], ...]
    why: str = ""


def locate(
    field: PrimeField,
    checks: np.ndarray,
    syndromes: torch.Tensor,
    *,
    radius: int | None = None,
    max_candidates: int = MAX_CANDIDATES,
) -> Location:
    """Find the smallest sets of replies whose errors explain the failed parity checks.

    T explains the syndromes :math:`\\Sigma = H (Y + E)` when every column of :math:`\\Sigma`
    lies in the column space of :math:`H_T` (see the module documentation for when that locates
    the corrupted replies uniquely). Works on the syndromes only, so a caller that holds
    :math:`\\Sigma` but not the replies (the secure-aggregation server unmasks the check rows'
    sums, never a reply) can locate too.

    Parameters
    ----------
    field
        GF(p).
    checks
        H, ``e x |S|`` canonical ``int64``, the parity checks that were applied.
    syndromes
        :math:`\\Sigma = H Y`, ``e x d`` field elements (any device).
    radius
        The most corrupted replies the caller's code locates uniquely; sets of up to
        ``min(radius, e // 2)`` replies are tried (default ``e // 2``). With ``radius=1``
        at most one reply is ever named, and none when ``e < 2``.
    max_candidates
        Give up when a size has more candidate sets than this.

    Returns
    -------
    Location
        The smallest explaining sets, as positions in 0..|S|-1.

    >>> import torch
    >>> from coded_fl.field import PrimeField
    >>> F, h = PrimeField(101), np.array([[1, 1, 1, 1], [1, 2, 3, 4]])  # h^T B = 0 for some B
    >>> locate(F, h, torch.tensor([[5, 7], [15, 21]], dtype=torch.uint32))  # error at position 2
    Location(sets=((2,),), why='')
    """
    e = checks.shape[0]
    bad_cols = torch.nonzero((syndromes != 0).any(dim=0)).flatten()
    if bad_cols.numel() == 0:
        return Location(sets=((),))
    p = field.p
    t_max = e // 2 if radius is None else min(radius, e // 2)
    cols = [int(bad_cols[0])]
    for _ in range(2 * t_max + 4):
        sigma = syndromes[:, cols].to(torch.int64).cpu().numpy()
        cands = _minimal_sets(checks, sigma, p, t_max, max_candidates)
        if not cands:
            if cands is None:
                why = "too many candidate sets"
            elif t_max == 0:
                why = "locating needs two extra replies per corrupted one"
            else:
                why = f"more than {t_max} disagree"
            return Location(sets=(), why=why)
        refuting = [_first_refuting_column(field, checks, T, syndromes) for T in cands]
        passing = [T for T, col in zip(cands, refuting, strict=True) if col is None]
        if passing:
            return Location(sets=tuple(passing))
        col = refuting[0]
        if col is None or col in cols:  # pragma: no cover - a refuting column is always new
            break
        cols.append(col)
    return Location(sets=())


def check_replies(
    field: PrimeField,
    checks: np.ndarray,
    ids: Sequence[int],
    vectors: Sequence[torch.Tensor],
    *,
    radius: int | None = None,
    max_candidates: int = MAX_CANDIDATES,
) -> int:
    """Apply the parity checks ``checks`` to the replies; raise if any fails.

    Parameters
    ----------
    field
        GF(p).
    checks
        H, ``e x |S|`` canonical ``int64``, aligned with ``ids``.
    ids
        The silos whose replies these are.
    vectors
        Their replies, one field vector each (validated: elements < p).
    radius, max_candidates
        As in :func:`locate`.

    Returns
    -------
    int
        ``e``, the number of independent checks applied (0: nothing could be checked).

    Raises
    ------
    DecodingError
        If a check fails. Its ``suspects`` are the silos located as corrupted (all candidates'
        union when several sets explain the failure equally well; empty when no set of at most
        ``radius`` silos does). Larger sets than ``radius`` are never named.
    InputError
        If a reply holds an element >= p.
    """
    e = checks.shape[0]
    if e == 0:
        return 0
    rows = _syndromes(field, checks, vectors)
    if all(_is_zero(row) for row in rows):  # the honest case: no second pass
        return e
    found = locate(field, checks, torch.stack(rows), radius=radius, max_candidates=max_candidates)
    if len(found.sets) == 1:
        suspects = tuple(ids[i] for i in found.sets[0])
        raise DecodingError(
            f"replies are inconsistent: silo(s) {list(suspects)} disagree with the other "
            f"{len(ids) - len(suspects)} replies (located with {e} parity check(s)); "
            "the aggregate was not formed",
            suspects=suspects,
        )
    if found.sets:
        suspects = tuple(sorted({ids[i] for T in found.sets for i in T}))
        options = [sorted(ids[i] for i in T) for T in found.sets]
        raise DecodingError(
            f"replies are inconsistent; any one of {options} could be the corrupted set "
            f"(more replies would tell them apart); suspects {list(suspects)}; "
            "the aggregate was not formed",
            suspects=suspects,
        )
    if found.why:
        raise DecodingError(
            f"replies are inconsistent ({e} parity check(s) fail) and the corrupted ones "
            f"cannot be located ({found.why}); the aggregate was not formed"
        )
    raise DecodingError(
        f"replies are inconsistent ({e} parity check(s) fail) and the corrupted ones could not "
        "be located; the aggregate was not formed"
    )
