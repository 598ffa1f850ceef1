"""Decoding coordinate by coordinate when replicas of a partition are not bit-identical.

Silos on different machines (CPU instruction sets, thread counts, GPU vs CPU) train the same
partition to floats that differ in the last bits, and a few coordinates then quantize to
different field elements. A code that mixes replicas (the polynomial code) turns such a
coordinate of the decoded sum into an arbitrary field element; every other coordinate stays
exact. So the round is decoded per coordinate, never as a whole:

* **Parity checks** (extra uploads, ``e`` rows :math:`H` with :math:`H B_S = 0`): a coordinate
  whose syndrome :math:`\\sigma = H y` is nonzero *disagrees*. The smallest sets T of replies
  (``|T| <= radius``) with :math:`\\sigma = H_T x_T` for some :math:`x_T` explain it; removing
  :math:`x_T` from the replies of T leaves replies that are consistent, i.e. one value per
  partition, so the corrected sum :math:`a^T y - a_T^T x_T` is a sum over partitions of *some
  replica's* values. When every smallest explanation gives the same corrected sum the
  coordinate is **corrected**; otherwise (or when nothing within the radius explains it) it is
  **erased**. For the polynomial code and ``radius = e // 2`` the explanation is unique whenever
  at most ``radius`` replies of that coordinate are off (the code is MDS), so correction is
  exact there; e nonzero syndromes also *detect* up to e off replies with certainty.
* **Range** (always): a true sum of K quantized values lies in :math:`[-K q_{max}, K q_{max}]`;
  a coordinate outside is erased. Without parity checks this is the only detection: a mixed
  coordinate is a uniformly random field element, which lands inside the range with
  probability :math:`(2 K q_{max} + 1) / p \\approx 2^{-h}` for ``headroom_bits`` h (see
  :meth:`coded_fl.quantize.QuantizationConfig.for_summands`).

An erased coordinate contributes no update this round (its value is set to 0); the caller
bounds how many may be erased before the round is refused. What the syndromes reveal is the
replicas' differences at the disagreeing coordinates (positions and values), nothing else about
the data: ``docs/protocol.md``.

>>> from coded_fl.codes import make_code
>>> from coded_fl.field import PrimeField
>>> F = PrimeField()
>>> code = make_code(5, 1, kind="polynomial")
>>> G = torch.tensor([[1, 2, 3]] * 5, dtype=torch.int64)  # 5 partitions, 3 coordinates
>>> S = [0, 1, 2, 3, 4]  # every silo replied: e = 1 extra reply, one parity check
>>> B = torch.from_numpy(code.matrix[S])
>>> Y = (B @ G) % F.p
>>> Y[2, 1] = (Y[2, 1] + 7) % F.p  # silo 2's replica differs at coordinate 1
>>> rows = np.vstack([code.decoding_vector(S), code.parity_checks(S)])
>>> sums = torch.from_numpy(np.array([[int(v) for v in (torch.from_numpy(r) @ Y) % F.p]
...                                   for r in rows], dtype=np.int64))
>>> out = resolve(F, rows, sums.to(torch.uint32), bound=100, radius=0)
>>> out.value.tolist(), out.erased.tolist(), out.disagreeing
([5, 0, 15], [1], 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import torch

from coded_fl.errors import InputError
from coded_fl.field import PrimeField
from coded_fl.linalg import left_null_space, mat_mul, rref, solve

__all__ = ["Resolution", "resolve"]

#: Candidate sets of replies tried per explanation size; beyond it the coordinates are erased.
MAX_CANDIDATES = 5_000


@dataclass(frozen=True, eq=False)
class Resolution:
    """The decoded sum, coordinate by coordinate.

    Attributes
    ----------
    value
        ``uint32`` field elements: the decoded sum, corrected where the checks located the
        error, 0 where erased.
    disagreeing
        Coordinates whose parity checks failed (replicas disagree there).
    corrected
        Of those, coordinates whose error was located and removed (and whose corrected value is
        in range).
    erased
        ``int64`` indices of the erased coordinates (failed checks that could not be corrected,
        or outside the range of a true sum), sorted.
    out_of_range
        Of the erased, those refused by the range check.
    located
        Reply position (column of ``weights``) -> disagreeing coordinates where every smallest
        explanation blames that reply (:func:`coded_fl.codes.vote.vote`: where the member was
        beyond the tolerance and a majority of its group overruled it).
    within_tolerance
        Of the disagreeing coordinates, those where replicas differ by no more than the
        tolerance of a vote (float drift; 0 from :func:`resolve`).
    unresolved
        Reply position -> erased coordinates where that reply was beyond the tolerance and no
        majority of its group could overrule it (:func:`coded_fl.codes.vote.vote` only).
    """

    value: torch.Tensor
    disagreeing: int = 0
    corrected: int = 0
    erased: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    out_of_range: int = 0
    located: dict[int, int] = field(default_factory=dict)
    within_tolerance: int = 0
    unresolved: dict[int, int] = field(default_factory=dict)


def _independent_rows(h_t: np.ndarray, p: int) -> list[int]:
    """Rows of ``h_t`` (e x t, rank t) that form an invertible t x t block."""
    _, pivots = rref(h_t.T.copy(), p)
    return list(pivots)


def _explain(
    h: np.ndarray, a: np.ndarray, sigma: np.ndarray, p: int, radius: int
) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Per column of ``sigma``: whether the smallest explanations agree on the correction,
    that correction (mod p), and the replies they all blame."""
    cols = sigma.shape[1]
    fixed = np.zeros(cols, dtype=bool)
    delta = np.zeros(cols, dtype=np.int64)
    blamed: list[list[int]] = [[] for _ in range(cols)]
    open_cols = np.arange(cols)
    m = h.shape[1]
    for t in range(1, radius + 1):
        if open_cols.size == 0 or math.comb(m, t) > MAX_CANDIDATES:
            break
        first: dict[int, int] = {}  # column -> correction of its first explanation at size t
        agree: dict[int, bool] = {}
        common: dict[int, set[int]] = {}
        sub = sigma[:, open_cols]
        for T in combinations(range(m), t):
            h_t = h[:, T]
            w = left_null_space(h_t, p)
            ok = (
                np.ones(open_cols.size, dtype=bool)
                if w.shape[0] == 0
                else ~mat_mul(w, sub, p).any(0)
            )
            if not ok.any():
                continue
            rows = _independent_rows(h_t, p)
            if len(rows) < t:
                continue  # H_T is rank deficient: T is no smaller explanation than a subset
            x = solve(h_t[rows], sub[rows][:, ok], p)  # (t, c)
            corr = mat_mul(a[list(T)][None, :], x, p)[0]
            for j, c in zip(np.flatnonzero(ok), corr, strict=True):
                col = int(open_cols[j])
                if col not in first:
                    first[col], agree[col], common[col] = int(c), True, set(T)
                else:
                    agree[col] &= first[col] == int(c)
                    common[col] &= set(T)
        for col, c in first.items():
            fixed[col] = agree[col]
            delta[col] = c
            blamed[col] = sorted(common[col])
        open_cols = np.array([c for c in open_cols if int(c) not in first], dtype=np.int64)
    return fixed, delta, blamed


