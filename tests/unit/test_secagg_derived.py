"""Seed-derived mask shares: the pitfalls of deriving U of a silo's n shares from key agreement
(one ephemeral key per share since wire version 7: :mod:`coded_fl.secagg.evidence`).

Direction in the key, no mask used twice, key confirmation naming the silo at fault, exact
uniformity of derived shares (against an independent AES-CTR + rejection-sampling oracle), the
mask and every share being evaluations of one polynomial, nothing sent with s = 0, and recovery
with dropouts mixing derived and received shares.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from coded_fl.crypto import KeyPair, seal
from coded_fl.errors import KeyConfirmationError, MaskReuseError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.secagg import ClientMachine, ProtocolConfig, RecoveryRequest, RoundResult, Upload
from coded_fl.secagg.client import refusal_for
from coded_fl.secagg.derive import CONFIRM_BYTES, share_context
from coded_fl.secagg.evidence import (
    DERIVED,
    SEALED,
    Entry,
    ephemeral_secret,
    exchange,
    open_share,
    public_of,
    share_purpose,
    share_secret,
)
from coded_fl.secagg.messages import RefusalCode, TrainRequest
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.sharing import MaskSharing
from simulations.runtime.secagg_harness import Harness, Silo

CFG = ProtocolConfig(num_silos=5, num_stragglers=1, privacy_threshold=1, vector_length=12)


def keyed(
    cfg: ProtocolConfig = CFG, seed: int = 3, *, policy: ClientPolicy | None = None
) -> tuple[Harness, list[TrainRequest]]:
    h = Harness(cfg, seed=seed)
    if policy is not None:  # e.g. a tiny field's scale, below the default floor
        for c in h.clients.values():
            c.policy = policy
    h.setup()
    return h, h.server.start_round(1)


def uploads(h: Harness, trains: list[TrainRequest]) -> list[Upload]:
    out = []
    for q in trains:
        c = h.clients[q.recipient]
        task = c.receive(q)
        out.append(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    return out


def _secret(me: KeyPair, peer: KeyPair, sender: int, recipient: int, ctx: bytes):
    e = ephemeral_secret(
        me.private_bytes, run_id=b"r", round_=1, sender=sender, recipient=recipient, context=ctx
    )
    eph = public_of(e)
    out = share_secret(
        exchange(e, peer.public_bytes),
        run_id=b"r",
        round_=1,
        sender=sender,
        recipient=recipient,
        ephemeral=eph,
        recipient_key=peer.public_bytes,
        context=ctx,
        kind=DERIVED,
    )
    return eph, out


def test_the_direction_is_in_the_key() -> None:
    a, b = KeyPair.generate(), KeyPair.generate()
    ctx = share_context(b"q", b"", nonce=bytes(16))
    (ea, ab), (eb, ba) = _secret(a, b, 0, 1, ctx), _secret(b, a, 1, 0, ctx)
    assert ea != eb and ab[:32] != ba[:32] and ab[32:] != ba[32:]
    # the recipient derives the same from the ephemeral public key and its own private key
    assert ab == share_secret(
        exchange(b.private_bytes, ea),
        run_id=b"r",
        round_=1,
        sender=0,
        recipient=1,
        ephemeral=ea,
        recipient_key=b.public_bytes,
        context=ctx,
        kind=DERIVED,
    )
    # in a real round the share i -> j differs from j -> i (both derived: 0 and 2 are in each
    # other's derived set with n = 5, U = 4)
    h, trains = keyed()
    ups = {u.sender: u for u in uploads(h, trains)}
    assert dict(ups[0].tags)[2] != dict(ups[2].tags)[0]
    share02 = h.clients[2]._rederive(CFG, 1, 0, 2, ups[0].context + dict(ups[0].tags)[2], b"", b"")
    share20 = h.clients[0]._rederive(CFG, 1, 2, 0, ups[2].context + dict(ups[2].tags)[0], b"", b"")
    assert not torch.equal(share02, share20)


def test_every_share_has_its_own_ephemeral_key() -> None:
    # one ephemeral key per share and upload: none repeats within an upload or across silos,
    # and none is a silo's key-agreement key (so revealing one reveals that share only)
    h, trains = keyed()
    ups = uploads(h, trains)
    entries = [e for u in ups for _, e in (*u.tags, *u.shares)]
    ephemerals = [e[:32] for e in entries]
    assert len(set(ephemerals)) == len(ephemerals)
    assert not set(ephemerals) & {k for _, k in trains[0].roster}


def test_a_second_upload_for_a_round_is_refused_and_copies_never_share_a_mask() -> None:
    h, trains = keyed()
    c = h.clients[0]
    task = c.receive(trains[0])
    parts = [h.partials(1, k) for k in task.partitions]
    snapshot = c.to_bytes()  # a stale copy of the state, taken before the upload
    first = c.upload(task, parts)
    with pytest.raises(MaskReuseError, match="already uploaded round 1"):
        c.upload(task, parts)
    restored = ClientMachine.from_bytes(c.to_bytes())  # the refusal survives persistence
    with pytest.raises(MaskReuseError):
        restored.upload(task, parts)
    # a stale copy that never saw the upload uploads again: its context (a fresh nonce) and so
    # its mask differ, so the server cannot subtract the two uploads to learn the update
    stale = ClientMachine.from_bytes(snapshot, entropy=lambda k: b"\x07" * k)
    second = stale.upload(stale._task, parts)
    assert first.context != second.context
    assert not torch.equal(first.masked, second.masked)
    h.server.receive(first)
    with pytest.raises(RemoteProtocolError, match="duplicate upload"):
        h.server.receive(second)


def test_the_model_digest_binds_the_mask() -> None:
    outs = []
    for model in (b"model-a", b"model-b"):
        h, trains = keyed()
        c = h.clients[0]
        task = c.receive(trains[0])
        outs.append(c.upload(task, [h.partials(1, k) for k in task.partitions], model_digest=model))
    assert outs[0].context != outs[1].context  # same seed, same round: only the model differs


def _recover_for(h: Harness, ups: list[Upload], j: int) -> RecoveryRequest:
    for u in ups:
        h.server.receive(u)
    requests = h.server.close_collection()
    assert isinstance(requests, list)
    return next(r for r in requests if r.recipient == j)


def test_a_stale_roster_is_named_by_key_confirmation_not_summed() -> None:
    h, trains = keyed()
    # silo 0 received a roster holding an outdated key of silo 1 (silo 1 rekeyed since)
    stale_key = KeyPair.generate().public_bytes
    q0 = trains[0]
    roster = tuple((s, stale_key if s == 1 else k) for s, k in q0.roster)
    trains = [dataclasses.replace(q0, roster=roster), *trains[1:]]
    ups = uploads(h, trains)
    req = _recover_for(h, ups, 1)
    with pytest.raises(KeyConfirmationError, match="fails key confirmation") as err:
        h.clients[1].receive(req)
    assert err.value.sender == 0  # the silo whose derived share does not confirm
    refusal = refusal_for(err.value, req)
    assert refusal is not None and refusal.code == RefusalCode.ACCUSES and refusal.accused == 0


def test_an_altered_tag_is_refused_naming_its_sender() -> None:
    h, trains = keyed()
    ups = uploads(h, trains)
    ups[2] = dataclasses.replace(
        ups[2], tags=tuple((j, bytes([t[0] ^ 1]) + t[1:]) for j, t in ups[2].tags)
    )
    req = _recover_for(h, ups, 3)
    with pytest.raises(KeyConfirmationError) as err:
        h.clients[3].receive(req)
    assert err.value.sender == 2


def test_own_keys_changed_since_the_upload_asks_for_a_rekey() -> None:
    from coded_fl.errors import NeedsKeysError

    h, trains = keyed()
    ups = uploads(h, trains)
    req = _recover_for(h, ups, 0)
    fresh = ClientMachine(entropy=lambda k: b"\x09" * k)  # a restarted silo 0 with new keys
    fresh.receive(_key_request(h, 0))
    with pytest.raises(NeedsKeysError):
        fresh.receive(req)


def _key_request(h: Harness, silo: int):
    from coded_fl.secagg.messages import SERVER, KeyRequest

    cfg = h.config
    return KeyRequest(
        digest=cfg.digest, round=0, sender=SERVER, recipient=silo, config=cfg.to_json()
    )


def _oracle_elements(seed: bytes, count: int, p: int) -> list[int]:
    """AES-256-CTR keystream (zero nonce), 32-bit little-endian words, low bits kept, words
    >= p rejected: written from the definition, independently of coded_fl.prg."""
    bits = (1 << p.bit_length()) - 1
    enc = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
    out: list[int] = []
    while len(out) < count:
        block = enc.update(bytes(4096))
        for (w,) in np.frombuffer(block, dtype="<u4").reshape(-1, 1).tolist():  # word by word
            v = w & bits
            if v < p:
                out.append(v)
                if len(out) == count:
                    break
    return out


def test_derived_shares_are_exactly_rejection_sampled() -> None:
    # p = 17: 5 bits kept, 15 of 32 words rejected; the derived share must equal the oracle's
    cfg = ProtocolConfig(
        num_silos=4,
        num_stragglers=1,
        privacy_threshold=1,
        vector_length=400,
        p=17,
        scale=1.0,
        headroom_bits=0,
        code="repetition",
    )
    h, trains = keyed(cfg, policy=ClientPolicy(min_scale=0))  # scale 1 in GF(17)
    ups = uploads(h, trains)
    c = h.clients[1]
    for i in (0, 1):
        raw = dict(ups[i].tags)[1]
        share = c._rederive(cfg, 1, i, 1, ups[i].context + raw, b"", b"")
        entry = Entry.parse(raw, payload_bytes=CONFIRM_BYTES, blame=-1)
        seed = c._recipient_secret(cfg, i, 1, entry, ups[i].context, DERIVED, b"")[:32]
        assert share.tolist() == _oracle_elements(seed, cfg.sharing.piece_length, 17)
    counts = np.bincount(share.numpy().astype(np.int64), minlength=17)
    assert counts.size == 17 and counts.min() > 0  # all of GF(17), nothing above


def test_mask_and_every_share_are_one_polynomial() -> None:
    F = PrimeField(2**31 - 1)
    ms = MaskSharing(n=6, privacy=2, threshold=4, length=10, field=F)
    members = [0, 1, 2, 4, 5]  # silo 3 has no key: the derived sets skip it
    assert ms.derived_set(5, members) == (0, 1, 2, 5)
    assert ms.derived_set(1, members) == (1, 2, 4, 5)
    rng = np.random.default_rng(0)
    derived = ms.derived_set(2, members)
    values = torch.from_numpy(rng.integers(0, F.p, (4, ms.piece_length)).astype(np.uint32))
    others = tuple(j for j in range(6) if j not in derived)
    mask, sent = ms.complete(derived, values, others)
    share = {**dict(zip(derived, values, strict=True)), **dict(zip(others, sent, strict=True))}
    for holders in itertools.combinations(range(6), 4):
        got = ms.decode({j: share[j][None] for j in holders})
        assert torch.equal(got[0], mask)


@pytest.mark.parametrize("n", [3, 5])
def test_without_stragglers_no_share_is_sent(n: int) -> None:
    cfg = ProtocolConfig(num_silos=n, num_stragglers=0, privacy_threshold=1, vector_length=9)
    h = Harness(cfg, seed=1)
    h.setup()
    sent: list[Upload] = []

    def spy(upload: Upload) -> Upload:
        sent.append(upload)
        return upload

    out = h.run_round(1, {i: Silo(forge=spy) for i in range(n)})
    assert isinstance(out.result, RoundResult)
    assert len(sent) == n
    assert all(u.shares == () and len(u.tags) == n for u in sent)
    expected = h.expected_total(1).double() / cfg.quantization.scale
    assert torch.allclose(out.result.total, expected)


@pytest.mark.parametrize(
    ("n", "s", "t", "u", "behaviour"),
    [
        (6, 2, 1, 3, {4: Silo(drop="train"), 1: Silo(drop="recovery")}),
        (7, 2, 2, 4, {0: Silo(delay=9.0), 3: Silo(drop="recovery")}),
        (5, 1, 1, 4, {2: Silo(drop="train")}),
    ],
)
def test_recovery_with_dropouts_mixes_derived_and_received_shares(n, s, t, u, behaviour) -> None:
    cfg = ProtocolConfig(
        num_silos=n, num_stragglers=s, privacy_threshold=t, recovery_threshold=u, vector_length=20
    )
    h = Harness(cfg, seed=5)
    h.setup()
    for rnd in (1, 2):
        out = h.run_round(rnd, behaviour)
        assert isinstance(out.result, RoundResult), out.result
        expected = h.expected_total(rnd).double() / cfg.quantization.scale
        assert torch.allclose(out.result.total, expected)


def test_summing_the_uploads_ahead_gives_the_finish_it_would_make_alone() -> None:
    """``sum_uploads`` between close_collection and the replies (what the driver does while the
    recovery requests travel) changes nothing in the result; a second call is a no-op."""
    totals = []
    for ahead in (False, True):
        h = Harness(CFG, seed=5)
        s, c = h.server, h.clients
        for q in s.start_key_exchange():
            s.receive(c[q.recipient].receive(q))
        s.close_key_exchange()
        for q in s.start_round(1):
            task = c[q.recipient].receive(q)
            s.receive(c[q.recipient].upload(task, [h.partials(1, k) for k in task.partitions]))
        requests = s.close_collection()
        assert isinstance(requests, list)
        if ahead:
            s.sum_uploads()
            first = s._round.masked  # type: ignore[union-attr]
            s.sum_uploads()
            assert s._round.masked is first  # type: ignore[union-attr]
        for q in requests:
            s.receive(c[q.recipient].receive(q))
        res = s.finish()
        assert isinstance(res, RoundResult)
        totals.append(res.aggregate)
    assert torch.equal(totals[0], totals[1])
    assert torch.equal(totals[0], h.expected_total(1).remainder(CFG.p).to(torch.uint32))


# ------------------------------------------------- issue 29: the inputs digest binds the shares
def _round_with_inputs(
    cfg: ProtocolConfig, digests: dict[int, bytes], *, sent: bytes | dict[int, bytes] = b""
) -> tuple[Harness, list[RecoveryRequest]]:
    """Round 1 (a shared-mask round, the key-dealing round of masking='aligned' too) where
    silo i trained on inputs whose digest is ``digests[i]``; every silo uploads. ``sent``: the
    digest(s) the server's books say it sent (what it judges a dispute under)."""
    h = Harness(cfg, seed=3)
    h.setup()
    trains = h.server.start_round(1, inputs=sent)
    for q in trains:
        c = h.clients[q.recipient]
        task = c.receive(q)
        parts = [h.partials(1, k) for k in task.partitions]
        h.server.receive(c.upload(task, parts, model_digest=digests[q.recipient]))
    requests = h.server.close_collection()
    assert isinstance(requests, list)
    return h, requests


