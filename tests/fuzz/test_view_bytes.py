"""Mutated bytes of the survivor-view messages (wire version 8) at both ends.

A round whose silos sign their keys is built once, at its view stage (every silo uploaded;
the server asks each to sign S). Each example copies the machines and hands them a mutant
(:func:`tests.fuzz.mutants.mutant`) of a ``ViewRequest`` (at silo 0) or of a ``ViewReply`` (at
the server), and of a ``RecoveryRequest`` carrying the views (at silo 0).

Properties: nothing untyped escapes; a refusal changes nothing (the silo's stored state; the
server's stage and the signatures it holds); a silo signs only a set that holds it, is large
enough and nested in what it signed before, and what it returns verifies for that set; the
server keeps a signature only if it verifies for the sender and the set it asked for; a
silo answers a recovery only over the set it signed with every survivor's signature; and
whatever came, the round still decodes to the exact sum.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg import RoundResult
from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.messages import (
    Limits,
    RecoveryReply,
    RecoveryRequest,
    ViewReply,
    ViewRequest,
    decode,
)
from coded_fl.secagg.server import ServerMachine, ServerStage
from coded_fl.secagg.views import view_statement
from simulations.runtime.secagg_harness import Harness
from tests.fuzz import examples
from tests.fuzz.mutants import mutant
from tests.machine_helpers import sign_views
from tests.unit.test_survivor_views import CFG, harness

LIMITS = Limits.for_config(CFG)


@functools.lru_cache(maxsize=1)
def at_views() -> tuple[
    Harness, list[ViewRequest], dict[int, ViewReply], bytes, tuple, torch.Tensor
]:
    """The round at its view stage, the view requests, every silo's reply, silo 0's state
    before it signs, the server's round state to restore, and the round's exact sum."""
    h = harness(seed=13)
    s = h.server
    for q in s.start_round(1):
        c = h.clients[q.recipient]
        task = c.receive(q)
        s.receive(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    views = s.close_collection()
    assert isinstance(views, list) and isinstance(views[0], ViewRequest)
    state = h.clients[0].to_bytes()
    replies: dict[int, ViewReply] = {}
    for v in views:
        reply = h.clients[v.recipient].receive(v)
        assert isinstance(reply, ViewReply)
        replies[v.recipient] = reply
    saved = copy.deepcopy(s._round)
    exact = CFG.field.element(h.expected_total(1))
    return h, views, replies, state, saved, exact


def _server(h: Harness, saved: object) -> ServerMachine:
    s = h.server
    s._round, s.stage = copy.deepcopy(saved), ServerStage.VIEWING  # type: ignore[assignment]
    return s


def _finish(h: Harness, s: ServerMachine, replies: dict[int, ViewReply]) -> RoundResult:
    """Every silo's honest signature the server lacks, then the recovery and the decode."""
    rnd = s._round
    assert rnd is not None
    for i, r in replies.items():
        if i not in rnd.views:
            s.receive(r)
    requests = s.close_views()
    assert isinstance(requests, list)
    s.sum_uploads()
    clients = {
        i: ClientMachine.from_bytes(c.to_bytes(), policy=c.policy) for i, c in h.clients.items()
    }
    for req in requests:
        assert isinstance(req, RecoveryRequest)
        s.receive(clients[req.recipient].receive(req))
    res = s.finish()
    assert isinstance(res, RoundResult)
    return res


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_view_reply_bytes_at_the_server(data: st.DataObject) -> None:
    h, _, replies, _, saved, exact = at_views()
    good = replies[0]
    pool = [
        good,
        dataclasses.replace(good, signature=replies[1].signature),
        dataclasses.replace(good, sender=2),
        dataclasses.replace(good, round=2),
    ]
    _, raw, labels = data.draw(mutant(pool, CFG.n), label="mutant")
    s = _server(h, saved)
    before = (s.stage, dict(s._round.views))  # type: ignore[union-attr]
    try:
        msg = decode(raw, limits=LIMITS)
        if not isinstance(msg, ViewReply):
            raise RemoteProtocolError(f"sent {type(msg).__name__} in the view stage")
        s.receive(msg)
    except CodedFLError:
        assert (s.stage, dict(s._round.views)) == before, labels  # type: ignore[union-attr]
    except Exception as exc:  # pragma: no cover - the property this test checks
        raise AssertionError(f"untyped {type(exc).__name__} for {labels}") from exc
    else:  # kept only a signature that verifies for its sender and the set asked for
        statement = view_statement(
            digest=CFG.digest, run_id=CFG.run_bytes, round_=1, survivors=tuple(range(CFG.n))
        )
        kept = s._round.views[msg.sender]  # type: ignore[union-attr]
        identity = s.credentials[msg.sender][0]
        assert verify_signature(identity, statement, kept), labels
    res = _finish(h, s, replies)
    assert torch.equal(res.aggregate, exact), labels


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_view_request_bytes_at_a_silo(data: st.DataObject) -> None:
    h, views, _, state, _, _ = at_views()
    ask = next(v for v in views if v.recipient == 0)
    pool = [
        ask,
        dataclasses.replace(ask, survivors=(0, 1, 2, 3)),
        dataclasses.replace(ask, survivors=(1, 2, 3, 4)),
        dataclasses.replace(ask, round=2),
        dataclasses.replace(ask, recipient=1),
    ]
    _, raw, labels = data.draw(mutant(pool, CFG.n), label="mutant")
    machine = ClientMachine.from_bytes(state, policy=h.clients[0].policy)
    try:
        out = machine.receive(decode(raw, limits=LIMITS))
    except CodedFLError:
        assert machine.to_bytes() == state, f"refused but the state changed: {labels}"
        return
    except Exception as exc:  # pragma: no cover - the property this test checks
        raise AssertionError(f"untyped {type(exc).__name__} for {labels}") from exc
    assert isinstance(out, ViewReply), labels
    signed = machine.viewed[out.round]
    assert 0 in signed and len(signed) >= CFG.min_uploads and list(signed) == sorted(set(signed))
    statement = view_statement(
        digest=CFG.digest, run_id=CFG.run_bytes, round_=out.round, survivors=signed
    )
    assert verify_signature(h.clients[0].policy.identity.public_bytes, statement, out.signature)


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_recovery_request_bytes_with_views_at_a_silo(data: st.DataObject) -> None:
    h, _, replies, _, saved, _ = at_views()
    s = _server(h, saved)
    clients = {
        i: ClientMachine.from_bytes(c.to_bytes(), policy=c.policy) for i, c in h.clients.items()
    }
    for r in replies.values():
        s.receive(r)
    requests = sign_views(s, clients, s.close_views())
    req = next(r for r in requests if r.recipient == 0)
    state = clients[0].to_bytes()
    pool = [req, dataclasses.replace(req, views=req.views[::-1])]
    _, raw, labels = data.draw(mutant(pool, CFG.n), label="mutant")
    machine = ClientMachine.from_bytes(state, policy=clients[0].policy)
    try:
        msg = decode(raw, limits=LIMITS)
        out = machine.receive(msg)
    except CodedFLError:
        assert machine.to_bytes() == state, f"refused but the state changed: {labels}"
        return
    except Exception as exc:  # pragma: no cover - the property this test checks
        raise AssertionError(f"untyped {type(exc).__name__} for {labels}") from exc
    # answered only over the set it signed, with every other survivor's signature of it
    assert isinstance(out, RecoveryReply) and isinstance(msg, RecoveryRequest), labels
    assert msg.survivors == machine.viewed[1] and msg.views[1:] == req.views[1:], labels
