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

The signing key and the signature checks are in :mod:`coded_fl.secagg.endorsement`, the
roster in :mod:`coded_fl.secagg.trust` (both re-exported here); this module reads the keys the
node config names (:func:`load_identity`, :func:`load_trusted`).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from coded_fl.errors import ConfigurationError
from coded_fl.secagg.endorsement import (
    _CURVES,
    CREDENTIAL_SIZES,
    DOMAIN,
    IDENTITY_KEY_SETTING,
    TRUSTED_KEYS_SETTING,
    Identity,
    check_credential_sizes,
    verify_endorsement,
    verify_signature,
)
from coded_fl.secagg.trust import TrustRoster

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