ALIGNED = ProtocolConfig(
    num_silos=4, num_stragglers=1, privacy_threshold=1, vector_length=12, masking="aligned"
)


@pytest.mark.parametrize("cfg", [CFG, ALIGNED], ids=["shares", "aligned-dealing"])
def test_an_honest_round_with_one_inputs_digest_decodes_exactly(cfg: ProtocolConfig) -> None:
    h, requests = _round_with_inputs(cfg, dict.fromkeys(range(cfg.n), b"\x5a" * 32))
    for req in requests:
        h.server.receive(h.clients[req.recipient].receive(req))
    res = h.server.finish()
    assert isinstance(res, RoundResult)
    assert torch.equal(cfg.field.to_signed(res.aggregate), h.expected_total(1))
    # the digest survives persistence: a silo restored from its saved state still answers
    assert ClientMachine.from_bytes(h.clients[0].to_bytes()).inputs == {1: b"\x5a" * 32}


@pytest.mark.parametrize("cfg", [CFG, ALIGNED], ids=["shares", "aligned-dealing"])
def test_a_silo_sent_other_inputs_is_accused_by_every_other_survivor(cfg: ProtocolConfig) -> None:
    # Issue 29, attack 1: the server sent silo 1 other inputs (e.g. max-weight 2^100). Its
    # derived shares are keyed, and its sealed shares authenticated, under its digest; every
    # other survivor checks them against its own: a derived share fails key confirmation, a
    # sealed one authentication. No survivor answers a recovery over a set holding silo 1 (each
    # authenticates every survivor's share), so no row of that set is ever unmasked.
    digests = {i: b"\x5a" * 32 for i in range(cfg.n)}
    digests[1] = b"\xa5" * 32
    h, requests = _round_with_inputs(cfg, digests)
    kinds = set()
    for req in requests:
        j = req.recipient
        before = h.clients[j].to_bytes()
        with pytest.raises(RemoteProtocolError) as err:
            h.clients[j].receive(req)
        assert h.clients[j].to_bytes() == before
        kinds.add(type(err.value))
        refusal = refusal_for(err.value, req)
        assert refusal is not None and refusal.code == RefusalCode.ACCUSES
        assert refusal.accused == (1 if j != 1 else req.survivors[0])
    if cfg is CFG:  # n = 5, U = 4: silo 1 seals its share for silo 0 and derives the others
        assert kinds == {RemoteProtocolError, KeyConfirmationError}


