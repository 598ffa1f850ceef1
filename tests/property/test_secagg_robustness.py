"""Every out-of-place or malformed input is refused with a typed error and changes nothing.

Hypothesis drives the server and a client to each stage, then throws every kind of message at
them (right type in the wrong stage, wrong round, replays, unknown or duplicate senders, wrong
lengths, forged weights, mutated bytes) and checks the verdict and that the state is unchanged.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import LocalProtocolError, NeedsKeysError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, ServerStage
from coded_fl.secagg.client import NEEDS_KEYS, ClientMachine, refusal_for
from coded_fl.secagg.messages import (
    KeyReply,
    RecoveryReply,
    RefusalCode,
    TrainRequest,
    Upload,
    decode,
    encode,
)
from simulations.runtime.secagg_harness import Harness, deterministic_entropy

CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    recovery_threshold=3,
    vector_length=12,
    run_id="robust",
)


def server_state(h: Harness) -> tuple:
    s = h.server
    rnd = s._round
    return (
        s.stage,
        tuple(sorted(s.roster.items())),
        s.last_round,
        tuple(sorted(s._pending_keys)),
        None
        if rnd is None
        else (rnd.number, tuple(sorted(rnd.uploads)), rnd.survivors, tuple(sorted(rnd.replies))),
    )


def drive(stage: str):
    """A harness with the server in ``stage``; returns it and sample messages of that round."""
    h = Harness(CFG, seed=5)
    samples: dict[str, object] = {}
    if stage == "init":
        return h, samples
    reqs = h.server.start_key_exchange()
    replies = [h.clients[r.recipient].on_key_request(decode(encode(r))) for r in reqs]
    samples["key_reply"] = replies[0]
    if stage == "keys":
        h.server.receive(replies[0])
        return h, samples
    for rep in replies:
        h.server.receive(rep)
    h.server.close_key_exchange()
    if stage == "ready":
        return h, samples
    trains = h.server.start_round(1)
    samples["train"] = trains[0]
    uploads = []
    for req in trains:
        c = h.clients[req.recipient]
        task = c.on_train_request(req)
        uploads.append(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    samples["upload"] = uploads[0]
    h.server.receive(uploads[0])
    if stage == "collecting":
        return h, samples
    for up in uploads[1:4]:
        h.server.receive(up)
    recs = h.server.close_collection()
    samples["recovery_request"] = recs[0]
    rr = h.clients[recs[0].recipient].on_recovery_request(recs[0])
    samples["recovery_reply"] = rr
    h.server.receive(rr)
    return h, samples


def variants(samples: dict, stage: str) -> list:
    out = []
    for name, msg in samples.items():
        if name in ("train", "recovery_request"):
            continue  # server -> client messages; the server never receives them
        out.append(msg)  # a replay / duplicate of something already accepted
        out.append(dataclasses.replace(msg, round=msg.round + 7))
        out.append(dataclasses.replace(msg, sender=msg.sender + 100))
        out.append(dataclasses.replace(msg, digest=b"\0" * 8))
        out.append(dataclasses.replace(msg, recipient=2))
        if isinstance(msg, Upload):
            out.append(dataclasses.replace(msg, sender=4, masked=msg.masked[:-1]))
            out.append(dataclasses.replace(msg, sender=4, shares=msg.shares[:-1]))
            out.append(
                dataclasses.replace(msg, sender=4, masked=torch.full_like(msg.masked, 2**31 - 1))
            )
        if isinstance(msg, RecoveryReply):
            out.append(dataclasses.replace(msg, sender=1, rows=msg.rows[:, :-1]))
            out.append(dataclasses.replace(msg, sender=4))  # never asked
        if isinstance(msg, KeyReply):
            out.append(dataclasses.replace(msg, sender=1, public_key=bytes(32)))
    return out


@pytest.mark.parametrize("stage", ["init", "keys", "ready", "collecting", "recovering"])
def test_server_refuses_out_of_place_messages_and_keeps_its_state(stage):
    _, samples = drive("recovering")  # messages from a complete round, replayed everywhere
    h, _ = drive(stage)
    before = server_state(h)
    for msg in variants(samples, stage):
        with pytest.raises(RemoteProtocolError):
            h.server.receive(msg)
        assert server_state(h) == before, msg


@settings(max_examples=60)
@given(data=st.data())
def test_server_refuses_mutated_bytes(data):
    stage = data.draw(st.sampled_from(["keys", "collecting", "recovering"]))
    _, samples = drive("recovering")
    h, _ = drive(stage)
    before = server_state(h)
    msg = data.draw(
        st.sampled_from([m for k, m in samples.items() if k not in ("train", "recovery_request")])
    )
    raw = bytearray(encode(msg))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    try:
        h.server.receive(decode(bytes(raw)))
    except RemoteProtocolError:
        assert server_state(h) == before
    # a mutation that still parses to an acceptable message may be accepted: e.g. a flipped
    # bit inside a masked value is indistinguishable from a different update


def test_client_refuses_forged_weights_replays_and_second_recovery():
    h2 = Harness(CFG, seed=9)
    h2.setup()
    trains = h2.server.start_round(1)
    ups = []
    for req in trains:
        c = h2.clients[req.recipient]
        task = c.on_train_request(req)
        ups.append(c.upload(task, [h2.partials(1, k) for k in task.partitions]))
    for up in ups:
        h2.server.receive(up)
    recs = h2.server.close_collection()
    req = recs[0]
    c = h2.clients[req.recipient]
    before = c.to_bytes()
    forged = [
        dataclasses.replace(
            req, weights=((1,) + (0,) * (len(req.survivors) - 1), *req.weights[1:])
        ),
        dataclasses.replace(req, weights=(*req.weights, (1,) * len(req.survivors))),
        dataclasses.replace(
            req,
            survivors=req.survivors[:2],
            weights=tuple(w[:2] for w in req.weights),
            shares=req.shares[:2],
        ),
        dataclasses.replace(req, round=req.round + 1),
        dataclasses.replace(req, round=0),
        dataclasses.replace(
            req, shares=(req.shares[0], req.shares[2], req.shares[1], *req.shares[3:])
        ),
        dataclasses.replace(req, digest=b"x" * 8),
        dataclasses.replace(req, recipient=req.recipient + 1),
    ]
    for msg in forged:
        with pytest.raises(RemoteProtocolError):
            c.on_recovery_request(msg)
        assert c.to_bytes() == before
    c.on_recovery_request(req)
    after = c.to_bytes()
    with pytest.raises(RemoteProtocolError, match="answers once per round"):
        c.on_recovery_request(req)
    assert c.to_bytes() == after
    # a replayed TrainRequest of this or an earlier round is refused
    with pytest.raises(RemoteProtocolError, match="replays"):
        c.on_train_request(trains[req.recipient])
    assert c.to_bytes() == after


def test_client_refuses_requests_before_keys_and_local_misuse():
    _, samples = drive("recovering")
    c = ClientMachine(entropy=deterministic_entropy(1))
    # a silo without keys (e.g. restarted) says so, so that the server rekeys it
    with pytest.raises(RemoteProtocolError, match=NEEDS_KEYS):
        c.on_train_request(samples["train"])
    with pytest.raises(RemoteProtocolError, match=NEEDS_KEYS):
        c.on_recovery_request(samples["recovery_request"])
    with pytest.raises(LocalProtocolError):
        c.upload(None, [])  # type: ignore[arg-type]


def test_client_state_round_trips_and_holds_no_key_in_repr():
    h = Harness(CFG, seed=2)
    h.setup()
    trains = h.server.start_round(1)
    c = h.clients[trains[0].recipient]
    task = c.on_train_request(trains[0])
    restored = ClientMachine.from_bytes(c.to_bytes(), entropy=deterministic_entropy(3))
    assert restored.to_bytes() == c.to_bytes()
    up = restored.upload(restored._task, [h.partials(1, k) for k in task.partitions])
    assert up.round == 1 and up.sender == trains[0].recipient
    assert "private" not in repr(restored)
    with pytest.raises(LocalProtocolError, match="unreadable"):
        ClientMachine.from_bytes(b"{not json")


def test_driver_misuse_is_a_local_error():
    h = Harness(CFG, seed=2)
    with pytest.raises(LocalProtocolError):
        h.server.start_round(1)
    with pytest.raises(LocalProtocolError):
        h.server.finish()
    h.setup()
    h.server.start_round(1)
    with pytest.raises(LocalProtocolError):
        h.server.start_round(2)
    assert h.server.stage == ServerStage.COLLECTING
    h.server.abort("test")
    with pytest.raises(LocalProtocolError, match="must follow"):
        h.server.start_round(1)
    assert isinstance(h.server.start_round(2)[0], TrainRequest)


def test_a_survivor_whose_state_regressed_refuses_and_the_others_recover():
    """Flower's simulation engine may run two messages of one node at once and write back a
    stale copy of its state: a survivor whose state regressed to before its upload no longer
    holds the digest of the inputs it trained on, which its shares are checked against (issue
    29), so it refuses the recovery with NEEDS_KEYS; the other U survivors answer and the sum
    is exact."""
    h = Harness(CFG, seed=4)
    h.setup()
    keyed = {i: c.to_bytes() for i, c in h.clients.items()}  # state right after the key exchange
    trains = h.server.start_round(1)
    for req in trains:
        c = h.clients[req.recipient]
        task = c.on_train_request(req)
        h.server.receive(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    for i in (0, 2):  # these two lose their round-1 state
        h.clients[i] = ClientMachine.from_bytes(keyed[i], entropy=deterministic_entropy(50 + i))
    for req in h.server.close_collection():
        try:
            reply = h.clients[req.recipient].on_recovery_request(req)
        except NeedsKeysError as exc:
            assert req.recipient in (0, 2)
            reply = refusal_for(exc, req)
            assert reply is not None and reply.code == RefusalCode.NEEDS_KEYS
        h.server.receive(reply)
    res = h.server.finish()
    assert torch.equal(CFG.field.to_signed(res.aggregate), h.expected_total(1))
