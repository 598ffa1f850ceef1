"""Verifiable accusations (issue 27, item 4): the server judges who lied and names the liar.

Each share has its own ephemeral key (:mod:`coded_fl.secagg.evidence`); on an accusation the
server asks the accused silo to reveal that one key and opens the share it relayed itself.
A false accuser is named and left out of the session; so is a silo whose share really was bad,
on one accusation, and one that will not reveal. A replayed or malformed reveal is refused
with a typed error and changes nothing. With identity keys every entry and every accusation is
signed: an altered entry is blamed on the relay (no accusation), an unsigned accusation names
its accuser, and a silo reveals only for an accusation its accuser signed.

Silos 0..4, s = 2, T = 1, U = 3, one extra reply: silo 4 straggles, S = {0, 1, 2, 3}. Silo 0's
derived set is {0, 1, 2}, so its share for silo 1 is derived (a tag) and for silo 3 sealed.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric import ec

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.client import refusal_for
from coded_fl.secagg.evidence import (
    DERIVED,
    EPHEMERAL_BYTES,
    accusation_statement,
    share_statement,
)
from coded_fl.secagg.identity import Identity, TrustRoster, verify_signature
from coded_fl.secagg.messages import (
    SERVER,
    Limits,
    RecoveryRequest,
    Refusal,
    RefusalCode,
    Reveal,
    Upload,
    decode,
    encode,
)
from coded_fl.secagg.server import RoundAborted
from simulations.runtime.secagg_harness import Harness, Silo
from tests.machine_helpers import sign_views

CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=2,
    privacy_threshold=1,
    recovery_threshold=3,
    extra_replies=1,
    vector_length=12,
    run_id="evidence",
    masking="shares",
)
STRAGGLER = {4: Silo(delay=5.0)}


def harness(seed: int = 5) -> Harness:
    h = Harness(CFG, seed=seed)
    h.setup()
    return h


def bad_share_for(recipient: int):
    """An upload forge: the payload (tag or box, not the ephemeral key) of the entry for
    ``recipient`` altered, as a lying sender would send it."""

    def alter(entries: tuple[tuple[int, bytes], ...]) -> tuple[tuple[int, bytes], ...]:
        at = EPHEMERAL_BYTES
        return tuple(
            (j, e[:at] + bytes([e[at] ^ 0x01]) + e[at + 1 :] if j == recipient else e)
            for j, e in entries
        )

    def forge(upload: Upload) -> Upload:
        return dataclasses.replace(upload, tags=alter(upload.tags), shares=alter(upload.shares))

    return forge


def exact(h: Harness, res: RoundResult, number: int) -> bool:
    return torch.equal(res.aggregate, h.config.field.element(h.expected_total(number)))


@pytest.mark.parametrize("accuser", [1, 3], ids=["derived share", "sealed share"])
def test_a_false_accusation_names_the_accuser_who_is_left_out(accuser: int) -> None:
    h = harness()
    out = h.run_round(1, {accuser: Silo(accuse=0), **STRAGGLER})
    res = out.result
    assert isinstance(res, RoundResult), res
    assert exact(h, res, 1)
    (verdict,) = res.verdicts
    assert (verdict.accuser, verdict.accused, verdict.liar) == (accuser, 0, accuser)
    assert "revealed its share's key" in verdict.reason
    assert accuser in res.offenders and 0 not in res.offenders and res.excluded == ()
    # the liar is left out of the session's later rounds; the accused silo is not
    out2 = h.run_round(2)
    assert isinstance(out2.result, RoundResult) and exact(h, out2.result, 2)
    assert accuser not in out2.result.survivors and 0 in out2.result.survivors
    assert any(s == accuser and "named an offender" in why for s, why in out2.refused)


@pytest.mark.parametrize("recipient", [1, 3], ids=["derived share", "sealed share"])
def test_a_bad_share_names_its_sender_on_one_accusation(recipient: int) -> None:
    # before the evidence, one accusation (below max(T + 1, 2)) convicted nobody
    h = harness()
    out = h.run_round(1, {0: Silo(forge=bad_share_for(recipient)), **STRAGGLER})
    res = out.result
    assert isinstance(res, RoundResult), res
    (verdict,) = res.verdicts
    assert (verdict.accuser, verdict.accused, verdict.liar) == (recipient, 0, 0)
    assert "does not confirm" in verdict.reason or "does not open" in verdict.reason
    assert 0 in res.offenders and recipient not in res.offenders
    assert exact(h, res, 1)  # its other shares were good: U replies unmask the round
    out2 = h.run_round(2)
    assert isinstance(out2.result, RoundResult) and 0 not in out2.result.survivors
    assert exact(h, out2.result, 2)


@pytest.mark.parametrize("bad", [True, False], ids=["bad share", "good share"])
def test_an_accused_silo_that_does_not_reveal_is_named(bad: bool) -> None:
    h = harness()
    silo0 = Silo(forge=bad_share_for(1) if bad else None, withhold=True)
    behaviour = {0: silo0, **STRAGGLER}
    if not bad:
        behaviour[1] = Silo(accuse=0)
    res = h.run_round(1, behaviour).result
    assert isinstance(res, (RoundResult, RoundAborted)), res
    (verdict,) = res.verdicts
    assert verdict.liar == 0 and "did not reveal" in verdict.reason
    assert 0 in (res.offenders if isinstance(res, RoundResult) else res.suspects)


def _collect(h: Harness) -> list[RecoveryRequest]:
    """Round 1 up to its recovery requests: silos 0..3 upload (S = {0, 1, 2, 3})."""
    s = h.server
    for q in s.start_round(1):
        if q.recipient == 4:
            continue
        c = h.clients[q.recipient]
        task = c.receive(q)
        s.receive(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    requests = sign_views(s, h.clients, s.close_collection())  # with identities: views first
    assert isinstance(requests, list)
    return requests


def _to_recovery(h: Harness, accusers: dict[int, int]) -> list[tuple[int, str]]:
    """Round 1 up to its evidence stage: the recovery requests are answered, ``accusers``
    (accuser -> accused) refuse with accusations."""
    requests = _collect(h)
    refused: list[tuple[int, str]] = []
    h._ask(requests, {a: Silo(accuse=b) for a, b in accusers.items()}, refused)
    return refused


def test_a_replayed_or_malformed_reveal_is_refused_and_the_round_stays_exact() -> None:
    h = harness()
    s = h.server
    _to_recovery(h, {1: 0})
    asks = s.reveal_requests()
    assert [(q.recipient, q.accuser, q.derived) for q in asks] == [(0, 1, True)]
    assert s.reveal_requests() == []  # each accusation is put to its accused once
    c0 = h.clients[0]
    before = c0.to_bytes()
    reveal = c0.receive(asks[0])
    assert isinstance(reveal, Reveal) and c0.to_bytes() == before  # revealing changes nothing
    assert reveal.secret.hex() not in repr(reveal)  # never printed
    lim = Limits.for_config(CFG)
    # malformed: a scalar of 31 bytes does not decode
    with pytest.raises(RemoteProtocolError, match="revealed scalar"):
        decode(encode(dataclasses.replace(reveal, secret=reveal.secret[:-1])), limits=lim)
    # from a silo nobody accused, for another accuser, or for another round: refused
    for wrong in (
        dataclasses.replace(reveal, sender=2),
        dataclasses.replace(reveal, accuser=3),
        dataclasses.replace(reveal, round=2),
    ):
        with pytest.raises(RemoteProtocolError):
            s.receive(wrong)
        assert not s.disputes_settled and s.liars == ()
    s.receive(decode(encode(reveal), limits=lim))
    assert s.disputes_settled and s.liars == (1,)
    with pytest.raises(RemoteProtocolError, match="no pending accusation"):
        s.receive(reveal)  # a replay
    (verdict,) = s.close_disputes()
    assert verdict.liar == 1
    res = s.finish()
    assert isinstance(res, RoundResult) and exact(h, res, 1) and 1 in res.offenders
    with pytest.raises(RemoteProtocolError, match="not expected"):
        s.receive(reveal)  # after the round


def test_a_wrong_scalar_names_the_accused_and_a_forged_request_reveals_nothing() -> None:
    h = harness()
    s = h.server
    _to_recovery(h, {3: 0})  # silo 0's sealed share for silo 3
    (ask,) = s.reveal_requests()
    assert not ask.derived
    c0 = h.clients[0]
    before = c0.to_bytes()
    # the accused checks the request: the entry must hold its own ephemeral key for the
    # accuser, and the accuser must be another silo; otherwise nothing is revealed
    flipped = ask.item[:1] + bytes([ask.item[1] ^ 1]) + ask.item[2:]
    for forged in (
        dataclasses.replace(ask, item=flipped),
        dataclasses.replace(ask, accuser=0),
        dataclasses.replace(ask, accuser=2),  # not the share's recipient
        dataclasses.replace(ask, context=bytes(16)),
    ):
        with pytest.raises(RemoteProtocolError) as err:
            c0.receive(forged)
        assert err.value.sender == SERVER and refusal_for(err.value, forged) is None
        assert c0.to_bytes() == before
    reveal = c0.receive(ask)
    s.receive(dataclasses.replace(reveal, secret=bytes(32)))  # not its ephemeral key's
    (verdict,) = s.close_disputes()
    assert verdict.liar == 0 and "not the one of the ephemeral key" in verdict.reason
    res = s.finish()
    assert isinstance(res, RoundResult) and exact(h, res, 1)


# ---------------------------------------------------------------------- with identity keys
def signed_harness() -> tuple[Harness, list[Identity]]:
    ids = [Identity(ec.generate_private_key(ec.SECP256R1())) for _ in range(CFG.n)]
    trust = TrustRoster([i.public_bytes for i in ids])
    h = Harness(CFG, seed=7)
    for silo, c in h.clients.items():
        c.policy = dataclasses.replace(c.policy, identity=ids[silo], trusted=trust)
    h.setup()
    return h, ids


def test_with_identities_every_entry_is_signed_and_an_altered_one_is_the_relays_fault() -> None:
    h, ids = signed_harness()
    s = h.server
    requests = _collect(h)
    up0 = s._round.uploads[0]  # type: ignore[union-attr]
    assert all(len(e) == EPHEMERAL_BYTES + 8 + 64 for _, e in up0.tags)  # P-256: r | s
    for j, e in up0.tags:  # evidence anyone holding silo 0's identity can check
        statement = share_statement(
            digest=CFG.digest,
            run_id=CFG.run_bytes,
            round_=1,
            sender=0,
            recipient=j,
            kind=DERIVED,
            context=up0.context,
            ephemeral=e[:32],
            recipient_key=h.server.roster[j],
            payload=e[32:40],
        )
        assert verify_signature(ids[0].public_bytes, statement, e[40:])
    # an upload whose signature does not verify is refused on arrival (its sender's fault)
    h2, _ = signed_harness()
    q = h2.server.start_round(1)[0]
    c = h2.clients[q.recipient]
    task = c.receive(q)
    up = c.upload(task, [h2.partials(1, k) for k in task.partitions])
    with pytest.raises(RemoteProtocolError, match="valid signature"):
        h2.server.receive(bad_share_for(1)(up))
    # the relay altering an entry: the recipient blames the server, and accuses nobody
    req = next(q for q in requests if q.recipient == 1)
    token = req.tokens[0]  # silo 0's derived share for silo 1: context | E | tag | signature
    at = 16 + EPHEMERAL_BYTES  # its tag
    altered = token[:at] + bytes([token[at] ^ 1]) + token[at + 1 :]
    bad = dataclasses.replace(req, tokens=(altered, *req.tokens[1:]))
    with pytest.raises(RemoteProtocolError, match="valid signature") as err:
        h.clients[1].receive(bad)
    assert err.value.sender == SERVER and refusal_for(err.value, bad) is None
    h.clients[1].receive(req)  # the genuine request is still answered


def test_with_identities_an_unsigned_accusation_names_its_accuser() -> None:
    h, _ = signed_harness()
    res = h.run_round(1, {1: Silo(accuse=0), **STRAGGLER}).result
    assert isinstance(res, RoundResult) and exact(h, res, 1)
    (verdict,) = res.verdicts
    assert verdict.liar == 1 and "signature" in verdict.reason


def test_with_identities_a_silo_reveals_only_for_a_signed_accusation() -> None:
    h, ids = signed_harness()
    s = h.server
    _to_recovery(h, {})
    rnd = s._round
    assert rnd is not None
    item = rnd.uploads[0].context + dict(rnd.uploads[0].tags)[1]
    statement = accusation_statement(
        digest=CFG.digest, run_id=CFG.run_bytes, round_=1, accuser=1, accused=0, item=item
    )
    # a signed false accusation by silo 1 (whose reply the harness already took: a fresh
    # round state would have it refuse instead; the server only needs the refusal)
    rnd.replies.pop(1)
    s.receive(
        Refusal(
            digest=CFG.digest,
            round=1,
            sender=1,
            recipient=SERVER,
            code=RefusalCode.ACCUSES,
            accused=0,
            detail="a false accusation",
            evidence=ids[1].sign(statement),
        )
    )
    (ask,) = s.reveal_requests()
    c0 = h.clients[0]
    # a server that asks without the accuser's signature, or with another silo's, gets nothing
    for forged in (
        dataclasses.replace(ask, accusation=b""),
        dataclasses.replace(ask, accusation=ids[2].sign(statement)),
    ):
        with pytest.raises(RemoteProtocolError, match="signed accusation"):
            c0.receive(forged)
    s.receive(c0.receive(ask))
    (verdict,) = s.close_disputes()
    assert verdict.liar == 1
    # silo 1's signed accusation is the evidence against it: anyone can check it
    assert verify_signature(ids[1].public_bytes, statement, ask.accusation)
