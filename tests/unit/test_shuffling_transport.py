"""The shuffle transport's protocol without a network (loopback): exact stores, the coded plan's
bytes, only ciphertext past the relay, drops at every stage, a deviating relay, bad input."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.shuffling import (
    SegmentBuffer,
    ShuffleJob,
    ShuffleMember,
    UnitManifest,
    UnitStore,
    cyclic_assignment,
    digest,
    encode,
    install_silo,
    plan_shuffle,
    relay_plan,
    run_loopback,
    shifted_assignment,
)
from coded_fl.shuffling.transport import wire
from coded_fl.shuffling.transport.coordinator import RelayCoordinator

K = 4


def _data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return {u: rng.bytes(int(rng.integers(300, 700))) for u in range(n)}


def _world(tmp_path, data, current, *, t=2, org_key=None):
    manifest = UnitManifest.from_data(data)
    plan0 = plan_shuffle(manifest, current, current, K=K, t=t)
    stores = {m: UnitStore(tmp_path / f"member-{m}") for m in range(K + 1)}
    for k in range(K):
        install_silo(plan0, k, data, stores[k], epoch=0)
    stores[K].commit(add={manifest.spec(u): data[u] for u in data}, epoch=0)
    members = {m: ShuffleMember(m, org_key=org_key) for m in range(K + 1)}
    return stores, members


def _job(current, nxt, mode, *, t=2, epoch=1, **kw):
    return ShuffleJob.make(
        run_id="run-1", epoch=epoch, current=current, nxt=nxt, K=K, t=t, mode=mode, **kw
    )


def _check_stores(res, stores, data, current, nxt):
    """Every store is consistent: complete -> exactly the new units at the new epoch; anything
    else -> the old units (plus complete, verified new ones) at the old epoch."""
    for s in res.silos:
        st = stores[s.silo]
        held = set(st.units())
        for u in held:
            assert st.read_unit(u) == data[u]
        old = {u for u in data if s.silo in current[u]}
        new = {u for u in data if s.silo in nxt[u]}
        if s.status == "complete":
            assert st.epoch == res.job.epoch and held == new
            assert not s.missing and set(s.received) == new - old
        else:
            assert st.epoch == 0
            assert held == old | set(s.received)
            assert set(s.received) | set(s.missing) | set(s.failed) == new - old


def _batches(n=8):
    now = {u: frozenset({u % K}) for u in range(n)}
    return now, shifted_assignment(now, K)


@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
@pytest.mark.parametrize("t", [1, 2, 3])
@pytest.mark.parametrize("placement", ["batches", "gradient-code"])
def test_loopback_delivers_exactly_the_coded_plans_bytes_and_only_ciphertext(
    tmp_path, mode, t, placement
):
    data = _data()
    if placement == "batches":
        now, nxt = _batches()
    else:  # s = 1: every partition on 2 silos; the partitions move one silo on
        parts = [[u, u + K] for u in range(K)]
        now = cyclic_assignment(K, 1, parts)
        nxt = shifted_assignment(now, K)
    stores, members = _world(tmp_path, data, now, t=t)
    seen: list[bytes] = []
    res = run_loopback(_job(now, nxt, mode, t=t), members, stores, tap=seen.append)
    assert res.ok, res.lines()
    _check_stores(res, stores, data, now, nxt)
    manifest = UnitManifest.from_data(data)
    plan = plan_shuffle(manifest, now, nxt, K=K, t=t, mode=mode)
    uncoded = plan_shuffle(manifest, now, nxt, K=K, t=t, mode=mode, coded=False)
    assert res.plan_id == plan.plan_id
    assert res.uplink_bytes == plan.bytes_moved == res.relayed * plan.layout.piece_size
    assert res.uncoded_uplink_bytes == uncoded.bytes_moved
    assert res.load == pytest.approx(plan.formula_load())
    if mode == "centralized" or t >= 2:
        assert res.uplink_bytes < res.uncoded_uplink_bytes
    # point-to-point fan-out: each silo gets as many bytes as it misses, coded or not
    assert res.downlink_bytes == res.uncoded_downlink_bytes
    # the relay saw no unit, no coded payload in clear, no unit hash
    full = SegmentBuffer.for_plan(plan)
    for n, u in enumerate(plan.manifest.ids):
        full.put_unit(n, plan.layout.pad(data[u]))
    payloads = encode(plan, full)
    blob = b"".join(seen)
    for b in data.values():
        assert (
            b[100:132] not in blob and digest(b) not in blob and digest(b).hex() not in blob.hex()
        )
    for p in payloads:
        if len(set(p[:32].tobytes())) > 8:
            assert p[:32].tobytes() not in blob
    json.dumps(res.summary())


def test_the_relay_routes_like_the_members_from_the_public_job_alone():
    rng = np.random.default_rng(3)
    for _ in range(12):
        n = int(rng.integers(3, 10))
        data = {f"unit-{i}": rng.bytes(int(rng.integers(1, 50))) for i in range(n)}
        t = int(rng.integers(0, K + 1))
        mode = "centralized" if rng.random() < 0.5 else "decentralized"
        now = {
            u: frozenset(rng.choice(K, size=int(rng.integers(1, 3)), replace=False).tolist())
            for u in data
        }
        nxt = {
            u: frozenset(rng.choice(K, size=int(rng.integers(1, 3)), replace=False).tolist())
            for u in data
        }
        plan = plan_shuffle(UnitManifest.from_data(data), now, nxt, K=K, t=t, mode=mode)
        mine = relay_plan(_job(now, nxt, mode, t=t))
        for name in ("msg_sender", "msg_ptr", "term_row", "term_silo"):
            assert np.array_equal(getattr(plan, name), getattr(mine, name)), name
        assert mine.plan_id != plan.plan_id  # it cannot know the manifest


# ----------------------------------------------------------------------------- drops

CASES = [
    # (mode, stage, member, expected statuses of silos 0..3, aborted?)
    ("centralized", "hello", 2, ["complete", "complete", "absent", "complete"], False),
    ("centralized", "join", 2, ["complete", "complete", "dropped", "complete"], False),
    ("centralized", "plan", 2, ["complete", "complete", "dropped", "complete"], False),
    ("centralized", "deliver", 2, ["complete", "complete", "dropped", "complete"], False),
    ("centralized", "hello", 4, ["aborted"] * 4, True),
    ("centralized", "join", 4, ["aborted"] * 4, True),
    ("centralized", "plan", 4, ["aborted"] * 4, True),
    ("centralized", "key", 0, ["aborted"] * 4, True),
    ("decentralized", "key", 0, ["aborted"] * 4, True),
    ("decentralized", "deliver", 2, ["complete", "complete", "dropped", "complete"], False),
    # silo 2 never sends: every other silo misses what only its messages carried
    ("decentralized", "hello", 2, ["incomplete", "incomplete", "absent", "incomplete"], False),
    ("decentralized", "plan", 2, ["incomplete", "incomplete", "dropped", "incomplete"], False),
]


@pytest.mark.parametrize("mode,stage,member,statuses,aborted", CASES)
def test_a_member_that_drops_is_named_and_every_store_stays_consistent(
    tmp_path, mode, stage, member, statuses, aborted
):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)
    res = run_loopback(
        _job(now, nxt, mode), members, stores, drop=lambda s, m: (s, m) == (stage, member)
    )
    assert [s.status for s in res.silos] == statuses, res.lines()
    assert bool(res.aborted) == aborted
    assert any(f"{'central sender' if member == K else f'silo {member}'}:" in e for e in res.errors)
    _check_stores(res, stores, data, now, nxt)
    for s in res.silos:
        if s.status in ("dropped", "absent", "aborted"):
            assert set(s.missing) == {u for u in data if s.silo in nxt[u]}  # all it was to get
        if s.status == "incomplete":
            assert member in s.waiting_on and s.missing


def test_a_dropped_silo_catches_up_in_a_later_epoch_from_the_caches(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)
    first = run_loopback(
        _job(now, nxt, "centralized"), members, stores, drop=lambda s, m: (s, m) == ("deliver", 1)
    )
    assert [s.status for s in first.silos] == ["complete", "dropped", "complete", "complete"]
    # silo 1 kept its epoch-0 units; silo 2 completed and gave up units 2 and 6, which silo 1
    # never got: no silo holds them in full any more, but every silo caches their subfiles
    actual = {u: set(nxt[u]) for u in data}
    for u in data:
        if u % K == 1:
            actual[u] = {0, 1}
        elif u % K == 2:
            actual[u] = set()
    again = run_loopback(_job(actual, nxt, "decentralized", epoch=2), members, stores)
    assert again.ok, again.lines()
    assert [s.status for s in again.silos] == ["complete"] * 4
    assert set(again.silos[1].received) == {2, 6}
    for k in range(K):
        assert stores[k].epoch == 2
        assert {u: stores[k].read_unit(u) for u in stores[k].units()} == {
            u: b for u, b in data.items() if k in nxt[u]
        }


# ----------------------------------------------------------------- a relay that deviates


def test_corrupted_and_misrouted_messages_are_refused_and_reported(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)

    def tamper(stage, m, p):
        if stage == "deliver" and m == 1:
            msgs = list(p.messages)
            body = bytearray(msgs[0].body)
            body[5] ^= 0xFF
            msgs[0] = dataclasses.replace(msgs[0], body=bytes(body))
            return dataclasses.replace(p, messages=tuple(msgs))
        return p

    res = run_loopback(_job(now, nxt, "centralized"), members, stores, tamper=tamper)
    s1 = res.silos[1]
    assert s1.status == "incomplete" and s1.missing and s1.refused
    assert "fails authentication" in s1.refused[0]
    assert all(res.silos[k].status == "complete" for k in (0, 2, 3))
    _check_stores(res, stores, data, now, nxt)


def test_a_corrupted_manifest_share_names_its_member(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)

    def tamper(stage, m, p):
        if stage == "plan" and m == 3:
            shares = [(k, b if k != 1 else b[:-1] + bytes([b[-1] ^ 1])) for k, b in p.shares]
            return dataclasses.replace(p, shares=tuple(shares))
        return p

    res = run_loopback(_job(now, nxt, "decentralized"), members, stores, tamper=tamper)
    assert res.silos[3].status == "dropped"
    assert any("silo 1: manifest share fails authentication" in e for e in res.errors)


@pytest.mark.parametrize("org", [None, bytes(range(32))])
def test_a_substituted_public_key(tmp_path, org):
    """Without an organisation key the relay is trusted to pass keys (documented); with one,
    a substituted key stops the epoch before any group key is sealed."""
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now, org_key=org)
    from coded_fl.crypto import KeyPair

    mallory = KeyPair.generate()

    def tamper(stage, m, p):  # everyone but silo 2 is shown mallory's key for silo 2
        if stage in ("key", "join", "plan") and m != 2:
            entries = tuple(
                dataclasses.replace(e, public_key=mallory.public_bytes) if e.member == 2 else e
                for e in p.roster.entries
            )
            return dataclasses.replace(p, roster=dataclasses.replace(p.roster, entries=entries))
        return p

    res = run_loopback(_job(now, nxt, "centralized"), members, stores, tamper=tamper)
    if org is None:  # the leader sealed the key for mallory (test_shuffling_groupkey shows the
        # relay opens it); silo 2's roster differs, so its box fails: dropped, others complete
        assert [s.status for s in res.silos] == ["complete", "complete", "dropped", "complete"]
    else:
        assert res.aborted and "did not share the group key" in res.aborted
        assert "not vouched for" in res.aborted
        assert all(st.epoch == 0 for st in stores.values())


# ----------------------------------------------------------------------------- bad input


def test_storage_too_small_is_refused_before_anyone_is_asked():
    now, nxt = _batches()
    with pytest.raises(ConfigurationError, match="storage too small: silo 0"):
        _job(now, nxt, "centralized", storage=3.0)
    assert _job(now, nxt, "centralized", storage=5.0).storage == 5.0


def test_units_missing_from_every_silo(tmp_path):
    data = _data()
    now, nxt = _batches()
    orphan = dict(now)
    orphan[5] = frozenset()
    with pytest.raises(InputError, match=r"units missing from every silo: \[5\].*t = 0"):
        RelayCoordinator(_job(orphan, nxt, "decentralized", t=0))
    # centralized: the sender vouches for every unit, so its store must have them
    stores, members = _world(tmp_path, data, now)
    stores[K].commit(drop=[5])
    res = run_loopback(_job(now, nxt, "centralized"), members, stores)
    assert res.aborted and "units missing from every silo: [5]" in res.aborted
    assert "central sender's store lacks them" in res.aborted
    assert all(s.status == "aborted" for s in res.silos)
    _check_stores(res, stores, data, now, nxt)


def test_a_silo_whose_store_lacks_its_units_is_named(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)
    stores[2].commit(drop=[2])
    res = run_loopback(_job(now, nxt, "centralized"), members, stores)
    assert res.silos[2].status == "dropped"
    assert "store lacks units [2]" in res.silos[2].error
    assert [res.silos[k].status for k in (0, 1, 3)] == ["complete"] * 3


def test_t0_fans_each_moved_unit_out_once_to_every_silo_that_needs_it(tmp_path):
    """Decentralized, t = 0, the gradient code's replicas (s = 1: every unit on 2 silos, moving
    to 2 others): each moved unit is uploaded once by its lowest holder and the relay forwards
    it to both new holders; plain copying uploads it once per receiver. Real AES-GCM, real
    stores; every silo ends with exactly its new units."""
    data = _data()
    parts = [[u, u + K] for u in range(K)]
    now = cyclic_assignment(K, 1, parts)
    nxt = {u: frozenset((k + 2) % K for k in h) for u, h in now.items()}
    stores, members = _world(tmp_path, data, now, t=0)
    res = run_loopback(_job(now, nxt, "decentralized", t=0), members, stores)
    assert res.ok, res.lines()
    _check_stores(res, stores, data, now, nxt)
    plan = plan_shuffle(UnitManifest.from_data(data), now, nxt, K=K, t=0, mode="decentralized")
    for i in range(plan.n_messages):  # one segment, one term per receiver, from a holder
        rows, silos = plan.terms(i)
        assert len(set(rows.tolist())) == 1 and len(silos) == 2
        assert int(plan.msg_sender[i]) in plan.holders[int(rows[0])]
    assert res.messages == len(data) and res.load == res.formula_load == len(data)
    assert res.uplink_bytes * 2 == res.uncoded_uplink_bytes  # 1/(s + 1) of plain copying
    assert res.downlink_bytes == res.uncoded_downlink_bytes  # each receiver still gets its copy


def test_a_sending_silo_whose_store_is_behind_the_job_stops_the_epoch_at_the_hello(tmp_path):
    """The server's view of a store can fall behind (a delivery reply lost after the commit):
    a decentralized job that lists a silo as holding (and so sending) units its store lacks
    stops at the hello, before any key or data moves, and every silo's reported holdings come
    back so that the job can be planned again."""
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now, t=0)
    stores[1].commit(drop=[1])  # silo 1 holds units 1 and 5 now; the job says 1 and 5
    res = run_loopback(_job(now, nxt, "decentralized", t=0), members, stores)
    assert res.aborted.startswith("stale view of the stores: silo 1 lacks 1 unit(s)")
    assert "[1]" in res.aborted and res.relayed == 0 and res.uplink_bytes == 0
    assert all(s.status == "aborted" for s in res.silos)
    assert res.silos[1].holdings == (5,)
    assert res.silos[0].holdings == (0, 4)
    assert all(st.epoch == 0 for st in stores.values())  # nothing committed anywhere
    # planned again from what the stores reported, the epoch goes through
    fixed = {u: frozenset(k for k in range(K) if u in res.silos[k].holdings) for u in data}
    fixed[1] = frozenset({0})  # unit 1 survives on silo 0
    stores[0].commit(add={UnitManifest.from_data(data).spec(1): data[1]})
    res2 = run_loopback(_job(fixed, nxt, "decentralized", t=0, epoch=2), members, stores)
    assert res2.ok, res2.lines()


def test_holders_that_disagree_on_a_unit_stop_the_epoch(tmp_path):
    data = _data()
    parts = [[u, u + K] for u in range(K)]
    now = cyclic_assignment(K, 1, parts)  # unit 0 on silos 0 and 3
    nxt = shifted_assignment(now, K)
    stores, members = _world(tmp_path, data, now)
    spec = UnitManifest.from_data({0: b"another version"}).spec(0)
    stores[3].commit(add={spec: b"another version"})
    res = run_loopback(_job(now, nxt, "decentralized"), members, stores)
    assert res.aborted and "disagree on unit 0" in res.aborted
    assert all(st.epoch == 0 for st in stores.values())


def test_a_stale_or_replayed_job_is_refused(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)
    assert run_loopback(_job(now, nxt, "centralized"), members, stores).ok
    res = run_loopback(_job(now, nxt, "centralized"), members, stores)  # epoch 1 again
    assert res.aborted or not res.ok
    assert any("not after this silo's store epoch 1" in e for e in res.errors)


# ----------------------------------------------------------------------------- member machine


def test_member_state_round_trips_and_repeated_requests_get_the_same_answer(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)
    job = _job(now, nxt, "decentralized")
    relay = RelayCoordinator(job)
    hello = relay.hello()
    first = {m: members[m].receive(hello, stores[m]) for m in range(K)}
    assert members[0].receive(hello, stores[0]) == first[0]  # same key for the same job
    for m in range(K):
        relay.receive(m, first[m])
    assert relay.close_hello()
    req = relay.key_request()
    a = members[0].receive(req, stores[0])
    again = ShuffleMember.from_bytes(members[0].to_bytes())
    b = again.receive(req, stores[0])
    assert a.boxes == b.boxes  # never sealed twice under the same nonces
    assert "private" not in repr(members[0]) and members[0].to_bytes().hex() not in repr(again)
    with pytest.raises(RemoteProtocolError, match="arrived in stage keyed"):
        members[0].receive(wire.DeliverRequest(job.digest(), 0, ()), stores[0])
    with pytest.raises(RemoteProtocolError, match="another shuffle job"):
        members[1].receive(dataclasses.replace(req, digest=bytes(16), member=1), stores[1])
    with pytest.raises(InputError, match="damaged"):
        ShuffleMember.from_bytes(b"{}")


def test_a_delivery_is_committed_once(tmp_path):
    data = _data()
    now, nxt = _batches()
    stores, members = _world(tmp_path, data, now)
    packets = {}

    def keep(stage, m, p):
        packets[(stage, m)] = p
        return p

    assert run_loopback(_job(now, nxt, "centralized"), members, stores, tamper=keep).ok
    first = members[1].receive(packets[("deliver", 1)], stores[1])
    assert first.store_epoch == 1 and first.report.complete
    assert set(stores[1].units()) == {u for u in data if nxt[u] == {1}}


# ----------------------------------------------------------------------------- wire


def test_every_packet_round_trips_and_garbage_is_refused():
    now, nxt = _batches()
    job = _job(now, nxt, "centralized")
    d = job.digest()
    from coded_fl.shuffling.storage.session import DeliveryReport, ShuffleMessage
    from coded_fl.shuffling.transport.groupkey import Roster

    roster = Roster.of("run-1", 1, {0: bytes(range(32)), 3: bytes(32)}, {0: b"t"})
    msg = ShuffleMessage(bytes(16), 1, 7, -1, bytes(12), b"body")
    rep = DeliveryReport(2, ("a", 1), (3,), (), (4,), (-1,))
    packets = [
        wire.Hello(d, -1, job),
        wire.HelloReply(d, 2, b"k" * 32, b"", None),
        wire.HelloReply(d, 2, b"k" * 32, b"tag", 5),
        wire.HelloReply(d, 2, b"k" * 32, b"", 5, ("a", 1)),
        wire.HelloReply(d, 2, b"k" * 32, b"", None, ()),
        wire.GroupKeyRequest(d, 0, roster),
        wire.GroupKeyReply(d, 0, ((3, b"box"),), b"share"),
        wire.JoinRequest(d, 3, roster, b"box"),
        wire.JoinReply(d, 3, b"share"),
        wire.PlanRequest(d, 1, ((0, b"a"), (3, b""))),
        wire.PlanReply(d, 4, bytes(16), (msg, msg)),
        wire.DeliverRequest(d, 2, (msg,)),
        wire.DeliverReply(d, 2, rep, ("message 3: refused",), 1),
    ]
    for p in packets:
        raw = wire.encode(p)
        assert wire.decode(raw) == p
        for bad in (raw[:-1], raw + b"\0", b"XXXX" + raw[4:], raw[:4] + b"\x09" + raw[5:]):
            with pytest.raises(RemoteProtocolError):
                wire.decode(bad)
    raw = wire.encode(wire.JoinReply(d, 3, b"share"))
    forged = raw.replace(b'"share":0', b'"share":7')
    with pytest.raises(RemoteProtocolError, match="blob"):
        wire.decode(forged)
    import struct

    for holdings in (["a", True], {"a": 1}, [1.5], "a"):  # holdings: a list of unit ids
        reply = {"digest": d.hex(), "member": 2, "public_key": "6b" * 32, "tag": ""}
        body = json.dumps({**reply, "store_epoch": 5, "holdings": holdings}).encode()
        raw = (
            struct.pack("<4sBBI", b"CFLS", wire.VERSION, 2, len(body)) + body + struct.pack("<I", 0)
        )
        with pytest.raises(RemoteProtocolError):
            wire.decode(raw)
    bad_job = dict(job.to_json(), K=0)
    body = json.dumps({"digest": d.hex(), "member": -1, "job": bad_job}).encode()
    import struct

    raw = struct.pack("<4sBBI", b"CFLS", wire.VERSION, 1, len(body)) + body + struct.pack("<I", 0)
    with pytest.raises(RemoteProtocolError, match="invalid shuffle job"):
        wire.decode(raw)


def test_one_cache_serves_both_settings_and_stores_know_every_spec(tmp_path):
    """Subfiles are aligned to t, so a run may switch between a central sender and silo-to-silo
    delivery without rebuilding caches; every commit records the units' specs."""
    rng = np.random.default_rng(5)
    for k_silos, t in [(3, 1), (4, 2), (5, 2), (5, 3), (6, 4)]:
        data = {u: rng.bytes(int(rng.integers(1, 999))) for u in range(k_silos)}
        now = {u: {u} for u in data}
        m = UnitManifest.from_data(data)
        lay = {
            mode: plan_shuffle(m, now, now, K=k_silos, t=t, mode=mode).layout
            for mode in ("centralized", "decentralized")
        }
        assert lay["centralized"].subfile_size == lay["decentralized"].subfile_size
        assert lay["centralized"].unit_size == lay["decentralized"].unit_size
    data = _data()
    now, _ = _batches()
    stores, _ = _world(tmp_path, data, now)
    assert stores[1].known_specs() == {s.unit_id: s for s in UnitManifest.from_data(data)}


