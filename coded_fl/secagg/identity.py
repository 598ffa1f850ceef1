"""Authenticated key agreement: silo identities that sign their key-agreement public keys.

The server relays every silo's X25519 public key (the roster of a ``TrainRequest``, the keys
of a ``RecoveryRequest``). Unauthenticated, a server that substitutes one entry with a key of
its own reads what the silo seals for that peer and derives the pairwise keys in its place
(``docs/protocol.md``, "Authenticated keys"). Here each silo may hold an *identity*: an ECDSA
key pair on NIST P-256 or P-384 (the SuperNode authentication keys Flower already uses, so an
organisation distributes one set of keys). In its ``KeyReply`` the silo sends its identity
public key and an *endorsement*: its signature over

    DOMAIN | len | config digest | len | run and session | silo index (i32) | len | KA key

(every variable field length-prefixed, u32 little endian; ECDSA with SHA-256 on P-256,
SHA-384 on P-384), so a signature binds one key-agreement key to one silo index of one run
and session. The server relays the pair with every roster entry. A silo with a
:class:`TrustRoster` checks every peer entry it uses before deriving anything from its key:
a valid endorsement, by an identity in the roster, for that silo index, and no identity for
two indices; an unsigned entry is refused too (no downgrade).

On the wire an identity public key is its compressed SEC1 point (33 or 49 bytes) and a
signature is r | s (64 or 96 bytes), so both have fixed sizes per curve.

Node config (``coded_fl.secagg.policy``):

``codedfl.identity-key``   path of this silo's private key (PEM or OpenSSH; P-256 or P-384)
``codedfl.trusted-keys``   path of a file of public keys (OpenSSH lines or PEM blocks) or a
                           directory whose ``*.pub`` and ``*.pem`` public-key files are read

>>> from cryptography.hazmat.primitives.asymmetric import ec
>>> me = Identity(ec.generate_private_key(ec.SECP256R1()))
>>> sig = me.endorse(digest=b"8 bytes!", run=b"run/", silo=2, public_key=bytes(32))
>>> trust = TrustRoster([me.public_bytes])
>>> trust.check(digest=b"8 bytes!", run=b"run/", silo=2, public_key=bytes(32),
...             identity=me.public_bytes, signature=sig)
>>> trust.check(digest=b"8 bytes!", run=b"run/", silo=3, public_key=bytes(32),
...             identity=me.public_bytes, signature=sig)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
coded_fl.errors.UntrustedKeyError: silo -1: codedfl-untrusted-key: silo 3's key-agreement key ...
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from coded_fl.errors import ConfigurationError, RemoteProtocolError, UntrustedKeyError

__all__ = [
    "CREDENTIAL_SIZES",
    "DOMAIN",
    "IDENTITY_KEY_SETTING",
    "TRUSTED_KEYS_SETTING",
    "Identity",
    "TrustRoster",
    "check_credential_sizes",
    "load_identity",
    "load_trusted",
    "verify_endorsement",
    "verify_signature",
]

#: The domain separator every endorsement starts with.
DOMAIN = b"coded-fl 2026-11-26 key-agreement endorsement v1\x00"

#: Node-config key: path of this silo's identity private key.
IDENTITY_KEY_SETTING = "codedfl.identity-key"

#: Node-config key: path of the trusted identity public keys (a file or a directory).
TRUSTED_KEYS_SETTING = "codedfl.trusted-keys"

# curve -> (compressed point bytes, signature bytes, hash)
_CURVES: dict[type[ec.EllipticCurve], tuple[int, int, type[hashes.HashAlgorithm]]] = {
    ec.SECP256R1: (33, 64, hashes.SHA256),
    ec.SECP384R1: (49, 96, hashes.SHA384),
}
_BY_POINT = {point: (curve, sig, h) for curve, (point, sig, h) in _CURVES.items()}

#: The (identity key, signature) sizes a relayed roster entry may carry; (0, 0): unsigned.
CREDENTIAL_SIZES = frozenset({(0, 0), *((p, s) for p, s, _ in _CURVES.values())})


def check_credential_sizes(identity: bytes, signature: bytes, *, sender: int) -> None:
    """Refuse an (identity key, signature) pair whose sizes fit no supported curve.

    Parameters
    ----------
    identity, signature
        The pair as it came off the wire (both empty: an unsigned entry).
    sender
        Who sent it (for the error).

    Raises
    ------
    RemoteProtocolError
        If the sizes are not (0, 0), (33, 64) or (49, 96).
    """
    if (len(identity), len(signature)) not in CREDENTIAL_SIZES:
        raise RemoteProtocolError(
            f"an identity key of {len(identity)} bytes with a signature of {len(signature)} "
            f"bytes; expected one of {sorted(CREDENTIAL_SIZES)}",
            sender=sender,
        )


def _message(*, digest: bytes, run: bytes, silo: int, public_key: bytes) -> bytes:
    """The unambiguous bytes an endorsement signs."""
    parts = [DOMAIN]
    for field in (digest, run):
        parts += [struct.pack("<I", len(field)), field]
    parts += [struct.pack("<i", silo), struct.pack("<I", len(public_key)), public_key]
    return b"".join(parts)


class Identity:
    """A silo's identity signing key (never leaves the silo; its repr shows no key material).

    Parameters
    ----------
    key
        An ECDSA private key on P-256 or P-384.

    Raises
    ------
    ConfigurationError
        If the key is not an ECDSA key on a supported curve.
    """

    def __init__(self, key: object) -> None:
        if not isinstance(key, ec.EllipticCurvePrivateKey) or type(key.curve) not in _CURVES:
            raise ConfigurationError(
                f"the identity key ({IDENTITY_KEY_SETTING}) must be an ECDSA key on P-256 or "
                "P-384 (Flower's SuperNode authentication keys are)"
            )
        self._key = key
        _, self._sig_bytes, self._hash = _CURVES[type(key.curve)]
        self.public_bytes = key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
        )

    def __repr__(self) -> str:
        return f"Identity({self._key.curve.name})"

    def __deepcopy__(self, memo: dict[int, object]) -> Identity:
        return self  # immutable (a machine's copy shares its policy's key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.public_bytes == self.public_bytes

    def __hash__(self) -> int:
        return hash(self.public_bytes)

    def endorse(self, *, digest: bytes, run: bytes, silo: int, public_key: bytes) -> bytes:
        """Sign ``public_key`` as silo ``silo``'s key-agreement key in run ``run``.

        Parameters
        ----------
        digest
            The configuration digest of the session.
        run
            The run and session (:attr:`ProtocolConfig.run_bytes`).
        silo
            This silo's index.
        public_key
            Its X25519 public key for the session.

        Returns
        -------
        bytes
            The signature as r | s (64 or 96 bytes).
        """
        return self.sign(_message(digest=digest, run=run, silo=silo, public_key=public_key))

    def sign(self, message: bytes) -> bytes:
        """Sign ``message`` (a caller's unambiguous, domain-separated bytes).

        Parameters
        ----------
        message
            What to sign (e.g. :func:`coded_fl.secagg.evidence.share_statement`).

        Returns
        -------
        bytes
            The signature as r | s (64 or 96 bytes).
        """
        der = self._key.sign(message, ec.ECDSA(self._hash()))
        r, s = decode_dss_signature(der)
        half = self._sig_bytes // 2
        return r.to_bytes(half, "big") + s.to_bytes(half, "big")


def verify_endorsement(
    *, digest: bytes, run: bytes, silo: int, public_key: bytes, identity: bytes, signature: bytes
) -> bool:
    """Whether ``signature`` is ``identity``'s endorsement of ``public_key`` for silo ``silo``.

    Parameters
    ----------
    digest, run, silo, public_key
        As for :meth:`Identity.endorse`.
    identity
        The signer's compressed public point.
    signature
        r | s.

    Returns
    -------
    bool
        False for a bad signature, a malformed key or mismatched sizes (never raises).
    """
    return verify_signature(
        identity, _message(digest=digest, run=run, silo=silo, public_key=public_key), signature
    )


def verify_signature(identity: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` (r | s) is ``identity``'s signature of ``message``.

    Parameters
    ----------
    identity
        The signer's compressed public point (P-256 or P-384).
    message
        The signed bytes.
    signature
        r | s, of the curve's size.

    Returns
    -------
    bool
        False for a bad signature, a malformed key or mismatched sizes (never raises).
    """
    spec = _BY_POINT.get(len(identity))
    if spec is None or len(signature) != spec[1]:
        return False
    curve, size, hash_ = spec
    try:
        key = ec.EllipticCurvePublicKey.from_encoded_point(curve(), identity)
        half = size // 2
        der = encode_dss_signature(
            int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big")
        )
        key.verify(der, message, ec.ECDSA(hash_()))
    except (InvalidSignature, ValueError):
        return False
    return True


class TrustRoster:
    """The identity public keys a silo trusts (its organisation's registered sites).

    Parameters
    ----------
    identities
        Compressed public points (:attr:`Identity.public_bytes`).
    """

    def __init__(self, identities: Iterable[bytes]) -> None:
        self.identities = frozenset(bytes(i) for i in identities)

    def __repr__(self) -> str:
        return f"TrustRoster({len(self.identities)} identities)"

    def __deepcopy__(self, memo: dict[int, object]) -> TrustRoster:
        return self  # immutable

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrustRoster) and other.identities == self.identities

    def __hash__(self) -> int:
        return hash(self.identities)

    def check(
        self,
        *,
        digest: bytes,
        run: bytes,
        silo: int,
        public_key: bytes,
        identity: bytes,
        signature: bytes,
    ) -> None:
        """Refuse a roster entry unless a trusted identity endorsed it for this silo index.

        Parameters
        ----------
        digest, run, silo, public_key
            The entry and the session (as :meth:`Identity.endorse` signs them).
        identity, signature
            What the server relayed with the entry (both empty: unsigned).

        Raises
        ------
        UntrustedKeyError
            If the entry is unsigned, signed by an identity outside the roster, or the
            signature does not verify (another key, index or session); the message names
            the settings to change and no key material.
        """
        if not identity and not signature:
            why = "is unsigned, and this silo trusts signed keys only"
        elif identity not in self.identities:
            why = "is signed by an identity that is not in this silo's trusted keys"
        elif not verify_endorsement(
            digest=digest,
            run=run,
            silo=silo,
            public_key=public_key,
            identity=identity,
            signature=signature,
        ):
            why = "carries a signature that does not verify for this silo index and session"
        else:
            return
        raise UntrustedKeyError(
            f"codedfl-untrusted-key: silo {silo}'s key-agreement key {why}; nothing was "
            f"derived from it. Add that site's identity public key to {TRUSTED_KEYS_SETTING} "
            f"on this site, and set {IDENTITY_KEY_SETTING} on that site (or the server "
            "relayed a substituted key)",
            sender=-1,
        )


