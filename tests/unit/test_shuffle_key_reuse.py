"""A reshuffle continues the previous epoch's group key where that is safe (issue 31, item 5;
``coded_fl.shuffling.transport.keyreuse``): the same members skip both key stages; any change of
members, a chain at its limit, another trust in keys or a relay that claims a continuation for
another roster agrees a fresh key or is refused; no key reaches the relay."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from coded_fl.errors import RemoteProtocolError
from coded_fl.shuffling import ShuffleMember, run_loopback, shifted_assignment
from coded_fl.shuffling.transport import wire
from coded_fl.shuffling.transport.coordinator import RelayCoordinator
from coded_fl.shuffling.transport.keyreuse import KEY_REUSE_LIMIT, KeyCarry, ratchet, resume_id
from tests.unit.test_shuffling_transport import K, _batches, _data, _job, _world


class _Tap:
    """What the relay sees: every packet, both ways, decoded again."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []

    def __call__(self, raw: bytes) -> None:
        self.raw.append(raw)

    def kinds(self) -> set[str]:
        return {type(wire.decode(r)).__name__ for r in self.raw}


def _epochs(tmp_path, n, *, mode="decentralized", drop=None, reuse_keys=True):
    """n reshuffles in a row (epochs 1..n): the world after them (``runs``: result and tap per
    epoch; ``members``, ``stores``, ``data``; ``cur``: the assignment the stores now hold)."""
    data = _data()
    now, _ = _batches()
    stores, members = _world(tmp_path, data, now)
    cur = now
    out = []
    for e in range(1, n + 1):
        nxt = shifted_assignment(cur, K)
        tap = _Tap()
        res = run_loopback(
            _job(cur, nxt, mode, epoch=e),
            members,
            stores,
            tap=tap,
            drop=None if drop is None else (lambda s, m, e=e: drop(e, s, m)),
            reuse_keys=reuse_keys,
        )
        out.append((res, tap))
        if res.ok:
            cur = nxt
    return SimpleNamespace(runs=out, members=members, stores=stores, data=data, cur=cur)


def _holds(stores, data, assignment):
    for k in range(K):
        got = {u: stores[k].read_unit(u) for u in stores[k].units()}
        assert got == {u: b for u, b in data.items() if k in assignment[u]}


@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
def test_the_same_members_continue_the_key_and_skip_both_key_stages(tmp_path, mode):
    w = _epochs(tmp_path, 3, mode=mode)
    (first, tap1), (second, tap2), (third, tap3) = w.runs
    assert first.ok and second.ok and third.ok
    assert not first.keys_reused and second.keys_reused and third.keys_reused
    assert {"GroupKeyRequest", "JoinRequest"} <= tap1.kinds()
    for tap in (tap2, tap3):  # hello, plan, deliver: three round trips instead of five
        assert not {"GroupKeyRequest", "GroupKeyReply", "JoinRequest", "JoinReply"} & tap.kinds()
    _holds(w.stores, w.data, w.cur)
    # every member holds the same key, a one-way function of the last one
    assert len({w.members[m]._group_key for m in third.job.members}) == 1
    assert "continued" in second.lines()[1] and "agreed fresh" in first.lines()[1]


def test_the_relay_sees_no_key_and_ids_of_two_epochs_differ(tmp_path):
    w = _epochs(tmp_path, 3)
    seen = b"".join(r for _, tap in w.runs for r in tap.raw)
    carry = w.members[0]._carry
    assert carry is not None and carry.uses == 2
    for secret in (carry.key, w.members[0]._group_key):
        assert secret not in seen and secret.hex().encode() not in seen
    ids = set()
    for _, tap in w.runs[1:]:
        ids |= {
            p.resume
            for p in map(wire.decode, tap.raw)
            if isinstance(p, wire.HelloReply) and p.resume
        }
    assert len(ids) == 2  # one per continued epoch: not linkable to the key or each other


def test_a_member_keeps_only_the_newest_key(tmp_path):
    w = _epochs(tmp_path, 1)
    carry1 = w.members[1]._carry
    assert carry1 is not None and carry1.key.hex().encode() in w.members[1].to_bytes()
    nxt = shifted_assignment(w.cur, K)
    job = _job(w.cur, nxt, "decentralized", epoch=2)
    hello = RelayCoordinator(job).hello()
    probe = ShuffleMember.from_bytes(w.members[1].to_bytes())
    reply = probe.receive(hello, w.stores[1])
    assert reply.resume == resume_id(ratchet(carry1, epoch=2))
    assert probe.receive(hello, w.stores[1]) == reply  # the same hello, the same answer
    res = run_loopback(job, w.members, w.stores)
    assert res.ok and res.keys_reused
    state = w.members[1].to_bytes()
    assert carry1.key.hex().encode() not in state  # the epoch-1 key is gone
    assert w.members[1]._group_key == ratchet(carry1, epoch=2)
    assert w.members[1]._carry.key.hex().encode() in state
    _holds(w.stores, w.data, nxt)


def test_a_member_missing_from_the_hello_forces_a_fresh_key_then_and_after(tmp_path):
    def drop(e, stage, m):
        return e == 2 and stage == "hello" and m == 3

    w = _epochs(tmp_path, 3, drop=drop)
    (first, _), (second, tap2), (third, tap3) = w.runs
    assert first.ok and not first.keys_reused
    # epoch 2: silo 3 missed the hello; the others hold a key silo 3 holds too: fresh key
    assert not second.keys_reused and "JoinRequest" in tap2.kinds()
    # epoch 3: silo 3 is back, with the epoch-1 key; the others with epoch 2's: fresh again
    assert not third.keys_reused and "JoinRequest" in tap3.kinds()
    assert third.ok, third.lines()