def test_the_inputs_digest_keys_every_share_and_is_in_the_sealed_box() -> None:
    # one ephemeral key, the same DH secret: the digest alone changes the key material of a
    # derived and of a sealed share, and a sealed box names it in its associated data
    a, b = KeyPair.generate(), KeyPair.generate()
    ctx = share_context(b"q", b"", nonce=bytes(16))
    e = ephemeral_secret(a.private_bytes, run_id=b"r", round_=1, sender=0, recipient=1, context=ctx)
    dh = exchange(e, b.public_bytes)
    kw = dict(
        run_id=b"r",
        round_=1,
        sender=0,
        recipient=1,
        ephemeral=public_of(e),
        recipient_key=b.public_bytes,
    )
    digests = (b"", b"\x01" * 32, b"\x02" * 32)
    keys = {
        share_secret(dh, **kw, context=c, kind=k, inputs=d)  # type: ignore[arg-type]
        for k, c in ((DERIVED, ctx), (SEALED, b""))
        for d in digests
    }
    assert len(keys) == 6
    key = share_secret(dh, **kw, context=b"", kind=SEALED, inputs=digests[1])  # type: ignore[arg-type]
    field = PrimeField(CFG.p)
    box = seal(
        key[:32],
        np.arange(4, dtype="<u4").tobytes(),
        run_id=b"r",
        round_=1,
        sender=0,
        recipient=1,
        purpose=share_purpose(digests[1]),
    )
    entry = Entry(public_of(e), box)
    where = dict(
        kind=SEALED, field=field, piece_length=4, run_id=b"r", round_=1, sender=0, recipient=1
    )
    share = open_share(key, entry, inputs=digests[1], **where)  # type: ignore[arg-type]
    assert share is not None and share.tolist() == [0, 1, 2, 3]
    with pytest.raises(RemoteProtocolError):  # the right key, another digest in the AD
        open_share(key, entry, inputs=digests[2], **where)  # type: ignore[arg-type]


