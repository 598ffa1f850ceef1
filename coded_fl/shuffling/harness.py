"""In-memory harness: one shuffle over K simulated silos on real bytes, with drops.

It wires the sans-IO sessions together the way the Flower glue does (sender or silos ->
relay -> silos), on one process, and is what the tests and ``python -m simulations.shuffle``
run. ``drop_after={k: s}`` makes silo k vanish after the relay has handled s messages: it sends
and receives nothing more and commits nothing, so its store keeps the previous epoch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from coded_fl.shuffling.codec import SegmentBuffer, cached_subfiles
from coded_fl.shuffling.planner import CENTRAL, Mode, ShufflePlan, plan_shuffle
from coded_fl.shuffling.session import (
    DeliveryReport,
    RelaySession,
    SenderSession,
    ShuffleMessage,
    SiloSession,
)
from coded_fl.shuffling.store import UnitStore
from coded_fl.shuffling.units import UnitId, UnitManifest

__all__ = [
    "ShuffleOutcome",
    "commit_delivery",
    "install_silo",
    "load_silo",
    "silo_buffer",
    "simulate",
]


@dataclass(frozen=True)
class ShuffleOutcome:
    """What one simulated shuffle did: the plan, every silo's report, the traffic."""

    plan: ShufflePlan
    reports: tuple[DeliveryReport, ...]
    received: tuple[dict[UnitId, bytes], ...]
    messages_relayed: int
    payload_bytes: int
    wire_bytes: int
    refused: tuple[str, ...]


def silo_buffer(plan: ShufflePlan, silo: int, data: Mapping[UnitId, bytes]) -> SegmentBuffer:
    """Silo's side information built from the full data (simulation): held units, caches."""
    buf = SegmentBuffer.for_plan(plan)
    subs = cached_subfiles(plan, silo)
    for n, unit_id in enumerate(plan.manifest.ids):
        padded = plan.layout.pad(data[unit_id])
        if silo in plan.holders[n]:
            buf.put_unit(n, padded)
        elif subs.size:
            cache = padded.reshape(plan.layout.n_subfiles, -1)[subs].reshape(-1)
            buf.put_cache(n, silo=silo, plan=plan, subfiles=cache)
    return buf


def install_silo(
    plan: ShufflePlan, silo: int, data: Mapping[UnitId, bytes], store: UnitStore, *, epoch: int
) -> None:
    """Fill a silo's store for the plan's current epoch: its units in full, caches of the rest."""
    subs = cached_subfiles(plan, silo)
    add, cache = {}, {}
    for n, spec in enumerate(plan.manifest):
        if silo in plan.holders[n]:
            add[spec] = data[spec.unit_id]
        if subs.size:
            padded = plan.layout.pad(data[spec.unit_id]).reshape(plan.layout.n_subfiles, -1)
            cache[spec.unit_id] = padded[subs].tobytes()
    store.commit(add=add, cache=cache, epoch=epoch, known=plan.manifest.specs)


def load_silo(plan: ShufflePlan, silo: int, store: UnitStore) -> SegmentBuffer:
    """Silo's side information read back from its store (hashes checked on the way)."""
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


def simulate(
    data: Mapping[UnitId, bytes],
    current: Mapping[UnitId, Iterable[int]],
    nxt: Mapping[UnitId, Iterable[int]],
    *,
    K: int,
    t: int,
    mode: Mode = "centralized",
    coded: bool = True,
    storage: float | None = None,
    group_key: bytes | None = None,
    epoch: int = 1,
    drop_after: Mapping[int, int] | None = None,
    stores: Sequence[UnitStore] | None = None,
    tamper: Callable[[ShuffleMessage], ShuffleMessage] | None = None,
    entropy: Callable[[int], bytes] = os.urandom,
) -> ShuffleOutcome:
    """Plan and run one shuffle; silos read side information from ``stores`` when given.

    ``tamper`` may rewrite messages on the relay (to test that silos refuse them; a refused
    message counts as not received).
    """
    manifest = UnitManifest.from_data(data)
    plan = plan_shuffle(manifest, current, nxt, K=K, t=t, mode=mode, coded=coded, storage=storage)
    drop = dict(drop_after or {})
    bufs = [
        load_silo(plan, k, stores[k]) if stores else silo_buffer(plan, k, data) for k in range(K)
    ]
    silos = [
        SiloSession(plan, k, bufs[k], epoch=epoch, group_key=group_key, entropy=entropy)
        for k in range(K)
    ]
    outbox: list[ShuffleMessage] = []
    if mode == "centralized":
        sender_buf = SegmentBuffer.for_plan(plan)
        for n, unit_id in enumerate(manifest.ids):
            sender_buf.put_unit(n, plan.layout.pad(data[unit_id]))
        outbox = SenderSession(
            plan, sender_buf, epoch=epoch, group_key=group_key, entropy=entropy
        ).messages()
    else:
        for k in range(K):
            if drop.get(k, 1) > 0:
                outbox.extend(silos[k].outgoing())
    relay = RelaySession(plan, epoch=epoch)
    relayed = payload = wire = 0
    refused: list[str] = []
    for step, msg in enumerate(outbox):
        if msg.sender != CENTRAL and step >= drop.get(msg.sender, step + 1):
            continue  # its sender is gone
        targets = relay.route(msg)
        relayed += 1
        payload += plan.layout.piece_size
        wire += msg.wire_bytes
        if tamper is not None:
            msg = tamper(msg)
        for k in sorted(targets):
            if step >= drop.get(k, step + 1):
                continue
            try:
                silos[k].receive(msg)
            except Exception as exc:  # refused: the report shows it as missing
                refused.append(f"silo {k}: {exc}")
    reports = tuple(s.finish() for s in silos)
    if stores:
        for k, (s, rep) in enumerate(zip(silos, reports, strict=True)):
            if k in drop:
                continue  # gone: commits nothing, keeps the previous epoch
            commit_delivery(plan, stores[k], s.units(), rep, epoch=epoch)
    received = tuple(s.units() for s in silos)
    return ShuffleOutcome(plan, reports, received, relayed, payload, wire, tuple(refused))
