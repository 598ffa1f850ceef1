"""Survivor views (issue 29, item 6: the consistency check of SecAgg's active variant).

Where the silos sign their keys and hold trust rosters, every member of the survivor set S
signs S before any silo answers a recovery over it, and a silo signs only sets nested in the
one it signed. Re-enacted: a server that tells silos different survivor sets gets no
signature of the second set from a silo that signed the first, and no silo answers a recovery
over a set some survivor did not sign (a missing, stale or borrowed signature), over a set
other than the last one it signed, or without views at all. A silo that does not sign is
dropped and the rest sign the smaller set; the round's sum stays exact.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric import ec

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg import AbortCode, ProtocolConfig, RoundAborted, RoundResult
from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.evidence import accusation_statement
from coded_fl.secagg.identity import Identity, TrustRoster
from coded_fl.secagg.messages import (
    Limits,
    RecoveryRequest,
    Refusal,
    RefusalCode,
    ViewReply,
    ViewRequest,
    decode,
    encode,
)
from coded_fl.secagg.server import ServerStage
from coded_fl.secagg.views import view_statement
from simulations.runtime.secagg_harness import Harness, Silo
from tests.machine_helpers import sign_views

#: one extra reply: a round waits for all five uploads, so S can lose a member and stay large
CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    extra_replies=1,
    vector_length=8,
    run_id="views",
)
CURVES = (ec.SECP256R1(), ec.SECP384R1())
IDS = {i: Identity(ec.derive_private_key(211 + i, CURVES[i % 2])) for i in range(CFG.n)}
TRUST = TrustRoster(x.public_bytes for x in IDS.values())


def harness(*, sign: bool = True, trust: bool = True, seed: int = 3) -> Harness:
    h = Harness(CFG, seed=seed)
    for i, m in h.clients.items():
        m.policy = dataclasses.replace(
            m.policy, identity=IDS[i] if sign else None, trusted=TRUST if trust else None
        )
    h.setup()
    return h


def uploaded(h: Harness, number: int = 1) -> list[ViewRequest]:
    """Every silo uploads round ``number``; the server's close asks for the views."""
    for q in h.server.start_round(number):
        c = h.clients[q.recipient]
        task = c.receive(q)
        h.server.receive(c.upload(task, [h.partials(number, k) for k in task.partitions]))
    views = h.server.close_collection()
    assert isinstance(views, list) and all(isinstance(v, ViewRequest) for v in views)
    return views  # type: ignore[return-value]


def view(survivors: tuple[int, ...], silo: int, number: int = 1) -> ViewRequest:
    return ViewRequest(CFG.digest, number, -1, silo, survivors=survivors)


def signature(silo: int, survivors: tuple[int, ...], number: int = 1) -> bytes:
    statement = view_statement(
        digest=CFG.digest, run_id=CFG.run_bytes, round_=number, survivors=survivors
    )
    return IDS[silo].sign(statement)


def test_a_round_with_signed_keys_recovers_over_a_set_every_survivor_signed() -> None:
    h = harness()
    out = h.run_round(1)
    assert isinstance(out.result, RoundResult)
    assert torch.equal(out.result.aggregate, CFG.field.element(h.expected_total(1)))
    assert len(out.sizes["view_request"]) == CFG.n  # one view stage, every survivor asked
    # without identity keys there is no view stage (the two round trips as before)
    plain = harness(sign=False, trust=False)
    out = plain.run_round(1)
    assert isinstance(out.result, RoundResult) and "view_request" not in out.sizes


def test_a_silo_that_does_not_sign_is_dropped_and_the_rest_sign_the_smaller_set() -> None:
    h = harness()
    out = h.run_round(1, {2: Silo(drop="view")})
    assert isinstance(out.result, RoundResult)
    assert out.result.survivors == (0, 1, 3, 4)
    assert torch.equal(out.result.aggregate, CFG.field.element(h.expected_total(1)))
    assert len(out.sizes["view_request"]) == 5 + 4  # S, then S without silo 2
    # two silos that do not sign leave too few for a recovery: the round aborts, says why
    h = harness()
    out = h.run_round(1, {2: Silo(drop="view"), 3: Silo(drop="view")})
    assert isinstance(out.result, RoundAborted)
    assert "did not sign the survivor set" in out.result.reason
    assert out.result.code is AbortCode.VIEWS_UNSIGNED
    assert h.server.stage == ServerStage.READY


