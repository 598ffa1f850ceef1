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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from math import comb

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.shuffling.plan.delivery import build_messages
from coded_fl.shuffling.plan.loads import decentralized_load
from coded_fl.shuffling.plan.placement import check_storage, normalize_assignment
from coded_fl.shuffling.plan.shuffle_plan import CENTRAL, Mode, ShufflePlan
from coded_fl.shuffling.plan.sources import assign_sources, source_counts, sourced_load
from coded_fl.shuffling.plan.units import Layout, UnitId, UnitManifest

__all__ = ["CENTRAL", "MAX_PLAN_ENTRIES", "Mode", "ShufflePlan", "check_plan_cost", "plan_shuffle"]

#: Cap on the entries a plan's arrays may hold while planning (about 40 bytes each: ~320 MiB);
#: planning cost grows like C(K, t), see :func:`check_plan_cost`.
MAX_PLAN_ENTRIES = 1 << 23


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
    sources = _sources(K, t, needs, holders) if (coded and mode == "decentralized") else None
    pieces = t if (mode == "decentralized" and t >= 1 and sources is None) else 1
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
    sender, ptr, rows, silos = build_messages(
        K, t, mode, coded, needs, holders, target, layout, sources
    )
    plan_id = _plan_id(K, t, mode, coded, manifest, layout, holders, target, sources is not None)
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
        sources,
    )


def _sources(
    K: int, t: int, needs: tuple[tuple[int, ...], ...], holders: tuple[frozenset[int], ...]
) -> tuple[tuple[int, ...], ...] | None:
    """Decentralized, t >= 1: the holder-sourced delivery's sources when every needed unit has
    a holder and that delivery loads less than the clique cover; else None (the clique cover).
    """
    if t < 1 or t == K:
        return None
    sources = assign_sources(K, needs, holders)
    if sources is None:
        return None
    sourced = sourced_load(K, t, source_counts(K, sources))
    return sources if sourced < decentralized_load(K, t, [len(n) for n in needs]) else None


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


def _plan_id(
    K: int,
    t: int,
    mode: str,
    coded: bool,
    manifest: UnitManifest,
    layout: Layout,
    holders: tuple[frozenset[int], ...],
    target: tuple[frozenset[int], ...],
    sourced: bool,
) -> bytes:
    # v3: the t = 0 fan-out pairs swaps; v4: holder-sourced delivery at t >= 1
    h = hashlib.sha256(b"codedfl-shuffle-plan-v4")
    h.update(f"{K}:{t}:{mode}:{int(coded)}:{layout.n_subfiles}:{layout.n_pieces}".encode())
    h.update(f":sourced={int(sourced)}".encode())
    h.update(f":{layout.piece_size}".encode() + manifest.fingerprint())
    for group in (holders, target):
        for s in group:
            h.update(b"|" + ",".join(str(k) for k in sorted(s)).encode())
    return h.digest()[:16]