def resolve(
    field: PrimeField,
    weights: np.ndarray,
    sums: torch.Tensor,
    *,
    bound: int,
    radius: int,
) -> Resolution:
    """Decode ``sums`` coordinate by coordinate (see the module documentation).

    Parameters
    ----------
    field
        GF(p).
    weights
        ``(1 + e) x |S|``: row 0 the decoding vector a over the survivors, rows 1.. parity checks
        H of the code on them (:math:`H B_S = 0`).
    sums
        ``(1 + e) x D`` field elements: ``weights`` applied to the (unmasked) replies.
    bound
        The largest magnitude of a true sum (K x max|q|): beyond it a coordinate is erased.
    radius
        The most off replies sought per coordinate (0: detect only, e.g. ``e // 2``).

    Returns
    -------
    Resolution

    Raises
    ------
    InputError
        If the shapes disagree or ``radius`` / ``bound`` is negative.
    """
    w = np.asarray(weights, dtype=np.int64)
    if w.ndim != 2 or sums.ndim != 2 or sums.shape[0] != w.shape[0]:
        raise InputError(
            f"resolve needs weights (1 + e) x |S| and sums (1 + e) x D, got {w.shape} and "
            f"{tuple(sums.shape)}"
        )
    if radius < 0 or bound < 0:
        raise InputError(f"radius and bound must be >= 0, got {radius} and {bound}")
    p = field.p
    # NumPy, one thread: the bulk work is a few passes over d coordinates, and torch's
    # intra-op threads stall whenever other processes hold the cores (a simulation's silos)
    device = sums.device
    rows = sums.detach().cpu().numpy()
    value = rows[0].astype(np.int64)  # a copy: corrected and erased coordinates are written
    located: dict[int, int] = {}
    erase = np.zeros(value.shape[0], dtype=bool)
    bad = np.empty(0, dtype=np.int64)
    if rows.shape[0] > 1:
        syn = rows[1:]
        bad = np.flatnonzero(syn.any(axis=0))
        if bad.size:
            sigma = syn[:, bad].astype(np.int64)
            fixed, delta, blamed = _explain(w[1:], w[0], sigma, p, radius)
            good = bad[fixed]
            if good.size:
                value[good] = (value[good] - delta[fixed]) % p
            erase[bad[~fixed]] = True
            for col in blamed:
                for j in col:
                    located[j] = located.get(j, 0) + 1
    return finish(
        value, erase, bad, p=p, bound=bound, dtype=rows.dtype, device=device, located=located
    )


def finish(
    value: np.ndarray,
    erase: np.ndarray,
    bad: np.ndarray,
    *,
    p: int,
    bound: int,
    dtype: np.dtype,
    device: torch.device,
    **extra: Any,
) -> Resolution:
    """The common end of a per-coordinate decode: range check, erasure, the counts.

    Parameters
    ----------
    value
        ``int64`` field elements of the decoded sum (written: erased coordinates become 0).
    erase
        Coordinates erased so far (written: those out of range are added).
    bad
        The disagreeing coordinates.
    p, bound
        The modulus, and the largest magnitude of a true sum: beyond it a coordinate is erased.
    dtype, device
        The result's dtype (the sums' own) and device.
    extra
        Further :class:`Resolution` fields.

    Returns
    -------
    Resolution
    """
    # |centred representative| <= bound, i.e. value <= bound or value >= p - bound
    outside = (value > bound) & (value < p - bound) & ~erase
    erase |= outside
    value[erase] = 0
    return Resolution(
        value=torch.from_numpy(value.astype(dtype)).to(device),
        disagreeing=int(bad.size),
        corrected=int(bad.size) - int(np.count_nonzero(erase[bad])),
        erased=torch.from_numpy(np.flatnonzero(erase)),
        out_of_range=int(np.count_nonzero(outside)),
        **extra,
    )
