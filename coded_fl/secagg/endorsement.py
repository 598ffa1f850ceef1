"""Identity keys and endorsements: a silo's ECDSA signing key and checking its signatures.

An :class:`Identity` (P-256 or P-384) endorses the silo's key-agreement key for one silo index
of one run and session (:meth:`Identity.endorse`) and signs other statements
(:meth:`Identity.sign`); anyone checks them with :func:`verify_endorsement` and
:func:`verify_signature`. The scheme, the trust roster and the node config:
:mod:`coded_fl.secagg.identity`.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from coded_fl.errors import ConfigurationError, RemoteProtocolError

__all__ = [
    "CREDENTIAL_SIZES",
    "DOMAIN",
    "IDENTITY_KEY_SETTING",
    "TRUSTED_KEYS_SETTING",
    "Identity",
    "check_credential_sizes",
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