def _dispute_round(
    cfg: ProtocolConfig, sent: bytes | dict[int, bytes]
) -> tuple[Harness, list[RecoveryRequest], dict[tuple[int, int], int]]:
    """Silo 1 trained on other inputs than the others; every survivor refuses (ACCUSES), the
    server asks each accused silo to reveal and judges under the digests ``sent``. Returns
    the harness, the requests and (accused, accuser) -> liar."""
    digests = {i: b"\x5a" * 32 for i in range(cfg.n)}
    digests[1] = b"\xa5" * 32
    h, requests = _round_with_inputs(cfg, digests, sent=sent)
    for req in requests:
        with pytest.raises(RemoteProtocolError) as err:
            h.clients[req.recipient].receive(req)
        refusal = refusal_for(err.value, req)
        assert refusal is not None and refusal.code == RefusalCode.ACCUSES
        h.server.receive(refusal)
    for ask in h.server.reveal_requests():
        h.server.receive(h.clients[ask.recipient].receive(ask))  # every accused reveals
    assert h.server.disputes_settled
    verdicts = h.server.close_disputes()
    return h, requests, {(v.accused, v.accuser): v.liar for v in verdicts}


@pytest.mark.parametrize("cfg", [CFG, ALIGNED], ids=["shares", "aligned-dealing"])
def test_a_dispute_is_judged_under_the_digest_the_server_sent_the_accused(
    cfg: ProtocolConfig,
) -> None:
    # The server's books say it sent every silo the same inputs (the inputs were changed on
    # the way to silo 1, or silo 1 lies about them): silo 1's revealed keys do not open its
    # shares under that digest, silo 0's do. The evidence names silo 1 in every verdict, and
    # it alone is dropped from S.
    h, _, liars = _dispute_round(cfg, b"\x5a" * 32)
    accusers = [j for j in range(cfg.n) if j != 1]
    assert liars == {**{(1, j): 1 for j in accusers}, (0, 1): 1}
    assert h.server.convicted == (1,)