def load_identity(path: str | Path) -> Identity:
    """Read a silo's identity private key (PEM, PKCS8 or traditional, or OpenSSH).

    Parameters
    ----------
    path
        The key file (unencrypted).

    Returns
    -------
    Identity

    Raises
    ------
    ConfigurationError
        If the file cannot be read or holds no supported private key (the message names the
        setting and the path, never the key).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"{IDENTITY_KEY_SETTING}: cannot read {path}: {type(exc).__name__}"
        ) from None
    try:
        if raw.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
            key: object = serialization.load_ssh_private_key(raw, password=None)
        else:
            key = serialization.load_pem_private_key(raw, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigurationError(
            f"{IDENTITY_KEY_SETTING}: {path} holds no unencrypted PEM or OpenSSH private key"
        ) from None
    return Identity(key)


def _public_points(raw: bytes, where: str) -> list[bytes]:
    """The compressed points of the public keys in one file's bytes."""
    keys: list[object] = []
    text = raw.decode("utf-8", "replace")
    blocks = text.split("-----BEGIN PUBLIC KEY-----")
    for block in blocks[1:]:
        end = block.find("-----END PUBLIC KEY-----")
        if end < 0:
            raise ConfigurationError(f"{TRUSTED_KEYS_SETTING}: {where} has an unended PEM block")
        pem = "-----BEGIN PUBLIC KEY-----" + block[: end + len("-----END PUBLIC KEY-----")]
        keys.append(serialization.load_pem_public_key(pem.encode()))
    for line in blocks[0].splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(serialization.load_ssh_public_key(line.encode()))
    points = []
    for key in keys:
        if not isinstance(key, ec.EllipticCurvePublicKey) or type(key.curve) not in _CURVES:
            raise ConfigurationError(
                f"{TRUSTED_KEYS_SETTING}: {where} holds a key that is not ECDSA on P-256 or P-384"
            )
        points.append(
            key.public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
            )
        )
    return points


