"""Sessions: sealing, refusals that name the culprit, drops, and consistent stores."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from coded_fl.errors import DecodingError, InputError, LocalProtocolError, RemoteProtocolError
from coded_fl.shuffling import (
    RelaySession,
    SegmentBuffer,
    SenderSession,
    SiloSession,
    UnitManifest,
    UnitStore,
    install_silo,
    plan_shuffle,
)
from simulations.runtime.shuffle_harness import silo_buffer, simulate

K = 4
KEY = bytes(range(32))


def _setup(mode="centralized", t=2, key=KEY, seed=0):
    rng = np.random.default_rng(seed)
    data = {u: rng.bytes(int(rng.integers(40, 120))) for u in range(2 * K)}
    now = {u: {u % K} for u in data}
    nxt = {u: {(u + 1) % K} for u in data}
    plan = plan_shuffle(UnitManifest.from_data(data), now, nxt, K=K, t=t, mode=mode)
    counter = itertools.count()

    def entropy(n: int) -> bytes:  # deterministic, distinct nonces for the tests
        return next(counter).to_bytes(n, "big")

    silos = [
        SiloSession(plan, k, silo_buffer(plan, k, data), epoch=3, group_key=key, entropy=entropy)
        for k in range(K)
    ]
    if mode == "centralized":
        full = SegmentBuffer.for_plan(plan)
        for n, u in enumerate(plan.manifest.ids):
            full.put_unit(n, plan.layout.pad(data[u]))
        msgs = SenderSession(plan, full, epoch=3, group_key=key, entropy=entropy).messages()
    else:
        msgs = [m for s in silos for m in s.outgoing()]
    return data, plan, silos, msgs


@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
@pytest.mark.parametrize("key", [KEY, None], ids=["sealed", "integrity-only"])
def test_corrupted_replayed_rerouted_messages_are_refused_and_change_nothing(mode, key):
    data, plan, silos, msgs = _setup(mode, key=key)
    relay = RelaySession(plan, epoch=3)
    msg = msgs[0]
    k = min(relay.route(msg))
    target = silos[k]
    body = bytearray(msg.body)
    body[0] ^= 1
    bad = [
        dataclasses.replace(msg, body=bytes(body)),  # corrupted in transit
        dataclasses.replace(msg, epoch=2),  # replayed from another epoch
    ]
    for m in bad:
        with pytest.raises(RemoteProtocolError) as err:
            target.receive(m)
        assert f"message {msg.index}" in str(err.value) or "another shuffle" in str(err.value)
        assert err.value.sender == msg.sender
    # re-routed: claims to be another message of the same sender
    same_sender = [m for m in msgs if m.sender == msg.sender and m.index != msg.index]
    other = next(m for m in same_sender if k in plan.receivers(m.index))
    with pytest.raises(RemoteProtocolError, match=f"message {other.index}"):
        target.receive(dataclasses.replace(msg, index=other.index))
    with pytest.raises(RemoteProtocolError, match="sender"):
        relay.route(dataclasses.replace(other, sender=(other.sender + 1) % K))
    # nothing changed: the genuine messages still decode everything
    for m in msgs:
        for j in plan.receivers(m.index):
            silos[j].receive(m)
    for j, s in enumerate(silos):
        rep = s.finish()
        assert rep.complete, rep
        assert all(data[u] == b for u, b in s.units().items())
        assert len(rep.received) == len(plan.needs[j])


def test_duplicates_strays_and_misuse():
    _, plan, silos, msgs = _setup()
    relay = RelaySession(plan, epoch=3)
    m = msgs[0]
    relay.route(m)
    assert m.index not in relay.pending() and len(relay.pending()) == plan.n_messages - 1
    assert relay.silent_senders() == sorted({int(x) for x in plan.msg_sender})
    with pytest.raises(RemoteProtocolError, match="relayed twice"):
        relay.route(m)
    k = min(plan.receivers(m.index))
    silos[k].receive(m)
    with pytest.raises(RemoteProtocolError, match="arrived twice"):
        silos[k].receive(m)
    stranger = next(j for j in range(K) if j not in plan.receivers(m.index))
    with pytest.raises(RemoteProtocolError, match="nothing for silo"):
        silos[stranger].receive(m)
    with pytest.raises(RemoteProtocolError, match="no message"):
        silos[k].receive(dataclasses.replace(m, index=10**6))
    with pytest.raises(LocalProtocolError, match="centralized plans only"):
        dec_plan = _setup("decentralized")[1]
        SenderSession(dec_plan, SegmentBuffer.for_plan(dec_plan), epoch=0)
    silos[k].finish()
    with pytest.raises(LocalProtocolError, match="finished"):
        silos[k].receive(msgs[1])
    with pytest.raises(InputError, match="32 bytes"):
        SiloSession(plan, 0, SegmentBuffer.for_plan(plan), epoch=3, group_key=b"short")


def test_keys_never_show():
    _, _plan, silos, msgs = _setup()
    text = repr(silos[0].__dict__) + repr(msgs[0]) + repr(silos[0]._sealer)
    assert KEY.hex() not in text and repr(KEY) not in text


def test_sender_without_a_unit_and_silo_without_side_information_are_named():
    _data, plan, _, _ = _setup()
    partial = SegmentBuffer.for_plan(plan)
    with pytest.raises(InputError, match="sender lacks data of units"):
        SenderSession(plan, partial, epoch=0).messages()
    _, _, _, msgs = _setup(key=None)
    m = msgs[0]
    k = min(plan.receivers(m.index))
    blind = SiloSession(plan, k, SegmentBuffer.for_plan(plan), epoch=3)
    with pytest.raises(DecodingError, match="lacks side information"):
        blind.receive(m)
    assert blind.report().missing_messages  # refused, still missing


def test_wrong_data_is_never_handed_out():
    # a sender whose copy of unit 1 is wrong: every message authenticates, the unit hash fails
    data, plan, silos, _ = _setup(key=None)
    bad = dict(data)
    bad[1] = bytes(len(data[1]))
    full = SegmentBuffer.for_plan(plan)
    for n, u in enumerate(plan.manifest.ids):
        full.put_unit(n, plan.layout.pad(bad[u]))
    for m in SenderSession(plan, full, epoch=3).messages():
        for j in plan.receivers(m.index):
            silos[j].receive(m)
    needer = next(k for k in range(K) if 1 in [plan.manifest.ids[n] for n in plan.needs[k]])
    rep = silos[needer].finish()
    assert rep.failed == (1,) and 1 not in silos[needer].units() and not rep.complete


@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
def test_a_silo_dropping_mid_delivery_leaves_every_store_consistent(tmp_path, mode):
    rng = np.random.default_rng(5)
    data = {u: rng.bytes(200) for u in range(2 * K)}
    now = {u: {u % K} for u in data}
    nxt = {u: {(u + 1) % K} for u in data}
    plan = plan_shuffle(UnitManifest.from_data(data), now, nxt, K=K, t=1, mode=mode)
    stores = [UnitStore(tmp_path / f"silo{k}") for k in range(K)]
    for k in range(K):
        install_silo(plan, k, data, stores[k], epoch=0)
    before = [s.units() for s in stores]
    out = simulate(data, now, nxt, K=K, t=1, mode=mode, stores=stores, drop_after={2: 5})
    rep = out.reports
    assert stores[2].units() == before[2] and stores[2].epoch == 0  # gone: old epoch intact
    for k in range(K):
        for u in stores[k].units():
            assert stores[k].read_unit(u) == data[u]  # never a wrong byte on disk
        if rep[k].complete and k != 2:
            assert set(stores[k].units()) == {u for u in data if (u + 1) % K == k}
            assert stores[k].epoch == 1
        elif k != 2:  # incomplete: keeps its old units, adds what it verified, names the rest
            assert set(before[k]) <= set(stores[k].units())
            assert rep[k].missing and (mode == "centralized" or 2 in rep[k].waiting_on)
            assert stores[k].epoch == 0
    if mode == "decentralized":
        assert any(2 in r.waiting_on for r in rep if r.silo != 2)


def test_store_detects_damage_and_sweeps_leftovers(tmp_path):
    store = UnitStore(tmp_path)
    data = {"x/y": b"abc", 3: b"defg"}
    m = UnitManifest.from_data(data)
    store.commit(add={s: data[s.unit_id] for s in m}, cache={3: b"zz"}, epoch=4)
    assert set(store.units()) == {"x/y", 3} and store.read_cache(3) == b"zz"
    with pytest.raises(InputError, match="does not match"):
        store.commit(add={m.spec(3): b"nope"})
    (tmp_path / "units" / ".tmp-left").write_bytes(b"junk")
    (tmp_path / "units" / "i99-0.bin").write_bytes(b"junk")
    assert len(store.sweep()) == 2
    store.unit_path(3).write_bytes(b"defX")
    with pytest.raises(DecodingError, match="damaged"):
        store.read_unit(3)
    store.commit(drop=[3])
    assert store.units() == ("x/y",)
    with pytest.raises(InputError, match="not in this store"):
        store.unit_path(3)
