"""The trust roster: the identity public keys a silo trusts, and its check of a peer's entry.

A silo with a :class:`TrustRoster` refuses every relayed key-agreement key that no trusted
identity endorsed for that silo index and session (:mod:`coded_fl.secagg.identity`).
"""

from __future__ import annotations

from collections.abc import Iterable

from coded_fl.errors import UntrustedKeyError
from coded_fl.secagg.endorsement import (
    IDENTITY_KEY_SETTING,
    TRUSTED_KEYS_SETTING,
    verify_endorsement,
)

__all__ = ["TrustRoster"]


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