def test_a_chain_is_at_most_the_limit_then_a_fresh_key(tmp_path):
    w = _epochs(tmp_path, KEY_REUSE_LIMIT + 1)
    assert all(res.ok for res, _ in w.runs)
    reused = [res.keys_reused for res, _ in w.runs]
    assert reused == [False] + [True] * (KEY_REUSE_LIMIT - 1) + [False]
    _holds(w.stores, w.data, w.cur)


def test_reuse_can_be_switched_off(tmp_path):
    w = _epochs(tmp_path, 3, reuse_keys=False)
    assert [res.keys_reused for res, _ in w.runs] == [False] * 3
    assert all(res.ok and "JoinRequest" in tap.kinds() for res, tap in w.runs)


def _offered(tmp_path):
    """After one epoch, every member has said hello to epoch 2 with an offer: the members,
    their stores, the hello and their replies, and the relay's PlanRequests (with the true
    roster), by member."""
    w = _epochs(tmp_path, 1)
    job = _job(w.cur, shifted_assignment(w.cur, K), "decentralized", epoch=2)
    relay = RelayCoordinator(job)
    hello = relay.hello()
    first = {}
    for node, m in enumerate(sorted(w.members)):
        first[m] = w.members[m].receive(hello, w.stores[m])
        relay.receive(node, first[m])
    assert relay.close_hello() and relay.keys_reused
    return SimpleNamespace(
        members=w.members,
        stores=w.stores,
        hello=hello,
        first=first,
        reqs=dict(relay.plan_requests()),
    )


def test_a_relay_that_continues_a_key_for_another_roster_is_refused(tmp_path):
    o = _offered(tmp_path)
    req = o.reqs[1]
    smaller = dataclasses.replace(req.roster, entries=req.roster.entries[:-1])
    before = o.members[1].to_bytes()
    with pytest.raises(RemoteProtocolError, match="only continued for the same members"):
        o.members[1].receive(dataclasses.replace(req, roster=smaller), o.stores[1])
    assert o.members[1].to_bytes() == before  # refused: nothing changed
    with pytest.raises(RemoteProtocolError, match="carries no roster"):
        o.members[1].receive(dataclasses.replace(req, roster=None), o.stores[1])
    reply = o.members[1].receive(req, o.stores[1])  # the true roster: planned
    assert isinstance(reply, wire.PlanReply) and o.members[1].stage.value == "planned"
    # the same hello again, after the continuation: the same offer as before
    again = o.members[1].receive(o.hello, o.stores[1])
    assert again.resume and again == o.first[1]
    restored = ShuffleMember.from_bytes(o.members[1].to_bytes())
    assert restored.receive(o.hello, o.stores[1]) == o.first[1]


def test_a_plan_request_to_a_member_that_offered_nothing_is_refused(tmp_path):
    o = _offered(tmp_path)
    member = ShuffleMember.from_bytes(o.members[2].to_bytes())
    member._resume_key = None  # as a member that had no key to offer
    with pytest.raises(RemoteProtocolError, match="offered no key to continue"):
        member.receive(o.reqs[2], o.stores[2])


def test_an_offer_for_other_members_is_not_taken(tmp_path):
    w = _epochs(tmp_path, 1)
    job = _job(w.cur, shifted_assignment(w.cur, K), "decentralized", epoch=2)
    relay = RelayCoordinator(job)
    hello = relay.hello()
    for node, m in enumerate(sorted(w.members)):
        reply = w.members[m].receive(hello, w.stores[m])
        if m == 0:  # a member (or a relay's lie) naming another member set
            reply = dataclasses.replace(reply, resume_members=(0, 1, 2))
        relay.receive(node, reply)
    assert relay.close_hello() and not relay.keys_reused
    assert relay.stage.value == "key"


def test_a_key_agreed_without_an_org_key_is_not_continued_with_one(tmp_path):
    w = _epochs(tmp_path, 1)
    org = bytes(range(32))
    with_org = {
        m: ShuffleMember.from_bytes(x.to_bytes(), org_key=org) for m, x in w.members.items()
    }
    job = _job(w.cur, shifted_assignment(w.cur, K), "decentralized", epoch=2)
    hello = RelayCoordinator(job).hello()
    assert all(not x.receive(hello, w.stores[m]).resume for m, x in with_org.items())


def test_old_member_state_loads_without_a_carried_key(tmp_path):
    w = _epochs(tmp_path, 1)
    state = json.loads(w.members[0].to_bytes())
    for k in ("carry", "resume_key", "resume_share"):
        state.pop(k)
    state["v"] = 1
    old = ShuffleMember.from_bytes(json.dumps(state).encode())
    assert old._carry is None and old.stage.value == "delivered"


def test_a_carried_key_refuses_replays_and_prints_no_key():
    c = KeyCarry(key=b"k" * 32, run_id="r", epoch=4, members=(0, 1), uses=0, org=False)
    assert not c.offers(run_id="r", epoch=4, org=False)  # not after its own epoch
    assert not c.offers(run_id="other", epoch=5, org=False)
    assert c.offers(run_id="r", epoch=5, org=False)
    assert ratchet(c, epoch=5) != ratchet(c, epoch=6)
    assert ratchet(c, epoch=5) != ratchet(dataclasses.replace(c, members=(0, 2)), epoch=5)
    assert "kkkk" not in repr(c) and (b"k" * 32).hex() not in repr(c)
    assert KeyCarry.from_json(c.to_json()) == c