@pytest.mark.parametrize("cfg", [CFG, ALIGNED], ids=["shares", "aligned-dealing"])
def test_a_server_that_sent_other_inputs_can_only_name_silos_wrongly(cfg: ProtocolConfig) -> None:
    # A server that knowingly sent silo 1 other inputs judges under what it sent each silo:
    # silo 1's shares open under its own digest, so silo 1's accusers are named liars, and so
    # is silo 1 (silo 0's share opens under silo 0's digest). Every verdict is a function of
    # what the server chose to send; no survivor answered a recovery over a set holding both
    # digests, so nothing was unmasked (the round can at most fail, or decode without them).
    h, requests, liars = _dispute_round(
        cfg, {**dict.fromkeys(range(cfg.n), b"\x5a" * 32), 1: b"\xa5" * 32}
    )
    accusers = [j for j in range(cfg.n) if j != 1]
    assert liars == {**{(1, j): j for j in accusers}, (0, 1): 1}
    assert len(h.server._current().replies) == 0 and len(requests) == cfg.n


def test_a_recovery_for_a_round_the_silo_has_no_inputs_of_asks_for_a_rekey() -> None:
    from coded_fl.errors import NeedsKeysError

    h, requests = _round_with_inputs(CFG, dict.fromkeys(range(CFG.n), b"\x5a" * 32))
    c = h.clients[2]
    c.inputs = {}  # e.g. state written back from before its upload
    with pytest.raises(NeedsKeysError, match="no record of uploading"):
        c.receive(next(r for r in requests if r.recipient == 2))
