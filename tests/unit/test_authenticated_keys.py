"""Authenticated key agreement (issue 29, item 5): a server that substitutes a relayed key is
refused by every silo that holds a trust roster, before anything is derived from that key.

The attack re-enacted: the server hands silo 0 its own X25519 key in place of silo 2's (in the
TrainRequest roster, and in a RecoveryRequest's survivor keys). Without a trust roster the
silo seals or derives with a key the server holds; with one it refuses with the typed code
``UNTRUSTED_KEY`` and its state (pairwise keys included) is unchanged.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.crypto import KeyPair
from coded_fl.errors import (
    ConfigurationError,
    NeedsKeysError,
    RemoteProtocolError,
    UntrustedKeyError,
)
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.client import ClientMachine, refusal_for
from coded_fl.secagg.identity import (
    Identity,
    TrustRoster,
    load_identity,
    load_trusted,
    verify_endorsement,
)
from coded_fl.secagg.messages import (
    KeyReply,
    RecoveryRequest,
    RefusalCode,
    TrainRequest,
    decode,
    encode,
)
from coded_fl.secagg.policy import ClientPolicy
from simulations.runtime.secagg_harness import Harness
from tests.machine_helpers import sign_views

CFG = ProtocolConfig(
    num_silos=4, num_stragglers=1, privacy_threshold=1, vector_length=8, run_id="auth"
)
CURVES = (ec.SECP256R1(), ec.SECP384R1())
IDS = {i: Identity(ec.derive_private_key(101 + i, CURVES[i % 2])) for i in range(CFG.n)}
TRUST = TrustRoster(x.public_bytes for x in IDS.values())
#: the server's own key pair, the one it substitutes
EVE = KeyPair.from_private_bytes(bytes(range(32)))


def harness(*, sign: bool = True, trust: bool = True, seed: int = 5) -> Harness:
    h = Harness(CFG, seed=seed)
    for i, m in h.clients.items():
        m.policy = dataclasses.replace(
            m.policy, identity=IDS[i] if sign else None, trusted=TRUST if trust else None
        )
    h.setup()
    return h


def substituted(req: TrainRequest, victim: int, key: bytes) -> TrainRequest:
    roster = tuple((s, key if s == victim else k) for s, k in req.roster)
    return dataclasses.replace(req, roster=roster)


def refuses_untrusted(machine: ClientMachine, msg: object) -> str:
    """The machine refuses ``msg`` with UNTRUSTED_KEY, changes nothing and derives nothing."""
    before, pairwise = machine.to_bytes(), dict(machine._pairwise)
    with pytest.raises(UntrustedKeyError) as info:
        machine.receive(msg)  # type: ignore[arg-type]
    assert machine.to_bytes() == before
    assert machine._pairwise == pairwise  # no key derived from anything it was sent
    refusal = refusal_for(info.value, msg)  # type: ignore[arg-type]
    assert refusal is not None and refusal.code == RefusalCode.UNTRUSTED_KEY
    assert decode(encode(refusal)).code == RefusalCode.UNTRUSTED_KEY  # type: ignore[attr-defined]
    return str(info.value)


def no_key_material(text: str, *keys: bytes) -> None:
    for k in keys:
        assert k.hex() not in text and k.hex()[:16] not in text


# ----------------------------------------------------------------------------- the attack
def test_a_substituted_roster_key_is_refused_before_anything_is_derived() -> None:
    h = harness()
    trains = h.server.start_round(1)
    victim = trains[0]
    bad = substituted(victim, 2, EVE.public_bytes)
    text = refuses_untrusted(h.clients[0], bad)
    assert "silo 2" in text and "codedfl.trusted-keys" in text
    no_key_material(text, EVE.public_bytes, h.server.roster[2], IDS[2].public_bytes)
    h.clients[0].receive(victim)  # the genuine request is still accepted


def test_without_trust_the_substituted_key_is_used_as_today() -> None:
    """The attack works without a trust roster (the behaviour this change makes optional)."""
    h = harness(trust=False)
    bad = substituted(h.server.start_round(1)[0], 2, EVE.public_bytes)
    h.clients[0].receive(bad)
    assert h.clients[0].roster[2] == EVE.public_bytes


def test_a_substituted_recovery_key_is_refused_by_a_silo_that_missed_the_round() -> None:
    h = harness()
    assert isinstance(h.run_round(1).result, RoundResult)
    trains = h.server.start_round(2)
    stale = ClientMachine.from_bytes(h.clients[0].to_bytes(), policy=h.clients[0].policy)
    for q in trains:
        c = h.clients[q.recipient]
        task = c.on_train_request(q)
        h.server.receive(c.upload(task, [h.partials(2, k) for k in task.partitions]))
    requests = sign_views(h.server, h.clients, h.server.close_collection())
    assert isinstance(requests, list)
    req = next(q for q in requests if q.recipient == 0)
    i = req.survivors.index(2)
    keys = tuple(EVE.public_bytes if j == i else k for j, k in enumerate(req.keys))
    bad = dataclasses.replace(req, keys=keys)
    text = refuses_untrusted(stale, bad)
    no_key_material(text, EVE.public_bytes)
    # the genuine one: refused too, since the copy holds no digest of round 2's inputs, which
    # bind the shares (issue 29): it asks for a rekey instead of answering blind
    with pytest.raises(NeedsKeysError, match="no record of uploading"):
        stale.receive(req)


def test_an_unsigned_entry_is_refused_when_trust_is_on() -> None:
    h = harness()
    req = h.server.start_round(1)[0]
    pairs = zip(req.roster, req.credentials, strict=True)
    creds = tuple((b"", b"") if s == 3 else c for (s, _), c in pairs)
    refuses_untrusted(h.clients[0], dataclasses.replace(req, credentials=creds))
    text = refuses_untrusted(h.clients[0], dataclasses.replace(req, credentials=()))
    assert "unsigned" in text


def test_no_downgrade_unsigned_peers_are_refused_by_a_trusting_silo() -> None:
    """Peers that do not sign: a silo that trusts refuses the round (it never falls back)."""
    h = Harness(CFG, seed=5)
    h.clients[1].policy = dataclasses.replace(h.clients[1].policy, trusted=TRUST)
    h.setup()
    req = next(q for q in h.server.start_round(1) if q.recipient == 1)
    assert req.credentials == ()
    refuses_untrusted(h.clients[1], req)


def test_a_signature_for_index_i_replayed_at_index_j_is_refused() -> None:
    h = harness()
    req = h.server.start_round(1)[0]
    pos = {s: n for n, (s, _) in enumerate(req.roster)}
    creds = list(req.credentials)
    roster = list(req.roster)
    # silo 2's key and endorsement, relayed as silo 3's entry (and 3's as 2's)
    roster[pos[2]], roster[pos[3]] = (2, req.roster[pos[3]][1]), (3, req.roster[pos[2]][1])
    creds[pos[2]], creds[pos[3]] = creds[pos[3]], creds[pos[2]]
    bad = dataclasses.replace(req, roster=tuple(roster), credentials=tuple(creds))
    assert "does not verify" in refuses_untrusted(h.clients[0], bad)


def test_one_identity_for_two_indices_is_refused() -> None:
    """A trusted site that signs keys for two indices (a Sybil) is refused."""
    cfg = CFG
    h = harness()
    req = h.server.start_round(1)[0]
    pos = {s: n for n, (s, _) in enumerate(req.roster)}
    forged = KeyPair.from_private_bytes(bytes(range(1, 33)))
    sig = IDS[2].endorse(
        digest=cfg.digest, run=cfg.run_bytes, silo=3, public_key=forged.public_bytes
    )
    roster = list(req.roster)
    creds = list(req.credentials)
    roster[pos[3]] = (3, forged.public_bytes)
    creds[pos[3]] = (IDS[2].public_bytes, sig)
    bad = dataclasses.replace(req, roster=tuple(roster), credentials=tuple(creds))
    assert "silos 2 and 3" in refuses_untrusted(h.clients[0], bad)


def test_an_identity_outside_the_trusted_keys_is_refused() -> None:
    h = harness()
    req = h.server.start_round(1)[0]
    cfg = CFG
    stranger = Identity(ec.derive_private_key(999, ec.SECP256R1()))
    pos = {s: n for n, (s, _) in enumerate(req.roster)}
    creds = list(req.credentials)
    key = req.roster[pos[1]][1]
    creds[pos[1]] = (
        stranger.public_bytes,
        stranger.endorse(digest=cfg.digest, run=cfg.run_bytes, silo=1, public_key=key),
    )
    text = refuses_untrusted(h.clients[0], dataclasses.replace(req, credentials=tuple(creds)))
    assert "not in this silo's trusted keys" in text


def test_a_signature_from_another_session_is_refused() -> None:
    other = dataclasses.replace(CFG, session="elsewhere")
    h = harness()
    req = h.server.start_round(1)[0]
    pos = {s: n for n, (s, _) in enumerate(req.roster)}
    creds = list(req.credentials)
    key = req.roster[pos[1]][1]
    sig = IDS[1].endorse(digest=other.digest, run=other.run_bytes, silo=1, public_key=key)
    creds[pos[1]] = (IDS[1].public_bytes, sig)
    refuses_untrusted(h.clients[0], dataclasses.replace(req, credentials=tuple(creds)))


# ----------------------------------------------------------------------------- honest runs
@pytest.mark.parametrize("masking", ["shared", "aligned"])
def test_signed_rounds_complete_exactly_as_unsigned_ones(masking: str) -> None:
    cfg = dataclasses.replace(CFG, masking=masking) if masking != "shared" else CFG
    if masking == "aligned":
        cfg = ProtocolConfig(
            num_silos=6,
            num_stragglers=1,
            privacy_threshold=1,
            vector_length=8,
            run_id="auth",
            masking="aligned",
        )
    ids = {i: Identity(ec.derive_private_key(201 + i, CURVES[i % 2])) for i in range(cfg.n)}
    trust = TrustRoster(x.public_bytes for x in ids.values())
    plain, signed = Harness(cfg, seed=9), Harness(cfg, seed=9)
    for i, m in signed.clients.items():
        m.policy = dataclasses.replace(m.policy, identity=ids[i], trusted=trust)
    plain.setup()
    signed.setup()
    for r in range(1, 5):
        a, b = plain.run_round(r).result, signed.run_round(r).result
        assert isinstance(a, RoundResult) and isinstance(b, RoundResult)
        assert torch.equal(a.aggregate, b.aggregate)
        assert torch.equal(cfg.field.to_signed(b.aggregate), signed.expected_total(r))


def test_the_server_relays_each_silos_credentials_with_its_entry() -> None:
    h = harness()
    req = h.server.start_round(1)[0]
    for (s, key), (identity, sig) in zip(req.roster, req.credentials, strict=True):
        assert identity == IDS[s].public_bytes
        assert verify_endorsement(
            digest=CFG.digest,
            run=CFG.run_bytes,
            silo=s,
            public_key=key,
            identity=identity,
            signature=sig,
        )


def test_the_server_refuses_a_key_reply_whose_signature_does_not_verify() -> None:
    h = Harness(CFG, seed=5)
    h.clients[0].policy = dataclasses.replace(h.clients[0].policy, identity=IDS[0])
    req = h.server.start_key_exchange()[0]
    reply = h.clients[0].receive(req)
    assert isinstance(reply, KeyReply) and reply.identity == IDS[0].public_bytes
    bad = dataclasses.replace(reply, signature=bytes(len(reply.signature)))
    with pytest.raises(RemoteProtocolError, match="does not verify"):
        h.server.receive(bad)
    h.server.receive(reply)


# ----------------------------------------------------------------------------- wire
@settings(max_examples=60, deadline=None)
@given(
    identity=st.sampled_from([0, 33, 49]).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    signature=st.binary(max_size=100),
)
def test_key_reply_credentials_round_trip_or_are_refused_typed(
    identity: bytes, signature: bytes
) -> None:
    msg = KeyReply(
        digest=CFG.digest,
        round=0,
        sender=1,
        recipient=-1,
        public_key=bytes(32),
        identity=identity,
        signature=signature,
    )
    raw = encode(msg)
    sizes = (len(identity), len(signature))
    if sizes in {(0, 0), (33, 64), (49, 96)}:
        assert decode(raw) == msg
    else:
        with pytest.raises(RemoteProtocolError):
            decode(raw)


@settings(max_examples=40, deadline=None)
@given(signed=st.lists(st.booleans(), min_size=1, max_size=4), cut=st.integers(0, 2000))
def test_signed_rosters_round_trip_and_truncations_are_refused(
    signed: list[bool], cut: int
) -> None:
    roster = tuple((s, bytes([s + 1]) * 32) for s in range(len(signed)))
    creds = tuple(
        (IDS[s].public_bytes, bytes(64 if s % 2 == 0 else 96)) if on else (b"", b"")
        for s, on in enumerate(signed)
    )
    creds = creds if any(signed) else ()
    msg = TrainRequest(digest=CFG.digest, round=1, sender=-1, recipient=0, roster=roster)
    msg = dataclasses.replace(msg, credentials=creds)
    raw = encode(msg)
    assert decode(raw) == msg
    rec = RecoveryRequest(
        digest=CFG.digest,
        round=1,
        sender=-1,
        recipient=0,
        survivors=tuple(s for s, _ in roster),
        weights=((1,) * len(roster),),
        shares=(b"x",) * len(roster),
        tokens=(b"",) * len(roster),
        keys=tuple(k for _, k in roster),
        credentials=creds,
    )
    assert decode(encode(rec)) == rec
    if cut < len(raw):
        with pytest.raises(RemoteProtocolError):
            decode(raw[:cut])


def test_credentials_must_match_the_entries() -> None:
    from coded_fl.errors import InputError

    msg = TrainRequest(
        digest=CFG.digest,
        round=1,
        sender=-1,
        recipient=0,
        roster=((0, bytes(32)), (1, bytes(32))),
        credentials=((b"", b""),),
    )
    with pytest.raises(InputError):
        encode(msg)


# ----------------------------------------------------------------------------- settings
def _openssh(tmp: Path, name: str, curve: ec.EllipticCurve) -> Identity:
    key = ec.generate_private_key(curve)
    (tmp / name).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    (tmp / f"{name}.pub").write_bytes(pub + f" {name}\n".encode())
    return Identity(key)


def test_node_config_loads_flower_auth_keys(tmp_path: Path) -> None:
    """The keys simulations/deploy/certs.py makes (OpenSSH, P-384; and P-256) load as
    identities; a directory's private keys are skipped, its .pub files trusted."""
    a = _openssh(tmp_path, "site0", ec.SECP384R1())
    b = _openssh(tmp_path, "site1", ec.SECP256R1())
    policy = ClientPolicy().tightened(
        {
            "codedfl.identity-key": str(tmp_path / "site0"),
            "codedfl.trusted-keys": str(tmp_path),
        }
    )
    assert policy.identity == a
    assert policy.trusted is not None
    assert policy.trusted.identities == {a.public_bytes, b.public_bytes}
    assert load_identity(tmp_path / "site1") == b
    assert load_trusted(tmp_path / "site1.pub").identities == {b.public_bytes}
    assert ClientPolicy().tightened({}).trusted is None  # off by default
    assert "PRIVATE" not in repr(policy) and repr(policy.identity) == "Identity(secp384r1)"