def test_a_server_that_tells_silos_different_survivor_sets_gets_no_second_signature() -> None:
    h = harness()
    uploaded(h)
    s1, s2 = (0, 1, 2, 3), (1, 2, 3, 4)
    for i in s1:  # silos 0..3 are told S1 and sign it
        assert isinstance(h.clients[i].receive(view(s1, i)), ViewReply)
    # silo 3 signed S1: it signs no set that is not within S1 (S2 holds silo 4)
    before = h.clients[3].to_bytes()
    with pytest.raises(RemoteProtocolError, match="not within the one this silo signed"):
        h.clients[3].receive(view(s2, 3))
    assert h.clients[3].to_bytes() == before
    # the same set again is signed again (a resent request)
    assert isinstance(h.clients[3].receive(view(s1, 3)), ViewReply)


def test_a_silo_signs_a_chain_of_nested_sets_and_answers_only_for_the_last() -> None:
    h = harness()
    uploaded(h)
    c = h.clients[0]
    everyone, smaller, other = (0, 1, 2, 3, 4), (0, 1, 2, 3), (0, 1, 2, 4)
    assert isinstance(c.receive(view(everyone, 0)), ViewReply)
    assert isinstance(c.receive(view(smaller, 0)), ViewReply)  # a survivor dropped
    with pytest.raises(RemoteProtocolError, match="not within"):
        c.receive(view(other, 0))  # nested in the first set, not in the last one
    assert c.viewed[1] == smaller


def test_no_silo_answers_a_recovery_over_a_set_some_survivor_did_not_sign() -> None:
    h = harness()
    views = uploaded(h)
    requests = sign_views(h.server, h.clients, views)
    assert isinstance(requests, list) and all(isinstance(r, RecoveryRequest) for r in requests)
    req = next(r for r in requests if r.recipient == 0)
    assert len(req.views) == len(req.survivors) == CFG.n
    c = h.clients[0]
    state = c.to_bytes()
    j = req.survivors.index(2)
    wrong = {
        "no views": dataclasses.replace(req, views=()),
        "a view of another set": dataclasses.replace(
            req, views=(*req.views[:j], signature(2, (0, 1, 2, 3)), *req.views[j + 1 :])
        ),
        "another silo's signature": dataclasses.replace(
            req, views=(*req.views[:j], req.views[j + 1], *req.views[j + 1 :])
        ),
    }
    for why, bad in wrong.items():
        with pytest.raises(RemoteProtocolError) as info:
            c.receive(bad)
        assert info.value.sender == -1, why  # the server is blamed
        assert c.to_bytes() == state, why
    # the honest request is answered
    assert c.receive(req).rows.shape[0] >= 1
    # a silo that signed a smaller set since answers no request over the first one
    h = harness()
    requests = sign_views(h.server, h.clients, uploaded(h))
    req = next(r for r in requests if r.recipient == 0)
    assert isinstance(h.clients[0].receive(view((0, 1, 3, 4), 0)), ViewReply)
    with pytest.raises(RemoteProtocolError, match="last survivor set this silo signed"):
        h.clients[0].receive(req)


def test_views_are_kept_with_the_state_and_a_stale_view_cannot_be_reused() -> None:
    h = harness()
    views = uploaded(h)
    requests = sign_views(h.server, h.clients, views)
    restored = ClientMachine.from_bytes(h.clients[1].to_bytes(), policy=h.clients[1].policy)
    assert restored.viewed == {1: tuple(range(CFG.n))}
    # the signature of round 1's set does not vouch for the same set in another round
    req = next(r for r in requests if r.recipient == 1)
    assert view_statement(
        digest=CFG.digest, run_id=CFG.run_bytes, round_=2, survivors=req.survivors
    ) != view_statement(digest=CFG.digest, run_id=CFG.run_bytes, round_=1, survivors=req.survivors)


