"""A silo's store meets a plan: initial placement, side information, committing a delivery.

Four steps connect a silo's :class:`~coded_fl.shuffling.storage.store.UnitStore` (which knows
nothing about plans) with a :class:`~coded_fl.shuffling.plan.planner.ShufflePlan`:

- :func:`install_silo` fills a store for the plan's current epoch from full data (provisioning:
  the first placement, or a simulation);
- :func:`check_holdings` checks that a store holds, in the plan's versions, the units the
  plan's current assignment gives the silo;
- :func:`load_silo` reads a silo's side information (its units in full, its cached subfiles of
  the others) back from its store into a :class:`~coded_fl.shuffling.codec.SegmentBuffer`;
- :func:`commit_delivery` commits what a delivery brought, in one atomic manifest switch, and
  drops the units the silo gives up only when the delivery is complete.

The member's machine (:mod:`~coded_fl.shuffling.transport.member`) uses the last three in every
epoch;
the in-memory harness (``simulations/runtime/shuffle_harness.py``, a test and simulation helper
outside the library) uses :func:`load_silo` and :func:`commit_delivery` from here.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coded_fl.errors import InputError
from coded_fl.shuffling.codec import SegmentBuffer, cached_subfiles
from coded_fl.shuffling.plan.planner import ShufflePlan
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.storage.session import DeliveryReport
from coded_fl.shuffling.storage.store import UnitStore

__all__ = ["check_holdings", "commit_delivery", "install_silo", "load_silo"]


def install_silo(
    plan: ShufflePlan, silo: int, data: Mapping[UnitId, bytes], store: UnitStore, *, epoch: int
) -> None:
    """Fill a silo's store for the plan's current epoch: its units in full, caches of the rest.

    Parameters
    ----------
    plan
        A plan whose current assignment is the placement to install.
    silo
        The silo's index, ``0..K-1``.
    data
        Every unit's bytes, by unit id (the silo keeps only its share of them).
    store
        The silo's store; one atomic commit.
    epoch
        The epoch the store is at afterwards.

    Raises
    ------
    KeyError
        ``data`` lacks a unit of the plan.
    """
    subs = cached_subfiles(plan, silo)
    add, cache = {}, {}
    for n, spec in enumerate(plan.manifest):
        if silo in plan.holders[n]:
            add[spec] = data[spec.unit_id]
        if subs.size:
            padded = plan.layout.pad(data[spec.unit_id]).reshape(plan.layout.n_subfiles, -1)
            cache[spec.unit_id] = padded[subs].tobytes()
    store.commit(add=add, cache=cache, epoch=epoch, known=plan.manifest.specs)


def check_holdings(plan: ShufflePlan, silo: int, store: UnitStore) -> None:
    """Check that a silo's store holds every unit the plan's current assignment gives it.

    Parameters
    ----------
    plan
        The epoch's plan.
    silo
        The silo's index, ``0..K-1``.
    store
        The silo's store.

    Raises
    ------
    InputError
        The store lacks such a unit, or holds another version of it (length or SHA-256): the
        silo cannot take part in the epoch.
    """
    held = set(store.units())
    lacking = [
        plan.manifest.ids[n]
        for n in range(len(plan.manifest))
        if silo in plan.holders[n]
        and (
            plan.manifest.ids[n] not in held
            or store.spec(plan.manifest.ids[n]) != plan.manifest.specs[n]
        )
    ]
    if lacking:
        raise InputError(
            f"silo {silo}'s store lacks units {lacking} (or holds other versions) that "
            "the current assignment gives it: it cannot take part in this epoch"
        )


def load_silo(plan: ShufflePlan, silo: int, store: UnitStore) -> SegmentBuffer:
    """A silo's side information read back from its store (hashes checked on the way).

    Parameters
    ----------
    plan
        The epoch's plan.
    silo
        The silo's index, ``0..K-1``.
    store
        The silo's store.

    Returns
    -------
    SegmentBuffer
        The units the silo holds now (in full) and its cached subfiles of the others; what the
        store lacks stays empty (a session decodes nothing that needs it).

    Raises
    ------
    DecodingError
        A stored file does not match the SHA-256 its manifest names.
    """
    buf = SegmentBuffer.for_plan(plan)
    held, cached = set(store.units()), set(store.cached())
    subs = cached_subfiles(plan, silo)
    for n, unit_id in enumerate(plan.manifest.ids):
        if silo in plan.holders[n] and unit_id in held:
            buf.put_unit(n, plan.layout.pad(store.read_unit(unit_id)))
        elif subs.size and unit_id in cached:
            raw = np.frombuffer(store.read_cache(unit_id), dtype=np.uint8)
            buf.put_cache(n, silo=silo, plan=plan, subfiles=raw)
    return buf


def commit_delivery(
    plan: ShufflePlan,
    store: UnitStore,
    units: Mapping[UnitId, bytes],
    report: DeliveryReport,
    *,
    epoch: int,
) -> None:
    """Commit what silo ``report.silo`` received, in one atomic manifest switch.

    Every verified unit is added and the plan's unit specs are recorded as known. Only when
    the report is complete are the units the silo gives up dropped and the store's epoch set
    to ``epoch``; otherwise the silo keeps its old units and epoch (plus the complete, verified
    new units), so its store stays consistent and the report says what is missing.

    Parameters
    ----------
    plan
        The epoch's plan.
    store
        The silo's store.
    units
        The units the delivery completed (decoded and SHA-256 verified), by unit id.
    report
        The silo's delivery report (:meth:`~coded_fl.shuffling.storage.session.SiloSession.finish`).
    epoch
        The epoch the store moves to if the report is complete.

    Raises
    ------
    InputError
        A unit does not match its spec in the plan's manifest (the store refuses it).
    """
    k = report.silo
    gone = [
        plan.manifest.ids[n]
        for n in range(len(plan.manifest))
        if k in plan.holders[n] and k not in plan.target[n]
    ]
    store.commit(
        add={plan.manifest.spec(u): b for u, b in units.items()},
        drop=gone if report.complete else (),
        epoch=epoch if report.complete else None,
        known=plan.manifest.specs,
    )
