"""The messages of each scheme, built as the CSR arrays of a plan
(:class:`~coded_fl.shuffling.plan.shuffle_plan.ShufflePlan`).

:func:`build_messages` picks the builder: the coded XORs over every (t+1)-set (centralized or
decentralized), the t = 0 fan-out with swaps, or the uncoded baseline (every missing segment
alone). The schemes are described in :mod:`coded_fl.shuffling.plan.planner`, their loads in
:mod:`coded_fl.shuffling.plan.loads`.
"""

from __future__ import annotations

import numpy as np

from coded_fl.shuffling.plan.placement import colex_rank, subsets
from coded_fl.shuffling.plan.shuffle_plan import CENTRAL, Mode
from coded_fl.shuffling.plan.units import Layout

__all__ = ["build_messages"]

_Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def build_messages(
    K: int,
    t: int,
    mode: Mode,
    coded: bool,
    needs: tuple[tuple[int, ...], ...],
    holders: tuple[frozenset[int], ...],
    target: tuple[frozenset[int], ...],
    layout: Layout,
    sources: tuple[tuple[int, ...], ...] | None = None,
) -> _Arrays:
    """The messages of one plan: (sender per message, ``msg_ptr``, ``term_row``, ``term_silo``),
    the int64 arrays of a :class:`~coded_fl.shuffling.plan.shuffle_plan.ShufflePlan`.

    Parameters
    ----------
    K, t
        Silos and storage level.
    mode
        ``"centralized"`` or ``"decentralized"``.
    coded
        False for the uncoded baseline (every missing segment its own message).
    needs
        ``needs[k]``: the units (indices) silo k must receive.
    holders, target
        The current and next holders of each unit, in manifest order.
    layout
        The units' subfiles and pieces.
    sources
        Decentralized, t >= 1: the holder that sends each needed unit
        (:mod:`~coded_fl.shuffling.plan.sources`); None: the clique cover.

    Returns
    -------
    tuple of numpy.ndarray
        ``msg_sender``, ``msg_ptr``, ``term_row`` and ``term_silo``.
    """
    if coded and mode == "decentralized" and t == 0:
        return _fanout(K, needs, holders, target, layout)
    if coded and sources is not None:
        return _sourced(K, t, needs, sources, layout)
    build = _coded if coded else _uncoded
    return build(K, t, mode, needs, holders, layout)


def _need_matrix(K: int, needs: tuple[tuple[int, ...], ...]) -> np.ndarray:
    width = max((len(n) for n in needs), default=0)
    out = np.full((K, width), -1, dtype=np.int64)
    for k, n in enumerate(needs):
        out[k, : len(n)] = n
    return out