def test_view_requests_that_do_not_check_are_refused_and_change_nothing() -> None:
    h = harness()
    uploaded(h)
    c = h.clients[0]
    state = c.to_bytes()
    bad = {
        "without this silo": (1, 2, 3, 4),
        "too few": (0, 1, 2),
        "not ascending": (1, 0, 2, 3),
        "out of range": (0, 1, 2, 7),
    }
    for why, survivors in bad.items():
        with pytest.raises(RemoteProtocolError):
            c.receive(view(survivors, 0))
        assert c.to_bytes() == state, why
    with pytest.raises(RemoteProtocolError, match="holds no upload"):
        c.receive(view(tuple(range(CFG.n)), 0, number=2))
    # a silo without an identity signs nothing
    unsigned = harness(sign=False, trust=False)
    uploaded_plain = unsigned.server.start_round(1)
    assert uploaded_plain  # it still trains; asked for a view, it refuses
    with pytest.raises(RemoteProtocolError, match="no identity key"):
        unsigned.clients[0].receive(view(tuple(range(CFG.n)), 0))


def test_the_server_takes_only_valid_signatures_of_the_set_it_asked_for() -> None:
    h = harness()
    uploaded(h)
    s = h.server
    everyone = tuple(range(CFG.n))
    forged = ViewReply(CFG.digest, 1, 0, -1, signature=signature(1, everyone))
    with pytest.raises(RemoteProtocolError, match="does not verify") as info:
        s.receive(forged)
    assert info.value.sender == 0
    other_set = ViewReply(CFG.digest, 1, 0, -1, signature=signature(0, (0, 1, 2, 3)))
    with pytest.raises(RemoteProtocolError, match="does not verify"):
        s.receive(other_set)
    good = ViewReply(CFG.digest, 1, 0, -1, signature=signature(0, everyone))
    s.receive(good)
    with pytest.raises(RemoteProtocolError, match="duplicate"):
        s.receive(good)
    assert not s.views_complete


def test_view_messages_round_trip_through_the_codec_and_its_limits() -> None:
    lim = Limits.for_config(CFG)
    everyone = tuple(range(CFG.n))
    for msg in (
        view(everyone, 2),
        ViewReply(CFG.digest, 1, 2, -1, signature=signature(2, everyone)),
        ViewReply(CFG.digest, 1, 1, -1, signature=signature(1, everyone)),
    ):
        assert decode(encode(msg), limits=lim) == msg
    with pytest.raises(RemoteProtocolError):
        decode(encode(view((0, 1), 2)), limits=lim)  # fewer than n - s survivors
    with pytest.raises(RemoteProtocolError):
        decode(encode(ViewReply(CFG.digest, 1, 2, -1, signature=b"x" * 10)), limits=lim)


def test_a_retry_without_a_convicted_silo_is_signed_again_by_the_smaller_set() -> None:
    # silos 1 and 2 accuse silo 0 (signed accusations: max(T + 1, 2) = 2 accusers convict);
    # the retry over S without silo 0 goes through views again, signed by all four
    h = harness()
    s = h.server
    requests = sign_views(s, h.clients, uploaded(h))
    for accuser in (1, 2):
        req = next(r for r in requests if r.recipient == accuser)
        i = req.survivors.index(0)
        item = req.tokens[i] or req.shares[i]
        statement = accusation_statement(
            digest=CFG.digest, run_id=CFG.run_bytes, round_=1, accuser=accuser, accused=0, item=item
        )
        s.receive(
            Refusal(
                digest=CFG.digest,
                round=1,
                sender=accuser,
                recipient=-1,
                code=RefusalCode.ACCUSES,
                accused=0,
                detail="its share failed authentication",
                evidence=IDS[accuser].sign(statement),
            )
        )
    assert s.convicted == (0,)
    again = s.retry_recovery()
    assert isinstance(again, list) and len(again) == 4
    assert all(isinstance(v, ViewRequest) and v.survivors == (1, 2, 3, 4) for v in again)
    retry = sign_views(s, h.clients, again)
    assert isinstance(retry, list)
    for req in retry:
        assert isinstance(req, RecoveryRequest) and len(req.views) == 4
        s.receive(h.clients[req.recipient].receive(req))
    res = s.finish()
    assert isinstance(res, RoundResult) and 0 in res.excluded
    assert torch.equal(res.aggregate, CFG.field.element(h.expected_total(1)))
