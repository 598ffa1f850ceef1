"""Key agreement and sealed shares: authenticated, bound to their context, no secret in errors."""

from __future__ import annotations

import pytest

from coded_fl.crypto import (
    NONCE_BYTES,
    SEAL_OVERHEAD,
    KeyPair,
    check_public_key,
    open_sealed,
    pairwise_key,
    seal,
)
from coded_fl.errors import InputError, RemoteProtocolError

CTX = {"run_id": b"r", "round_": 4, "sender": 1, "recipient": 2, "purpose": b"mask-share"}


def keys():
    a, b = KeyPair.generate(), KeyPair.generate()
    return (
        pairwise_key(a, b.public_bytes, run_id=b"r", me=1, peer=2),
        pairwise_key(b, a.public_bytes, run_id=b"r", me=2, peer=1),
    )


def test_both_ends_derive_the_same_key_and_other_runs_or_pairs_differ():
    a, b, c = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    k = pairwise_key(a, b.public_bytes, run_id=b"r", me=0, peer=1)
    assert k == pairwise_key(b, a.public_bytes, run_id=b"r", me=1, peer=0)
    assert k != pairwise_key(a, b.public_bytes, run_id=b"r2", me=0, peer=1)
    assert k != pairwise_key(a, c.public_bytes, run_id=b"r", me=0, peer=1)
    assert len(k) == 32


@pytest.mark.parametrize(
    "change",
    [
        {"round_": 3},
        {"sender": 2, "recipient": 1},
        {"recipient": 3},
        {"purpose": b"other"},
        {"run_id": b"x"},
    ],
)
def test_a_share_opens_only_in_its_own_context(change):
    k12, k21 = keys()
    box = seal(k12, b"payload", **CTX)
    assert open_sealed(k21, box, **CTX) == b"payload"
    with pytest.raises(RemoteProtocolError, match="failed authentication") as err:
        open_sealed(k21, box, **{**CTX, **change})
    assert err.value.sender == change.get("sender", 1)


def test_tampered_ciphertext_is_refused_and_blamed_on_the_sender():
    k12, k21 = keys()
    box = bytearray(seal(k12, b"payload", **CTX))
    box[3] ^= 1
    with pytest.raises(RemoteProtocolError, match="silo 1") as err:
        open_sealed(k21, bytes(box), **CTX)
    assert "payload" not in str(err.value)


def test_no_key_material_in_repr_or_errors():
    kp = KeyPair.generate()
    assert kp.private_bytes.hex() not in repr(kp)
    with pytest.raises(InputError) as err:
        KeyPair.from_private_bytes(b"\x07" * 31)
    assert "07070707" not in str(err.value)


def test_public_key_checks():
    kp = KeyPair.generate()
    assert check_public_key(kp.public_bytes, sender=3) == kp.public_bytes
    with pytest.raises(RemoteProtocolError, match="32 bytes"):
        check_public_key(b"\x01" * 31, sender=3)
    with pytest.raises(RemoteProtocolError, match="small-order"):
        check_public_key(bytes(32), sender=3)  # the all-zero point


def test_sealing_one_context_twice_never_reuses_a_nonce():
    # a silo whose state was written back stale seals the same (round, sender, recipient)
    # again: with nonces derived from the context, the two boxes would share a GCM nonce
    k12, k21 = keys()
    first, second = seal(k12, b"payload-1", **CTX), seal(k12, b"payload-2", **CTX)
    assert first[:NONCE_BYTES] != second[:NONCE_BYTES]
    assert len(first) == len(b"payload-1") + SEAL_OVERHEAD
    assert open_sealed(k21, first, **CTX) == b"payload-1"
    assert open_sealed(k21, second, **CTX) == b"payload-2"
    for short in (b"", first[: SEAL_OVERHEAD - 1]):
        with pytest.raises(RemoteProtocolError, match="failed authentication"):
            open_sealed(k21, short, **CTX)


def test_the_pairwise_key_is_bound_to_both_public_keys():
    # the HKDF info carries both public keys, ordered by silo id: the same shared secret
    # under another claimed public key gives another key
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    a, b = KeyPair.generate(), KeyPair.generate()
    k = pairwise_key(a, b.public_bytes, run_id=b"r", me=0, peer=1)
    secret = a.exchange(b.public_bytes)
    salt = (0).to_bytes(4, "little") + (1).to_bytes(4, "little") + b"r"

    def hkdf(info: bytes) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)

    info = b"coded-fl/v2/pairwise-key"
    assert k == hkdf(info + a.public_bytes + b.public_bytes)
    assert k != hkdf(info)
