"""Delivery plans: which coded messages move which subfiles so that every silo decodes its units.

Schemes (loads and sources in :mod:`coded_fl.shuffling.plan.theory`):

``centralized``
    One sender holds all data (the coded delivery of Attia and Tandon 2019, with the placement of
    :mod:`~coded_fl.shuffling.plan.placement`). For every (t+1)-set S of silos and round i, the
    sender XORs :math:`W_{n_k, S \\setminus k}` over the silos k of S that still need an i-th unit
    :math:`n_k`. Silo k knows every other term (it caches :math:`W_{\\cdot, T}` for
    :math:`T \\ni k`) and so decodes its own.
``decentralized``
    No sender: silos send to each other through a relay (Wan, Tuninetti, Ji, Caire, Piantanida
    2020, distributed clique cover). Each term of the XOR above is split into t pieces, one per
    silo of :math:`S \\setminus k`; silo j of S sends the XOR of its pieces of the terms of the
    other silos of S, all of which it caches. At t = 0 a holder sends each needed unit whole,
    once: the relay forwards that one message to every silo that needs the unit (fan-out; with
    the gradient code a unit's new holders are the s + 1 silos of its partition's support).
    Two units that trade holder sets A and B (A and B meeting) go as one XOR from a silo of
    both: each new holder of one holds the other (the coded reshuffle of the gradient code's
    replicas, :func:`~coded_fl.shuffling.partitions.swapped_partitions`).
``uncoded`` (``coded=False``)
    The baseline: every missing subfile (or piece) is its own message.

Every message is the XOR of equally long segments (``layout.piece_size`` bytes), and every term of
a message is decoded by exactly one silo (``term_silo``), which knows all the other terms: decoding
is one XOR pass per message, no elimination. A segment meant for several receivers (the t = 0
fan-out) appears as consecutive equal terms, one per receiver; encoding and decoding XOR each
distinct segment once. XOR already meets the uncoded-storage lower
bound in the centralized setting (theory module), so GF(2^8) combinations would not lower the
load there.

>>> from coded_fl.shuffling.plan.units import UnitManifest
>>> m = UnitManifest.from_data({u: bytes([u]) * 12 for u in range(4)})
>>> now = {u: {u} for u in range(4)}
>>> nxt = {u: {(u - 1) % 4} for u in range(4)}
>>> p = plan_shuffle(m, now, nxt, K=4, t=2)
>>> p.n_messages, p.load, p.formula_load()
(4, 0.6666666666666666, 0.6666666666666666)

Length: about 300 lines of code (one plan, built and checked in one place); the rest is
documentation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import comb
from typing import Any, Literal

import numpy as np

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.shuffling.plan.placement import (
    check_storage,
    colex_rank,
    normalize_assignment,
    subsets,
)
from coded_fl.shuffling.plan.theory import (
    centralized_load,
    decentralized_load,
    swap_fanout_load,
    uncoded_load,
)
from coded_fl.shuffling.plan.units import Layout, UnitId, UnitManifest

__all__ = ["CENTRAL", "MAX_PLAN_ENTRIES", "Mode", "ShufflePlan", "check_plan_cost", "plan_shuffle"]

#: Sender id of the central sender (the one party that holds all data) in centralized plans.
CENTRAL = -1
#: Cap on the entries a plan's arrays may hold while planning (about 40 bytes each: ~320 MiB);
#: planning cost grows like C(K, t), see :func:`check_plan_cost`.
MAX_PLAN_ENTRIES = 1 << 23

Mode = Literal["centralized", "decentralized"]


@dataclass(frozen=True, eq=False)
class ShufflePlan:
    """A placement plus the coded messages that deliver the next assignment.

    Message i is the XOR of the segments ``term_row[msg_ptr[i]:msg_ptr[i+1]]`` (row r is piece
    ``r % P`` of subfile ``(r // P) % n_subfiles`` of unit ``r // (P * n_subfiles)``, P =
    ``layout.n_pieces``), sent by ``msg_sender[i]`` (:data:`CENTRAL` or a silo); the silo
    ``term_silo[j]`` decodes term j and is a receiver of its message.

    Made by :func:`plan_shuffle`; the arrays are in CSR form (``msg_ptr`` has one entry more
    than there are messages).

    Attributes
    ----------
    K, t : int
        Silos and storage level.
    mode : Mode
        ``"centralized"`` or ``"decentralized"``.
    coded : bool
        False for the uncoded baseline (one segment per message).
    manifest : UnitManifest
        The N units; unit n is ``manifest.ids[n]``.
    layout : Layout
        :math:`\\binom{K}{t}` subfiles per unit, t pieces per subfile in the decentralized
        setting (t >= 1), else 1.
    holders, target : tuple of frozenset of int
        The current and next holders of each unit, in manifest order.
    needs : tuple of tuple of int
        ``needs[k]``: the units (indices) silo k must receive, in the target but not held now.
    msg_sender, msg_ptr, term_row, term_silo : numpy.ndarray
        int64 arrays described above.
    plan_id : bytes
        16 bytes: SHA-256 over K, t, mode, coded, the layout, the manifest's fingerprint and
        both assignments. Equal plan ids mean equal plans.
    """

    K: int
    t: int
    mode: Mode
    coded: bool
    manifest: UnitManifest
    layout: Layout
    holders: tuple[frozenset[int], ...]
    target: tuple[frozenset[int], ...]
    needs: tuple[tuple[int, ...], ...]
    msg_sender: np.ndarray
    msg_ptr: np.ndarray
    term_row: np.ndarray
    term_silo: np.ndarray
    plan_id: bytes = field(repr=False)

    # -- sizes -------------------------------------------------------------------------------
    @property
    def n_messages(self) -> int:
        """The number of coded messages."""
        return int(self.msg_sender.size)

    @property
    def bytes_moved(self) -> int:
        """Payload bytes on the shared link (one broadcast per message)."""
        return self.n_messages * self.layout.piece_size

    @property
    def load(self) -> float:
        """Measured load in units: messages times the fraction of a unit each one carries."""
        return self.n_messages / self.layout.segments_per_unit

    def need_counts(self) -> list[int]:
        """:math:`m_k`: how many units each silo k must receive."""
        return [len(n) for n in self.needs]

    def formula_load(self) -> float:
        """The load the scheme's formula predicts for these needs (theory module)."""
        m = self.need_counts()
        if not self.coded:
            return uncoded_load(self.K, self.t, m)
        if self.mode == "centralized":
            return centralized_load(self.K, self.t, m)
        if self.t == 0:
            return swap_fanout_load(self.holders, self.target)
        return decentralized_load(self.K, self.t, m)

    # -- routing -----------------------------------------------------------------------------
    def terms(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(segment rows, decoding silos) of message i.

        Parameters
        ----------
        i
            The message's index.

        Returns
        -------
        tuple[np.ndarray, np.ndarray]
        """
        a, b = int(self.msg_ptr[i]), int(self.msg_ptr[i + 1])
        return self.term_row[a:b], self.term_silo[a:b]

    def receivers(self, i: int) -> frozenset[int]:
        """The silos that decode something from message i (the relay forwards it to them).

        Parameters
        ----------
        i
            The message's index.

        Returns
        -------
        frozenset[int]
        """
        return frozenset(int(k) for k in self.terms(i)[1])

    def messages_from(self, sender: int) -> np.ndarray:
        """Indices of the messages ``sender`` (a silo, or :data:`CENTRAL`) sends, increasing.

        Parameters
        ----------
        sender
            A silo index or :data:`CENTRAL`.

        Returns
        -------
        numpy.ndarray
            int64 message indices (empty if it sends none).
        """
        return np.flatnonzero(self.msg_sender == sender)

    def messages_to(self, silo: int) -> np.ndarray:
        """Indices of the messages silo decodes a term of (those routed to it), increasing.

        Parameters
        ----------
        silo
            The silo's index, ``0..K-1``.

        Returns
        -------
        numpy.ndarray
            int64 message indices (empty if it needs nothing).
        """
        return np.unique(self.term_message()[self.term_silo == silo])

    def term_message(self) -> np.ndarray:
        """The message index of every term (int64, aligned with ``term_row``)."""
        return np.repeat(np.arange(self.n_messages), np.diff(self.msg_ptr))

    def unit_of_row(self, rows: np.ndarray) -> np.ndarray:
        """The unit index (position in the manifest) of each segment row.

        Parameters
        ----------
        rows
            Segment rows, as in ``term_row``.

        Returns
        -------
        numpy.ndarray
            ``rows // layout.segments_per_unit``, element by element.
        """
        return np.asarray(rows) // self.layout.segments_per_unit

    def summary(self) -> dict[str, Any]:
        """Plain figures for printing or JSON."""
        return {
            "K": self.K,
            "t": self.t,
            "mode": self.mode,
            "coded": self.coded,
            "units": len(self.manifest),
            "subfiles_per_unit": self.layout.n_subfiles,
            "pieces_per_subfile": self.layout.n_pieces,
            "message_bytes": self.layout.piece_size,
            "messages": self.n_messages,
            "load_units": self.load,
            "formula_load_units": self.formula_load(),
            "bytes_moved": self.bytes_moved,
            "units_to_receive": sum(self.need_counts()),
            "plan_id": self.plan_id.hex(),
        }


def plan_shuffle(
    manifest: UnitManifest,
    current: Mapping[UnitId, Iterable[int]],
    nxt: Mapping[UnitId, Iterable[int]],
    *,
    K: int,
    t: int,
    mode: Mode = "centralized",
    coded: bool = True,
    storage: float | None = None,
) -> ShufflePlan:
    """Plan one shuffle from the ``current`` assignment to ``nxt`` at storage level t.

    ``storage`` (units per silo), when given, is checked against both assignments plus the
    level-t cache (:func:`~coded_fl.shuffling.plan.placement.check_storage`). Deterministic: every
    party that plans from the same inputs gets the same plan and ``plan_id``.

    Parameters
    ----------
    manifest
        The N units (ids, lengths, SHA-256).
    current
        Unit id -> the silos that hold it in full now (a unit not listed is held by none).
    nxt
        Unit id -> the silos that must hold it in full after the shuffle (a unit not listed
        goes to none).
    K
        The number of silos.
    t
        The storage level, ``0..K``: every silo caches :math:`W_{n,T}` for every :math:`T \\ni k`.
    mode
        ``"centralized"`` (one sender, :data:`CENTRAL`, holds every unit) or
        ``"decentralized"`` (the silos send, from their units and caches).
    coded
        False: the uncoded baseline (every missing segment its own message).
    storage
        Storage per silo, in units (M), checked against both assignments when given.

    Returns
    -------
    ShufflePlan
        The plan; silo k must receive the units it holds in ``nxt`` but not in ``current``.

    Raises
    ------
    ConfigurationError
        If K < 1, t is outside ``0..K``, ``mode`` is unknown, :math:`\\binom{K}{t}` exceeds
        :data:`~coded_fl.shuffling.plan.placement.MAX_SUBFILES`, or some silo's storage is too
        small.
    InputError
        If the manifest is empty, an assignment names a unit not in the manifest or a silo
        outside ``0..K-1``, or (decentralized, t = 0) a unit some silo must receive is held by
        no silo.
    """
    if K < 1:
        raise ConfigurationError(f"K (silos) must be >= 1, got {K}")
    if not 0 <= t <= K:
        raise ConfigurationError(f"storage level t must be in 0..K = 0..{K}, got {t}")
    if mode not in ("centralized", "decentralized"):
        raise ConfigurationError(f"mode must be 'centralized' or 'decentralized', got {mode!r}")
    if len(manifest) == 0:
        raise InputError("the manifest has no units")
    holders = normalize_assignment(manifest, current, K, name="current assignment")
    target = normalize_assignment(manifest, nxt, K, name="next assignment")
    if storage is not None:
        check_storage(K, t, storage, [("current", holders), ("next", target)])
    needs = tuple(
        tuple(n for n in range(len(manifest)) if k in target[n] and k not in holders[n])
        for k in range(K)
    )
    pieces = t if (mode == "decentralized" and t >= 1) else 1
    check_plan_cost(K, t, len(manifest), max((len(nk) for nk in needs), default=0), pieces)
    layout = Layout.for_manifest(
        manifest, n_subfiles=comb(K, t), n_pieces=pieces, subfile_align=max(t, 1)
    )
    if mode == "decentralized" and t == 0:
        lost = sorted({manifest.ids[n] for nk in needs for n in nk if not holders[n]}, key=repr)
        if lost:
            raise InputError(
                f"units missing from every silo: {lost}: at t = 0 only a holder can send a unit; "
                "give them to some silo, use a storage level t >= 1, or a centralized sender"
            )
    if coded and mode == "decentralized" and t == 0:
        sender, ptr, rows, silos = _fanout(K, needs, holders, target, layout)
    else:
        build = _coded if coded else _uncoded
        sender, ptr, rows, silos = build(K, t, mode, needs, holders, layout)
    plan_id = _plan_id(K, t, mode, coded, manifest, layout, holders, target)
    return ShufflePlan(
        K,
        t,
        mode,
        coded,
        manifest,
        layout,
        holders,
        target,
        needs,
        sender,
        ptr,
        rows,
        silos,
        plan_id,
    )


_Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def check_plan_cost(K: int, t: int, units: int, most_needed: int, pieces: int) -> int:
    """Refuse a shuffle whose plan would be too large to build, before building anything.

    Planning builds arrays of about ``units * C(K, t) * pieces`` entries (the layout) and
    ``most_needed * C(K, t + 1) * (t + 1)^2`` entries (the coded terms; the uncoded ones are
    fewer), so its cost grows like :math:`\binom{K}{t}`; above :data:`MAX_PLAN_ENTRIES` (about
    40 bytes each while planning) it is refused.

    Parameters
    ----------
    K, t
        Silos and storage level.
    units
        Units in the manifest.
    most_needed
        The most units one silo must receive.
    pieces
        Pieces per subfile (t in decentralized mode, else 1).

    Returns
    -------
    int
        The estimated number of entries.

    Raises
    ------
    ConfigurationError
        If the estimate exceeds :data:`MAX_PLAN_ENTRIES`, saying what to lower.
    """
    layout = units * comb(K, t) * pieces
    terms = most_needed * comb(K, t + 1) * (t + 1) ** 2 if t < K else 0
    estimate = max(layout, terms)
    if estimate > MAX_PLAN_ENTRIES:
        raise ConfigurationError(
            f"planning this shuffle (K={K}, t={t}, {units} units, up to {most_needed} needed by "
            f"one silo) would build about {estimate:,} entries, more than MAX_PLAN_ENTRIES = "
            f"{MAX_PLAN_ENTRIES:,}: choose a smaller storage level t, fewer silos per shuffle "
            "group, or shuffle fewer units at a time"
        )
    return estimate


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


def _plan_id(
    K: int,
    t: int,
    mode: str,
    coded: bool,
    manifest: UnitManifest,
    layout: Layout,
    holders: tuple[frozenset[int], ...],
    target: tuple[frozenset[int], ...],
) -> bytes:
    h = hashlib.sha256(b"codedfl-shuffle-plan-v3")  # v3: the t = 0 fan-out pairs swaps
    h.update(f"{K}:{t}:{mode}:{int(coded)}:{layout.n_subfiles}:{layout.n_pieces}".encode())
    h.update(f":{layout.piece_size}".encode() + manifest.fingerprint())
    for group in (holders, target):
        for s in group:
            h.update(b"|" + ",".join(str(k) for k in sorted(s)).encode())
    return h.digest()[:16]
