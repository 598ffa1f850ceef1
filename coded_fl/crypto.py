"""Key agreement and authenticated encryption between silos, through an untrusted relay.

Shared by secure aggregation (:mod:`coded_fl.secagg`: mask shares) and coded shuffling
(:mod:`coded_fl.shuffling`: group keys for the coded multicasts).

Each silo makes one X25519 key pair per run (:class:`KeyPair`). Silos i and j derive a pairwise
key with HKDF-SHA256 over their X25519 shared secret, bound to the run and to the unordered
pair and to both public keys (:func:`pairwise_key`). Edge keys and group keys travel through
the server sealed with AES-256-GCM under that key (:func:`seal` / :func:`open_sealed`): the
server relays them but can neither read nor alter them. (Mask shares are sealed the same way
under a key of their own, from an ephemeral key per share, so that a disputed one can be
opened by the server alone: :mod:`coded_fl.secagg.evidence`.) The associated data binds
every ciphertext to (run, round, sender, recipient, purpose), so a box replayed from another
round, re-addressed to another silo or passed off as another kind of payload fails
authentication. Every seal draws
a fresh random 96-bit nonce (sent in front of the ciphertext): nonce safety never rests on a
round counter that a stale copy of a silo's state could roll back.

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

import functools
import os
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
    "NONCE_BYTES",
    "SEAL_OVERHEAD",
    "TAG_BYTES",
    "KeyPair",
    "check_public_key",
    "open_sealed",
    "pairwise_key",
    "seal",
]

KEY_BYTES = 32
TAG_BYTES = 16
NONCE_BYTES = 12
#: Bytes a sealed box adds to its plaintext: the random nonce and the tag.
SEAL_OVERHEAD = NONCE_BYTES + TAG_BYTES
_INFO = b"coded-fl/v2/pairwise-key"


@dataclass(frozen=True, repr=False)
class KeyPair:
    """An X25519 key pair. ``repr`` shows only the public half."""

    private_bytes: bytes
    public_bytes: bytes

    @classmethod
    def generate(cls) -> KeyPair:
        """A fresh key pair from the OS CSPRNG (via ``cryptography``).

        Returns
        -------
        KeyPair
            A new private key and its public key, 32 raw bytes each.
        """
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
        """The key pair of a raw X25519 private key (e.g. one restored from a silo's state).

        Parameters
        ----------
        raw
            The 32-byte private key.

        Returns
        -------
        KeyPair
            ``raw`` and its public key.

        Raises
        ------
        InputError
            If ``raw`` is not 32 bytes.
        """
        if not isinstance(raw, (bytes, bytearray)) or len(raw) != KEY_BYTES:
            raise InputError("an X25519 private key is 32 bytes")
        sk = X25519PrivateKey.from_private_bytes(bytes(raw))
        pub = sk.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(bytes(raw), pub)

    def exchange(self, peer_public: bytes) -> bytes:
        """The raw X25519 shared secret with a peer (use :func:`pairwise_key`, not this, as a key).

        Parameters
        ----------
        peer_public
            The peer's 32-byte public key.

        Returns
        -------
        bytes
            The 32-byte shared secret.

        Raises
        ------
        InputError
            If ``peer_public`` is not 32 bytes or is a small-order point (all-zero secret).
        """
        if not isinstance(peer_public, (bytes, bytearray)) or len(peer_public) != KEY_BYTES:
            raise InputError("an X25519 public key is 32 bytes")
        secret = _exchange(self.private_bytes, bytes(peer_public))
        if secret is None:  # low-order point: the shared secret would be all zeros
            raise InputError("peer public key is not a valid X25519 key")
        return secret

    def __repr__(self) -> str:
        return f"KeyPair(public={self.public_bytes.hex()[:16]}...)"


@functools.lru_cache(maxsize=4096)
def _exchange(private: bytes, peer_public: bytes) -> bytes | None:
    """The X25519 shared secret, or None for a low-order peer key.

    Memoised: a silo's state is rebuilt from bytes for every Flower message, and it needs the
    same n pairwise secrets in every round (two X25519 operations each, most of a recovery
    reply's CPU otherwise). The cache lives in the process's memory only, as the private key
    does while the silo works, and holds at most 4,096 pairs.
    """
    sk = X25519PrivateKey.from_private_bytes(private)
    try:
        return sk.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError:
        return None


def check_public_key(raw: bytes, *, sender: int) -> bytes:
    """A peer's X25519 public key, checked.

    Parameters
    ----------
    raw
        The key as received.
    sender
        Who sent it (named in the error).

    Returns
    -------
    bytes
        ``raw`` as bytes.

    Raises
    ------
    RemoteProtocolError
        Blaming ``sender``, if ``raw`` is not 32 bytes or is one of the small-order points that
        would make every shared secret zero.
    """
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != KEY_BYTES:
        raise RemoteProtocolError("public key must be 32 bytes", sender=sender)
    if _exchange(_PROBE, bytes(raw)) is None:
        raise RemoteProtocolError("public key is a small-order X25519 point", sender=sender)
    return bytes(raw)


#: A fixed private scalar to test peer keys with (a low-order key gives no shared secret).
_PROBE = bytes(KEY_BYTES - 1) + b"\x01"


def pairwise_key(
    mine: KeyPair,
    peer_public: bytes,
    *,
    run_id: bytes,
    me: int,
    peer: int,
    label: bytes = _INFO,
) -> bytes:
    """The 32-byte key silos ``me`` and ``peer`` share (the same from both ends).

    HKDF-SHA256 over the X25519 shared secret, salted with the unordered pair and the run; its
    info binds both public keys (ordered by silo id), so the key belongs to exactly this pair
    of keys.

    Parameters
    ----------
    mine
        This silo's key pair.
    peer_public
        The peer's public key.
    run_id
        The run (keys of different runs are independent).
    me, peer
        The two silo ids.
    label
        The purpose of the key (HKDF info prefix): keys of different labels are independent,
        so a key for deriving mask shares is never the sealing key.

    Returns
    -------
    bytes
        The pairwise key.

    Raises
    ------
    InputError
        If ``peer_public`` is not a usable X25519 public key.
    """
    keys = {me: mine.public_bytes, peer: bytes(peer_public)}
    lo, hi = (me, peer) if me <= peer else (peer, me)
    salt = struct.pack("<II", lo, hi) + run_id
    info = label + keys[lo] + keys[hi]  # both public keys: the key is bound to this pair
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=info)
    return hkdf.derive(mine.exchange(peer_public))


def _aad(
    run_id: bytes, round_: int, sender: int, recipient: int, purpose: bytes, counter: int
) -> bytes:
    """The associated data: the whole context a box is bound to."""
    if not 0 <= round_ < 2**63 or not 0 <= counter < 2**63:
        raise InputError("round and counter must be in [0, 2**63)")
    return (
        b"coded-fl/v2"
        + struct.pack("<QQIIH", round_, counter, sender, recipient, len(purpose))
        + purpose
        + run_id
    )


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
    """AES-256-GCM encrypt ``plaintext`` bound to its context, under a fresh random nonce.

    The context (run, round, sender, recipient, purpose, counter) is the associated data. The
    96-bit nonce is drawn from the OS CSPRNG for every box, so sealing the same context twice
    (a silo whose state was written back stale) never reuses a nonce; with random nonces one
    key may seal up to 2^32 boxes (NIST SP 800-38D), far beyond a run.

    Parameters
    ----------
    key
        The pairwise key (:func:`pairwise_key`).
    plaintext
        What to seal.
    run_id, round_, sender, recipient, purpose, counter
        The context; :func:`open_sealed` needs the same one.

    Returns
    -------
    bytes
        The nonce, the ciphertext and the tag: :data:`SEAL_OVERHEAD` bytes more than
        ``plaintext``.

    Raises
    ------
    InputError
        If ``round_`` or ``counter`` is outside [0, 2**63).
    """
    aad = _aad(run_id, round_, sender, recipient, purpose, counter)
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


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
    """Decrypt and authenticate a ciphertext made by :func:`seal`.

    Parameters
    ----------
    key
        The pairwise key.
    ciphertext
        What :func:`seal` returned.
    run_id, round_, sender, recipient, purpose, counter
        The context it must have been sealed in.

    Returns
    -------
    bytes
        The plaintext.

    Raises
    ------
    RemoteProtocolError
        Naming ``sender``, if the ciphertext is forged, altered, replayed from another context
        or re-addressed.
    InputError
        If ``round_`` or ``counter`` is outside [0, 2**63).
    """
    aad = _aad(run_id, round_, sender, recipient, purpose, counter)
    box = bytes(ciphertext)
    try:
        if len(box) < SEAL_OVERHEAD:
            raise InvalidTag
        return AESGCM(key).decrypt(box[:NONCE_BYTES], box[NONCE_BYTES:], aad)
    except InvalidTag:
        raise RemoteProtocolError(
            f"share for silo {recipient} in round {round_} failed authentication "
            "(altered, replayed from another round, or re-addressed)",
            sender=sender,
        ) from None