def _pack(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> _Arrays:
    """Concatenate (sender per message, terms per message, rows, silos) blocks into CSR arrays."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(1, dtype=np.int64), empty, empty
    sender = np.concatenate([p[0] for p in parts]).astype(np.int64)
    counts = np.concatenate([p[1] for p in parts]).astype(np.int64)
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    rows = np.concatenate([p[2] for p in parts]).astype(np.int64)
    silos = np.concatenate([p[3] for p in parts]).astype(np.int64)
    return sender, ptr, rows, silos


def _coded(
    K: int,
    t: int,
    mode: Mode,
    needs: tuple[tuple[int, ...], ...],
    holders: tuple[frozenset[int], ...],
    layout: Layout,
) -> _Arrays:
    if t == K or not any(needs):
        return _pack([])
    groups = subsets(K, t + 1)  # (nS, t+1): every (t+1)-set S
    # sub[:, p]: subfile index of S minus its p-th member
    sub = np.stack([colex_rank(np.delete(groups, p, axis=1)) for p in range(t + 1)], axis=1)
    need = _need_matrix(K, needs)
    P, n_sub = layout.n_pieces, layout.n_subfiles
    parts = []
    for i in range(need.shape[1]):
        units = need[groups, i]  # (nS, t+1): the i-th unit each member still needs, or -1
        valid = units >= 0
        base = (units * n_sub + sub) * P  # row of piece 0 of the term's subfile
        if mode == "centralized":
            sel = valid.any(axis=1)
            v = valid[sel]
            parts.append(
                (
                    np.full(int(sel.sum()), CENTRAL),
                    v.sum(axis=1),
                    base[sel][v],
                    groups[sel][v],
                )
            )
            continue
        for j in range(t + 1):  # silo at position j of S sends
            mask = valid.copy()
            mask[:, j] = False
            sel = mask.any(axis=1)
            m = mask[sel]
            # piece index of sender j inside T = S minus member p: j if j < p else j - 1
            piece = np.where(np.arange(t + 1) > j, j, j - 1)
            rows = (base[sel] + piece[None, :])[m]
            parts.append((groups[sel, j], m.sum(axis=1), rows, groups[sel][m]))
    return _pack(parts)


def _sourced(
    K: int,
    t: int,
    needs: tuple[tuple[int, ...], ...],
    sources: tuple[tuple[int, ...], ...],
    layout: Layout,
) -> _Arrays:
    """Decentralized, t >= 1, holder-sourced: every source silo sends the centralized XORs for
    the units it sources (:mod:`~coded_fl.shuffling.plan.sources`); one piece per subfile."""
    parts = []
    for j in range(K):
        mine = tuple(
            tuple(n for n, src in zip(units, row, strict=True) if src == j)
            for units, row in zip(needs, sources, strict=True)
        )
        if any(mine):  # j as the central sender of its own units (CSR back to a block)
            sender, ptr, rows, silos = _coded(K, t, "centralized", mine, (), layout)
            parts.append((np.full(sender.size, j), np.diff(ptr), rows, silos))
    return _pack(parts)


def _fanout(
    K: int,
    needs: tuple[tuple[int, ...], ...],
    holders: tuple[frozenset[int], ...],
    target: tuple[frozenset[int], ...],
    layout: Layout,
) -> _Arrays:
    """t = 0, decentralized: each needed unit once, with one term (the same segment) per silo
    that needs it; the relay forwards it to all of them. Units that trade holder sets (one
    going from A to B, the other from B to A, with A and B meeting) go in pairs, as one XOR
    sent by a silo of both (:func:`~coded_fl.shuffling.plan.theory.swap_fanout_load`): every new
    holder of one holds the other. A lone unit comes from its lowest holder; the senders of a
    class pair's XORs take turns over the silos of A and B."""
    receivers: dict[int, list[int]] = {}
    for k, units in enumerate(needs):
        for n in units:
            receivers.setdefault(n, []).append(k)
    if not receivers:
        return _pack([])
    classes: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
    for n in sorted(receivers):
        classes.setdefault((holders[n], target[n]), []).append(n)
    messages: list[tuple[int, tuple[int, ...]]] = []  # (sender, units in increasing order)
    for (a, b), moved in sorted(classes.items(), key=lambda c: (sorted(c[0][0]), sorted(c[0][1]))):
        back = classes.get((b, a), [])
        common = sorted(a & b)
        if common and back:
            if sorted(a) > sorted(b):  # the pair (B, A) took these already
                continue
            for i, (u, v) in enumerate(zip(moved, back, strict=False)):
                messages.append((common[i % len(common)], (min(u, v), max(u, v))))
            rest = moved[len(back) :] + back[len(moved) :]
        else:
            rest = moved
        messages.extend((min(holders[n]), (n,)) for n in rest)
    messages.sort(key=lambda m: m[1])
    sender = np.array([m[0] for m in messages], dtype=np.int64)
    counts = np.array([sum(len(receivers[n]) for n in m[1]) for m in messages], dtype=np.int64)
    unit_terms = [n for m in messages for n in m[1] for _ in receivers[n]]
    rows = np.array(unit_terms, dtype=np.int64) * layout.segments_per_unit
    silos = np.array([k for m in messages for n in m[1] for k in receivers[n]], dtype=np.int64)
    return _pack([(sender, counts, rows, silos)])


def _uncoded(
    K: int,
    t: int,
    mode: Mode,
    needs: tuple[tuple[int, ...], ...],
    holders: tuple[frozenset[int], ...],
    layout: Layout,
) -> _Arrays:
    """Every missing segment alone; sender: CENTRAL, a silo caching the subfile, or a holder."""
    if t == K:
        return _pack([])
    subs = subsets(K, t)
    P = layout.n_pieces
    rows_all, silos_all, senders_all = [], [], []
    for k, units in enumerate(needs):
        if not units:
            continue
        missing = np.flatnonzero(~(subs == k).any(axis=1))  # subfiles silo k does not cache
        u = np.asarray(units, dtype=np.int64)
        rows = (u[:, None] * layout.n_subfiles + missing[None, :])[..., None] * P + np.arange(P)
        rows_all.append(rows.reshape(-1))
        silos_all.append(np.full(rows.size, k))
        if mode == "centralized":
            senders_all.append(np.full(rows.size, CENTRAL))
        elif t == 0:
            first = np.array([min(holders[n]) for n in units], dtype=np.int64)
            senders_all.append(np.repeat(first, missing.size * P))
        else:
            first = subs[missing, 0]  # the smallest silo caching the subfile
            senders_all.append(np.broadcast_to(first[None, :, None], rows.shape).reshape(-1))
    if not rows_all:
        return _pack([])
    rows = np.concatenate(rows_all)
    return _pack(
        [
            (
                np.concatenate(senders_all),
                np.ones(rows.size, np.int64),
                rows,
                np.concatenate(silos_all),
            )
        ]
    )