def load_trusted(path: str | Path) -> TrustRoster:
    """Read the trusted identity public keys.

    Parameters
    ----------
    path
        A file of public keys (OpenSSH lines, ``#`` comments, and/or PEM ``PUBLIC KEY``
        blocks), or a directory whose ``*.pub`` and ``*.pem`` files are read (other files,
        e.g. private keys next to them, are skipped).

    Returns
    -------
    TrustRoster

    Raises
    ------
    ConfigurationError
        If nothing can be read, a key does not parse or is not ECDSA on P-256 or P-384, or no
        key is found.
    """
    p = Path(path)
    try:
        files = (
            sorted(f for f in p.iterdir() if f.suffix in (".pub", ".pem") and f.is_file())
            if p.is_dir()
            else [p]
        )
        points: list[bytes] = []
        for f in files:
            points += _public_points(f.read_bytes(), str(f))
    except ConfigurationError:
        raise
    except OSError as exc:
        raise ConfigurationError(
            f"{TRUSTED_KEYS_SETTING}: cannot read {path}: {type(exc).__name__}"
        ) from None
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigurationError(
            f"{TRUSTED_KEYS_SETTING}: {path} holds a line that is not an OpenSSH or PEM public key"
        ) from None
    if not points:
        raise ConfigurationError(f"{TRUSTED_KEYS_SETTING}: no public key found in {path}")
    return TrustRoster(points)