def test_pem_keys_load_too(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "id.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (tmp_path / "trust.txt").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    me = load_identity(tmp_path / "id.pem")
    assert load_trusted(tmp_path / "trust.txt").identities == {me.public_bytes}


@pytest.mark.parametrize(
    ("content", "setting"),
    [
        (b"not a key", "codedfl.identity-key"),
        (
            b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOdWmDbHqUHp3l6Zb0tWgRVu3FhP4dYkU/0kKyJn6mZB x",
            "codedfl.trusted-keys",
        ),
    ],
)
def test_unusable_key_files_name_the_setting_and_no_key(
    tmp_path: Path, content: bytes, setting: str
) -> None:
    path = tmp_path / "k.pub"
    path.write_bytes(content)
    load = load_identity if setting == "codedfl.identity-key" else load_trusted
    with pytest.raises(ConfigurationError, match=setting) as info:
        load(path)
    assert "AAAA" not in str(info.value)
    with pytest.raises(ConfigurationError, match=setting):
        load(tmp_path / "missing")


def test_a_directory_without_public_keys_is_refused(tmp_path: Path) -> None:
    _openssh(tmp_path, "only", ec.SECP384R1())
    (tmp_path / "only.pub").unlink()
    with pytest.raises(ConfigurationError, match="no public key"):
        load_trusted(tmp_path)


_SIGNED = harness()
_TRAINS = _SIGNED.server.start_round(1)


@settings(max_examples=40, deadline=None)
@given(
    silo=st.integers(0, CFG.n - 1),
    victim=st.integers(0, CFG.n - 1),
    seed=st.binary(min_size=32, max_size=32),
    keep_credentials=st.booleans(),
)
def test_any_substituted_peer_key_is_refused(
    silo: int, victim: int, seed: bytes, keep_credentials: bool
) -> None:
    """Whichever silo, whichever peer entry, whatever key (with the victim's credentials kept,
    or dropped): refused with UNTRUSTED_KEY, nothing derived."""
    if silo == victim:
        return  # its own entry: a rekey request (NEEDS_KEYS), covered by the machine's tests
    req = next(q for q in _TRAINS if q.recipient == silo)
    fake = KeyPair.from_private_bytes(seed).public_bytes
    bad = substituted(req, victim, fake)
    if not keep_credentials:
        pos = [s for s, _ in req.roster].index(victim)
        creds = list(req.credentials)
        creds[pos] = (b"", b"")
        bad = dataclasses.replace(bad, credentials=tuple(creds))
    machine = ClientMachine.from_bytes(
        _SIGNED.clients[silo].to_bytes(), policy=_SIGNED.clients[silo].policy
    )
    refuses_untrusted(machine, bad)