def test_wire_bytes_is_what_encode_message_writes() -> None:
    from coded_fl.shuffling.storage.session import ShuffleMessage

    msg = ShuffleMessage(
        plan_id=bytes(16), epoch=2, index=5, sender=1, nonce=bytes(12), body=bytes(40)
    )
    assert msg.wire_bytes == len(wire.encode_message(msg))


def test_the_xor_codec_refuses_misshapen_buffers_with_a_typed_error() -> None:
    from coded_fl.shuffling import codec, plan_shuffle
    from simulations.runtime.shuffle_harness import silo_buffer

    data = {u: bytes([u]) * 64 for u in range(8)}
    manifest = UnitManifest.from_data(data)
    plan = plan_shuffle(
        manifest,
        {u: [u % 4] for u in range(8)},
        {u: [(u + 1) % 4] for u in range(8)},
        K=4,
        t=1,
    )
    sender = silo_buffer(plan, 0, data)
    n = min(plan.n_messages, 2)
    idx = np.arange(n)
    wide = np.zeros((n, 2 * plan.layout.piece_size), dtype=np.uint8)
    with pytest.raises(InputError, match="C-contiguous"):
        codec.encode(plan, sender, idx, out=wide[:, ::2])  # right shape, not contiguous
    with pytest.raises(InputError, match="bytes each"):
        codec.decode(plan, 1, silo_buffer(plan, 1, data), idx, np.zeros(3, dtype=np.uint8))


def test_a_job_refuses_nan_storage_and_boolean_sizes() -> None:
    base = dict(
        run_id="r",
        epoch=1,
        K=2,
        t=1,
        current={u: [u % 2] for u in range(4)},
        nxt={u: [(u + 1) % 2] for u in range(4)},
    )
    for change in ({"storage": float("nan")}, {"K": True}, {"t": False}):
        with pytest.raises(ConfigurationError):
            wire.ShuffleJob.make(**{**base, **change})  # type: ignore[arg-type]
