"""The shuffle's two state machines against their transition tables, in the style of h2's
``test_state_machines.py``: every (stage, packet type) pair that is not in a machine's table is
refused with the typed error and leaves the machine exactly as it was (a snapshot compared
before and after), for the member and for the relay; every driver call out of its stage is the
caller's error (LocalProtocolError) and changes nothing either. Exhaustive: every stage a real
epoch passes through, every packet type of the wire format."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from coded_fl.errors import InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling import (
    MemberStage,
    RelayCoordinator,
    RelayStage,
    ShuffleJob,
    ShuffleMember,
    UnitManifest,
    UnitStore,
    install_silo,
    plan_shuffle,
    shifted_assignment,
)
from coded_fl.shuffling.transport import coordinator as coordinator_module
from coded_fl.shuffling.transport import member as member_module
from coded_fl.shuffling.transport import wire
from coded_fl.shuffling.transport.wire import (
    DeliverReply,
    DeliverRequest,
    GroupKeyReply,
    GroupKeyRequest,
    Hello,
    HelloReply,
    JoinReply,
    JoinRequest,
    Packet,
    PlanReply,
    PlanRequest,
)

K = 3
#: Every packet type of the wire format (a new one must be added to the tables' tests too).
PACKETS: tuple[type[Packet], ...] = tuple(wire._KINDS.values())

#: The specification (the modules' docstring tables), written out independently of the code.
MEMBER_TABLE = {
    (MemberStage.IDLE, Hello),
    (MemberStage.HELLO, Hello),
    (MemberStage.HELLO, GroupKeyRequest),
    (MemberStage.HELLO, JoinRequest),
    (MemberStage.HELLO, PlanRequest),  # the relay continues the previous epoch's key
    (MemberStage.KEYED, Hello),
    (MemberStage.KEYED, GroupKeyRequest),
    (MemberStage.KEYED, JoinRequest),
    (MemberStage.KEYED, PlanRequest),
    (MemberStage.PLANNED, Hello),
    (MemberStage.PLANNED, PlanRequest),
    (MemberStage.PLANNED, DeliverRequest),
    (MemberStage.DELIVERED, Hello),
    (MemberStage.DELIVERED, DeliverRequest),
}
RELAY_TABLE = {
    (RelayStage.HELLO, HelloReply),
    (RelayStage.KEY, GroupKeyReply),
    (RelayStage.JOIN, JoinReply),
    (RelayStage.PLAN, PlanReply),
    (RelayStage.DELIVER, DeliverReply),
}
#: The stage in which each driver call is allowed (all others: LocalProtocolError).
DRIVER_CALLS = {
    "hello": RelayStage.HELLO,
    "close_hello": RelayStage.HELLO,
    "key_request": RelayStage.KEY,
    "close_key": RelayStage.KEY,
    "join_requests": RelayStage.JOIN,
    "close_join": RelayStage.JOIN,
    "plan_requests": RelayStage.PLAN,
    "close_plan": RelayStage.PLAN,
    "deliver_requests": RelayStage.DELIVER,
    "close_deliver": RelayStage.DELIVER,
}
ROLES = {"leader": 0, "silo": 1}


@dataclasses.dataclass
class Epoch:
    """One centralized epoch run by hand, with every machine saved at every stage."""

    members: dict[int, dict[MemberStage, bytes]]
    relays: dict[RelayStage, RelayCoordinator]
    packets: dict[type[Packet], Packet]
    stores: dict[int, UnitStore]


def _record(packets: dict[type[Packet], Packet], p: Packet) -> Packet:
    packets.setdefault(type(p), p)
    return p


@pytest.fixture(scope="module")
def epoch(tmp_path_factory) -> Epoch:
    rng = np.random.default_rng(3)
    data = {u: rng.bytes(int(rng.integers(40, 90))) for u in range(2 * K)}
    now = {u: frozenset({u % K}) for u in data}
    nxt = shifted_assignment(now, K)
    manifest = UnitManifest.from_data(data)
    plan0 = plan_shuffle(manifest, now, now, K=K, t=1)
    root = tmp_path_factory.mktemp("machines")
    stores = {m: UnitStore(root / f"member-{m}") for m in range(K + 1)}
    for k in range(K):
        install_silo(plan0, k, data, stores[k], epoch=0)
    stores[K].commit(add={manifest.spec(u): data[u] for u in data}, epoch=0)
    job = ShuffleJob.make(
        run_id="run-m", epoch=1, current=now, nxt=nxt, K=K, t=1, mode="centralized"
    )
    machines = {m: ShuffleMember(m) for m in range(K + 1)}
    members = {m: {MemberStage.IDLE: machines[m].to_bytes()} for m in machines}
    relay = RelayCoordinator(job)
    relays = {RelayStage.HELLO: copy.deepcopy(relay)}
    packets: dict[type[Packet], Packet] = {}

    def ask(m: int, p: Packet) -> Packet:
        return _record(packets, machines[m].receive(_record(packets, p), stores[m]))

    hello = relay.hello()
    for m in machines:
        relay.receive(m, ask(m, hello))
    assert relay.close_hello()
    relays[relay.stage] = copy.deepcopy(relay)
    for _name, requests, on_reply, close in relay.steps():
        for m, p in requests():
            members[m][machines[m].stage] = machines[m].to_bytes()
            on_reply(m, ask(m, p))
        assert close(), relay.aborted
        relays[relay.stage] = copy.deepcopy(relay)
    for m in machines:
        members[m][machines[m].stage] = machines[m].to_bytes()
    assert relay.finish().ok
    assert set(relays) == set(RelayStage)
    assert all(set(members[m]) == set(MemberStage) for m in ROLES.values())
    assert set(packets) == set(PACKETS)
    return Epoch(members, relays, packets, stores)


def test_the_tables_are_the_specification():
    assert set(member_module._TRANSITIONS) == MEMBER_TABLE
    assert set(coordinator_module._TRANSITIONS) == RELAY_TABLE


def test_stages_are_stored_in_their_old_form(epoch):
    for stage, raw in epoch.members[ROLES["silo"]].items():
        assert json.loads(raw)["stage"] == stage.value
        back = ShuffleMember.from_bytes(raw)
        assert back.stage is stage and back.stage == stage.value and back.to_bytes() == raw
    old = {"idle", "hello", "keyed", "planned", "delivered"}  # the strings before the Enum
    assert {s.value for s in MemberStage} == old


# ----------------------------------------------------------------------------- the member


def _member_snapshot(member: ShuffleMember, store: UnitStore) -> tuple[Any, ...]:
    return (member.to_bytes(), member.stage, store.epoch, store.units(), store.known_specs())


def _addressed(packet: Packet, member: int) -> Packet:
    """The packet as if addressed to ``member`` (so only the stage can refuse it)."""
    return packet if isinstance(packet, Hello) else dataclasses.replace(packet, member=member)


MEMBER_REFUSED = [
    (role, stage, kind)
    for role in ROLES
    for stage in MemberStage
    for kind in PACKETS
    if (stage, kind) not in MEMBER_TABLE
]


@pytest.mark.parametrize(
    ("role", "stage", "kind"),
    MEMBER_REFUSED,
    ids=[f"{r}-{s.value}-{k.__name__}" for r, s, k in MEMBER_REFUSED],
)
def test_member_refuses_every_pair_outside_its_table_and_changes_nothing(epoch, role, stage, kind):
    m = ROLES[role]
    member = ShuffleMember.from_bytes(epoch.members[m][stage])
    store = epoch.stores[m]
    packet = _addressed(epoch.packets[kind], m)
    before = _member_snapshot(member, store)
    with pytest.raises(RemoteProtocolError):
        member.receive(packet, store)
    assert _member_snapshot(member, store) == before


MEMBER_ACCEPTED = sorted(
    ((s, k) for s, k in MEMBER_TABLE if k is not Hello), key=lambda p: (p[0].value, p[1].__name__)
)


@pytest.mark.parametrize(
    ("stage", "kind"),
    MEMBER_ACCEPTED,
    ids=[f"{s.value}-{k.__name__}" for s, k in MEMBER_ACCEPTED],
)
@pytest.mark.parametrize("damage", ["digest", "member"])
def test_member_refuses_a_misaddressed_request_in_its_stage_and_changes_nothing(
    epoch, stage, kind, damage
):
    m = ROLES["silo"]
    member = ShuffleMember.from_bytes(epoch.members[m][stage])
    store = epoch.stores[m]
    packet = _addressed(epoch.packets[kind], m)
    packet = dataclasses.replace(
        packet, **({"digest": bytes(16)} if damage == "digest" else {"member": m + 1})
    )
    before = _member_snapshot(member, store)
    with pytest.raises(RemoteProtocolError):
        member.receive(packet, store)
    assert _member_snapshot(member, store) == before


def test_member_refused_inside_a_handler_changes_nothing(epoch, tmp_path):
    """The plan handler records the merged manifest, then finds the store lacks the silo's
    units: the refusal puts the manifest back (the state is as before the request)."""
    m = ROLES["silo"]
    member = ShuffleMember.from_bytes(epoch.members[m][MemberStage.KEYED])
    empty = UnitStore(tmp_path / "empty")
    before = _member_snapshot(member, empty)
    with pytest.raises(InputError, match="lacks units"):
        member.receive(_addressed(epoch.packets[PlanRequest], m), empty)
    assert _member_snapshot(member, empty) == before


# ----------------------------------------------------------------------------- the relay

_SHARED = ("job", "routing", "uncoded")  # immutable inputs, compared by identity


def _relay_snapshot(relay: RelayCoordinator) -> dict[str, Any]:
    return copy.deepcopy({k: v for k, v in vars(relay).items() if k not in _SHARED})


def _fresh(epoch: Epoch, stage: RelayStage) -> RelayCoordinator:
    return copy.deepcopy(epoch.relays[stage])


RELAY_REFUSED = [
    (stage, kind) for stage in RelayStage for kind in PACKETS if (stage, kind) not in RELAY_TABLE
]


@pytest.mark.parametrize(
    ("stage", "kind"),
    RELAY_REFUSED,
    ids=[f"{s.value}-{k.__name__}" for s, k in RELAY_REFUSED],
)
def test_relay_refuses_every_pair_outside_its_table_and_changes_nothing(epoch, stage, kind):
    relay = _fresh(epoch, stage)
    shared = [getattr(relay, k) for k in _SHARED]
    before = _relay_snapshot(relay)
    with pytest.raises(RemoteProtocolError):
        relay.receive(1, epoch.packets[kind])
    assert _relay_snapshot(relay) == before
    assert all(getattr(relay, k) is v for k, v in zip(_SHARED, shared, strict=True))
    assert relay.stage is stage


@pytest.mark.parametrize(
    ("stage", "kind"),
    sorted(RELAY_TABLE, key=lambda p: p[0].value),
    ids=[s.value for s, _ in sorted(RELAY_TABLE, key=lambda p: p[0].value)],
)
def test_relay_refuses_a_reply_for_another_job_in_its_stage_and_changes_nothing(epoch, stage, kind):
    relay = _fresh(epoch, stage)
    reply = dataclasses.replace(epoch.packets[kind], digest=bytes(16))
    before = _relay_snapshot(relay)
    with pytest.raises(RemoteProtocolError):
        relay.receive(reply.member, reply)
    assert _relay_snapshot(relay) == before


RELAY_MISUSED = [
    (stage, call) for stage in RelayStage for call, ok in DRIVER_CALLS.items() if stage is not ok
]


@pytest.mark.parametrize(
    ("stage", "call"),
    RELAY_MISUSED,
    ids=[f"{s.value}-{c}" for s, c in RELAY_MISUSED],
)
def test_relay_refuses_every_driver_call_out_of_its_stage_and_changes_nothing(epoch, stage, call):
    relay = _fresh(epoch, stage)
    before = _relay_snapshot(relay)
    with pytest.raises(LocalProtocolError):
        getattr(relay, call)()
    assert _relay_snapshot(relay) == before


def test_the_sample_packets_are_real_wire_packets(epoch):
    """The packets the refusals use went through the wire format (nothing hand-made)."""
    for p in epoch.packets.values():
        assert wire.decode(wire.encode(p)) == p
