"""In-memory harness: one shuffle over K simulated silos on real bytes, with drops.

A test and simulation helper, not part of the protocol: production code never imports it (the
store-side steps it shares with the member's machine,
:func:`~coded_fl.shuffling.storage.silo.load_silo`
and :func:`~coded_fl.shuffling.storage.silo.commit_delivery`, live in
:mod:`~coded_fl.shuffling.storage.silo`).

It wires the sans-IO sessions together the way the Flower glue does (sender or silos ->
relay -> silos), on one process, and is what the tests and ``python -m simulations.shuffle``
run. ``drop_after={k: s}`` makes silo k vanish after the relay has handled s messages: it sends
and receives nothing more and commits nothing, so its store keeps the previous epoch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from coded_fl.shuffling.codec import SegmentBuffer, cached_subfiles
from coded_fl.shuffling.plan.planner import CENTRAL, Mode, ShufflePlan, plan_shuffle
from coded_fl.shuffling.plan.units import UnitId, UnitManifest
from coded_fl.shuffling.storage.session import (
    DeliveryReport,
    RelaySession,
    SenderSession,
    ShuffleMessage,
    SiloSession,
)
from coded_fl.shuffling.storage.silo import commit_delivery, load_silo
from coded_fl.shuffling.storage.store import UnitStore

__all__ = ["ShuffleOutcome", "silo_buffer", "simulate"]


@dataclass(frozen=True)
class ShuffleOutcome:
    """What one simulated shuffle did: the plan, every silo's report, the traffic.

    Attributes
    ----------
    plan
        The plan that ran.
    reports
        Every silo's delivery report, by silo index.
    received
        The units each silo received (decoded and verified), by silo index.
    messages_relayed
        Coded messages the relay forwarded (each counted once).
    payload_bytes
        Payload bytes of those messages (one piece each).
    wire_bytes
        The same with headers, nonces and tags.
    refused
        One line per message a silo refused.
    """

    plan: ShufflePlan
    reports: tuple[DeliveryReport, ...]
    received: tuple[dict[UnitId, bytes], ...]
    messages_relayed: int
    payload_bytes: int
    wire_bytes: int
    refused: tuple[str, ...]


def silo_buffer(plan: ShufflePlan, silo: int, data: Mapping[UnitId, bytes]) -> SegmentBuffer:
    """A silo's side information built from the full data (simulation): held units, caches.

    Parameters
    ----------
    plan
        The epoch's plan.
    silo
        The silo's index, ``0..K-1``.
    data
        Every unit's bytes, by unit id.

    Returns
    -------
    SegmentBuffer
        What :func:`~coded_fl.shuffling.storage.silo.load_silo` would read from a store that
        :func:`~coded_fl.shuffling.storage.silo.install_silo` filled with ``data``.
    """
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

    Parameters
    ----------
    data
        Every unit's bytes, by unit id.
    current, nxt
        The current and the next assignment (unit id -> silos).
    K, t, mode, coded, storage
        As for :func:`~coded_fl.shuffling.plan.planner.plan_shuffle`.
    group_key
        Seal the coded messages under this key (None: integrity only).
    epoch
        The epoch the messages are bound to and the stores commit to.
    drop_after
        ``{k: s}``: silo k vanishes after the relay has handled s messages.
    stores
        The silos' stores (index k for silo k): side information is read from them and every
        silo that did not drop commits its delivery to its store
        (:func:`~coded_fl.shuffling.storage.silo.commit_delivery`). None: side information from
        ``data``, nothing committed.
    tamper
        May rewrite messages on the relay (to test that silos refuse them; a refused message
        counts as not received).
    entropy
        Source of the nonces.

    Returns
    -------
    ShuffleOutcome
        The plan, every silo's report and units, the traffic.

    Raises
    ------
    ConfigurationError
        The plan cannot be made (storage too small, bad K or t).
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
