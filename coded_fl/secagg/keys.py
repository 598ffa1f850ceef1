"""Key agreement and authenticated encryption between silos, through an untrusted relay.

Each silo makes one X25519 key pair per run (:class:`KeyPair`). Silos i and j derive a pairwise
key with HKDF-SHA256 over their X25519 shared secret, bound to the run and to the unordered
pair (:func:`pairwise_key`). Mask shares travel through the server sealed with AES-256-GCM
under that key (:func:`seal` / :func:`open_sealed`): the server relays them but can neither read
nor alter them. The nonce and the associated data bind every ciphertext to
(run, round, sender, recipient, purpose), so a share replayed from another round, re-addressed
to another silo or passed off as another kind of payload fails authentication.

No function here logs or puts key material into an error message.

>>> a, b = KeyPair.generate(), KeyPair.generate()
>>> kab = pairwise_key(a, b.public_bytes, run_id=b"run", me=0, peer=1)
>>> kba = pairwise_key(b, a.public_bytes, run_id=b"run", me=1, peer=0)
>>> kab == kba
True
>>> box = seal(kab, b"share", run_id=b"run", round_=3, sender=0, recipient=1, purpose=b"mask")
>>> open_sealed(kba, box, run_id=b"run", round_=3, sender=0, recipient=1, purpose=b"mask")
b'share'
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coded_fl.errors import InputError, RemoteProtocolError

__all__ = [
    "KEY_BYTES",
    "TAG_BYTES",
    "KeyPair",
    "check_public_key",
    "open_sealed",
    "pairwise_key",
    "seal",
]

KEY_BYTES = 32
TAG_BYTES = 16
_INFO = b"coded-fl/v1/pairwise-key"


@dataclass(frozen=True, repr=False)
class KeyPair:
    """An X25519 key pair. ``repr`` shows only the public half."""

    private_bytes: bytes
    public_bytes: bytes

    @classmethod
    def generate(cls) -> KeyPair:
        """A fresh key pair from the OS CSPRNG (via ``cryptography``)."""
        sk = X25519PrivateKey.generate()
        return cls.from_private_bytes(
            sk.private_bytes(
                serialization.Encoding.Raw,
                serialization.PrivateFormat.Raw,
                serialization.NoEncryption(),
            )
        )

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> KeyPair:
        if not isinstance(raw, (bytes, bytearray)) or len(raw) != KEY_BYTES:
            raise InputError("an X25519 private key is 32 bytes")
        sk = X25519PrivateKey.from_private_bytes(bytes(raw))
        pub = sk.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(bytes(raw), pub)

    def exchange(self, peer_public: bytes) -> bytes:
        if not isinstance(peer_public, (bytes, bytearray)) or len(peer_public) != KEY_BYTES:
            raise InputError("an X25519 public key is 32 bytes")
        sk = X25519PrivateKey.from_private_bytes(self.private_bytes)
        try:
            return sk.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
        except ValueError:  # low-order point: the shared secret would be all zeros
            raise InputError("peer public key is not a valid X25519 key") from None

    def __repr__(self) -> str:
        return f"KeyPair(public={self.public_bytes.hex()[:16]}...)"


def check_public_key(raw: bytes, *, sender: int) -> bytes:
    """A peer's X25519 public key: 32 bytes, not one of the small-order points that would make
    every shared secret zero. Anything else is the sender's fault."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != KEY_BYTES:
        raise RemoteProtocolError("public key must be 32 bytes", sender=sender)
    try:
        KeyPair.from_private_bytes(bytes(KEY_BYTES - 1) + b"\x01").exchange(bytes(raw))
    except InputError:
        raise RemoteProtocolError(
            "public key is a small-order X25519 point", sender=sender
        ) from None
    return bytes(raw)


def pairwise_key(mine: KeyPair, peer_public: bytes, *, run_id: bytes, me: int, peer: int) -> bytes:
    """The 32-byte key silos ``me`` and ``peer`` share (the same from both ends)."""
    lo, hi = (me, peer) if me <= peer else (peer, me)
    salt = struct.pack("<II", lo, hi) + run_id
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=_INFO)
    return hkdf.derive(mine.exchange(peer_public))


def _nonce_and_aad(
    run_id: bytes, round_: int, sender: int, recipient: int, purpose: bytes, counter: int
) -> tuple[bytes, bytes]:
    """The associated data names the whole context; the nonce is a hash of it.

    Under one pairwise key a context (round, sender, recipient, purpose, counter) is sealed at
    most once by the protocol, so nonces never repeat (a 96-bit hash collision aside).
    """
    if not 0 <= round_ < 2**63 or not 0 <= counter < 2**63:
        raise InputError("round and counter must be in [0, 2**63)")
    aad = (
        b"coded-fl/v1"
        + struct.pack("<QQIIH", round_, counter, sender, recipient, len(purpose))
        + purpose
        + run_id
    )
    return hashlib.sha256(aad).digest()[:12], aad


def seal(
    key: bytes,
    plaintext: bytes,
    *,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    purpose: bytes,
    counter: int = 0,
) -> bytes:
    """AES-256-GCM encrypt ``plaintext`` bound to (run, round, sender, recipient, purpose,
    counter). The caller seals each such context at most once."""
    nonce, aad = _nonce_and_aad(run_id, round_, sender, recipient, purpose, counter)
    return AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(
    key: bytes,
    ciphertext: bytes,
    *,
    run_id: bytes,
    round_: int,
    sender: int,
    recipient: int,
    purpose: bytes,
    counter: int = 0,
) -> bytes:
    """Decrypt and authenticate; a forged, altered, replayed or re-addressed ciphertext raises
    :class:`RemoteProtocolError` naming the sender."""
    nonce, aad = _nonce_and_aad(run_id, round_, sender, recipient, purpose, counter)
    try:
        return AESGCM(key).decrypt(nonce, bytes(ciphertext), aad)
    except InvalidTag:
        raise RemoteProtocolError(
            f"share for silo {recipient} in round {round_} failed authentication "
            "(altered, replayed from another round, or re-addressed)",
            sender=sender,
        ) from None
