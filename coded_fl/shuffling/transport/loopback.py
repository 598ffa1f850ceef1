"""The shuffle transport without a network: relay and members in one process.

It drives a :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator` and the members'
:class:`~coded_fl.shuffling.transport.member.ShuffleMember` machines exactly as the Flower adapters
do (:mod:`strategies.shuffle`, :mod:`clients.shuffle`), and every packet goes through
:func:`~coded_fl.shuffling.transport.wire.encode` /
:func:`~coded_fl.shuffling.transport.wire.decode` and every
member's state through ``to_bytes``/``from_bytes`` on the way. Tests use it to check the
protocol (keys, drops, tampering) in milliseconds; the Flower test checks the same on Flower.

``drop(stage, member)`` returning True makes the member vanish at that stage (no reply; the
relay names it); ``tamper(stage, member, packet)`` may rewrite a request before the member
gets it (a relay that deviates); ``tap`` sees every encoded packet, both ways (what a relay
sees).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from coded_fl.errors import CodedFLError
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.coordinator import RelayCoordinator, ShuffleResult
from coded_fl.shuffling.transport.member import ShuffleMember
from coded_fl.shuffling.transport.wire import Packet, ShuffleJob, decode, encode

__all__ = ["run_loopback"]


def run_loopback(
    job: ShuffleJob,
    members: dict[int, ShuffleMember],
    stores: Mapping[int, UnitStore],
    *,
    drop: Callable[[str, int], bool] | None = None,
    lose: Callable[[str, int], bool] | None = None,
    tamper: Callable[[str, int, Packet], Packet] | None = None,
    tap: Callable[[bytes], None] | None = None,
    reuse_keys: bool = True,
) -> ShuffleResult:
    """Run one epoch through the relay's and the members' machines, in one process.

    Parameters
    ----------
    job
        The epoch's public job.
    members
        Member id -> its machine; updated in place (a machine is replaced only when it
        accepted the request, as a ClientApp saves its state).
    stores
        Member id -> its store.
    drop
        ``drop(stage, member)`` True: the member vanishes at that stage.
    lose
        ``lose(stage, member)`` True: the member handles that stage's request (its store
        may commit) but its reply never reaches the relay.
    tamper
        ``tamper(stage, member, packet)`` may rewrite a request before the member gets it.
    tap
        Sees every encoded packet, both ways.
    reuse_keys
        As for :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`.

    Returns
    -------
    ShuffleResult
        What the relay saw
        (:meth:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator.finish`).

    Raises
    ------
    ConfigurationError, InputError
        The job cannot work (raised by the relay before any member is asked).
    """
    relay = RelayCoordinator(job, reuse_keys=reuse_keys)
    gone = drop or (lambda stage, m: False)
    lost = lose or (lambda stage, m: False)

    def ask(stage: str, m: int, packet: Packet) -> Packet:
        if tamper is not None:
            packet = tamper(stage, m, packet)
        machine = ShuffleMember.from_bytes(members[m].to_bytes(), org_key=members[m].org_key)
        raw = encode(packet)
        if tap is not None:
            tap(raw)
        reply = encode(machine.receive(decode(raw), stores[m]))
        members[m] = machine  # saved only when the request was accepted
        if tap is not None:
            tap(reply)
        return decode(reply)

    hello = relay.hello()
    for node, m in enumerate(sorted(members)):
        if gone("hello", m):
            continue
        try:
            relay.receive(node, ask("hello", m, hello))
        except CodedFLError as exc:
            relay.note(f"node {node}: {exc}")
    if relay.close_hello():
        for name, requests, on_reply, close in relay.steps():
            for m, packet in requests():
                if gone(name, m):
                    relay.fail(m, "no reply (dropped)")
                    continue
                try:
                    reply = ask(name, m, packet)
                    if lost(name, m):
                        relay.fail(m, "no reply (lost)")
                        continue
                    on_reply(m, reply)
                except CodedFLError as exc:
                    relay.fail(m, str(exc))
            if not close():
                break
    return relay.finish()
