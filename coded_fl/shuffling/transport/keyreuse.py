"""Re-using the organisation's group key across shuffle epochs, where that is safe.

Agreeing a group key costs an epoch two of its five stages (the leader seals the key, the others
open it: :mod:`~coded_fl.shuffling.transport.groupkey`). Inside training a reshuffle comes every
few rounds with the same silos, and each stage is a round trip through Flower (in a deployment a
ClientApp process per member). So a member keeps the epoch's group key as a :class:`KeyCarry`
and, at the next epoch's hello, offers to continue from it; the relay skips both key stages when
every member of the new roster offered the same continuation for exactly that roster.

Construction. A member that holds the group key ``G`` of epoch ``e`` with roster members ``M``
derives, for a later epoch ``e' > e`` of the same run, the key

.. math:: G' = \\mathrm{HKDF\\text{-}SHA256}(G;\\ \\mathrm{salt} = (e', \\mathrm{run}),\\
          \\mathrm{info} = \\texttt{ratchet} \\,\\|\\, e \\,\\|\\, M)

(:func:`ratchet`: the derivation of the epoch's sub-keys,
:func:`~coded_fl.shuffling.transport.groupkey.derive_key`, with its own label), and sends
the relay, in its HelloReply, a 16-byte continuation id ``HMAC-SHA256(G', "resume")``
(:func:`resume_id`), the members ``M`` it holds a key for and its
manifest share already sealed under ``G'``. The relay compares ids only: it never holds ``G`` or
``G'``. It takes the continuation iff every member of the new roster offered the same id and
``M`` is exactly the roster's member set; it then sends every member a PlanRequest that carries
the roster, and each member checks the roster as at a key stage and that its members are ``M``
before it uses ``G'``. Otherwise the epoch agrees a fresh key, as before.

Why it is safe (who can read an epoch's messages):

- **Only the same members.** ``G'`` is computable by exactly the members of the roster ``G`` was
  agreed (or continued) for. A member refuses a continuation for a roster with any other member
  set, so a member that left the job (or missed the hello: it is then not in the roster), or a
  newcomer, forces a fresh agreement. A relay that claims a continuation for another roster is
  refused by every member (a denial of service, which it can cause anyway).
- **Forward secrecy across epochs.** ``G'`` is a one-way function of ``G``, and a member keeps
  only the newest key: its stored state at epoch e' opens neither epoch e's messages (which the
  relay may have kept) nor any earlier epoch's.
- **Bounded reuse.** A chain of continuations is at most :data:`KEY_REUSE_LIMIT` epochs long;
  then the members agree a fresh key from fresh X25519 keys, so a member's state leaked at one
  epoch reads at most that many later ones.
- **Same trust in the keys.** A key agreed without an organisation key (public keys passed
  unchecked through the relay) is never continued into an epoch run with one, and the converse.
- **Bound to run and epochs.** A continuation is for one run and a strictly later epoch: a
  replayed hello of an old epoch gets no continuation, and ids of two epochs are unlinkable.
- **Nothing new to the relay.** It learns which members offered the same continuation: that
  they shared the previous epoch's key, which it saw as that epoch's roster.

>>> c = KeyCarry(key=bytes(32), run_id="r", epoch=3, members=(0, 1, 2), uses=0, org=False)
>>> k = ratchet(c, epoch=5)
>>> len(k), k != c.key, resume_id(k) == resume_id(ratchet(c, epoch=5))
(32, True, True)
>>> c.offers(run_id="r", epoch=5, org=False), c.offers(run_id="r", epoch=3, org=False)
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from coded_fl.crypto import KEY_BYTES
from coded_fl.errors import InputError
from coded_fl.shuffling.transport.groupkey import derive_key

__all__ = ["KEY_REUSE_LIMIT", "RESUME_ID_BYTES", "KeyCarry", "ratchet", "resume_id"]

#: Longest chain of epochs one agreed group key is continued over (then a fresh agreement).
KEY_REUSE_LIMIT = 8
#: Bytes of the continuation id a member sends the relay.
RESUME_ID_BYTES = 16

_RESUME_INFO = b"codedfl-shuffle-resume-id-v1"


@dataclass(frozen=True)
class KeyCarry:
    """The group key a member keeps for the next epoch.

    Attributes
    ----------
    key
        The 32-byte group key of ``epoch``.
    run_id, epoch
        The run and epoch it is the key of.
    members
        The roster's members, sorted: the only member set it may be continued for.
    uses
        How many continuations led to it (0: agreed fresh).
    org
        Whether it was agreed (or continued) under an organisation key.
    """

    key: bytes
    run_id: str
    epoch: int
    members: tuple[int, ...]
    uses: int
    org: bool

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) != KEY_BYTES:
            raise InputError("a carried group key is 32 bytes")
        if list(self.members) != sorted(set(self.members)) or not self.members:
            raise InputError("a carried key's members are distinct, sorted and not empty")

    def __repr__(self) -> str:  # no key material
        return (
            f"KeyCarry(run_id={self.run_id!r}, epoch={self.epoch}, members={self.members}, "
            f"uses={self.uses})"
        )

    def offers(self, *, run_id: str, epoch: int, org: bool) -> bool:
        """Whether this key may be continued into ``epoch`` of ``run_id``.

        Parameters
        ----------
        run_id, epoch
            The new epoch: the same run, strictly later.
        org
            Whether the new epoch runs with an organisation key.

        Returns
        -------
        bool
            True iff same run, a later epoch, the same trust in keys and the chain is shorter
            than :data:`KEY_REUSE_LIMIT`.
        """
        return (
            run_id == self.run_id
            and epoch > self.epoch
            and org == self.org
            and self.uses + 1 < KEY_REUSE_LIMIT
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form (the key in hex: it stays in the member's own state).

        Returns
        -------
        dict
            JSON-ready fields; :meth:`from_json` reads them back.
        """
        return {
            "key": self.key.hex(),
            "run_id": self.run_id,
            "epoch": self.epoch,
            "members": list(self.members),
            "uses": self.uses,
            "org": self.org,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KeyCarry:
        """Read :meth:`to_json` back.

        Parameters
        ----------
        d
            What :meth:`to_json` returned.

        Returns
        -------
        KeyCarry
            The carried key.

        Raises
        ------
        InputError
            If ``d`` is damaged.
        """
        try:
            return cls(
                key=bytes.fromhex(d["key"]),
                run_id=str(d["run_id"]),
                epoch=int(d["epoch"]),
                members=tuple(int(m) for m in d["members"]),
                uses=int(d["uses"]),
                org=bool(d["org"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"carried group key is damaged: {exc}") from None


def ratchet(carry: KeyCarry, *, epoch: int) -> bytes:
    """The group key of a later ``epoch``, continued from ``carry`` (module docstring).

    Parameters
    ----------
    carry
        The key kept from an earlier epoch.
    epoch
        The new epoch (the caller checks :meth:`KeyCarry.offers`).

    Returns
    -------
    bytes
        The new 32-byte group key: a one-way function of the old one, bound to the run, both
        epochs and the member set.
    """
    # the epoch's sub-key derivation, with the old epoch and the members in the label
    members = ",".join(str(m) for m in carry.members)
    return derive_key(
        carry.key, f"ratchet/{carry.epoch}/{members}", run_id=carry.run_id, epoch=epoch
    )


def resume_id(key: bytes) -> bytes:
    """The continuation id of a continued key: equal ids, equal keys; nothing else about it.

    Parameters
    ----------
    key
        The continued group key (:func:`ratchet`).

    Returns
    -------
    bytes
        :data:`RESUME_ID_BYTES` bytes of HMAC-SHA256.
    """
    return hmac.new(key, _RESUME_INFO, hashlib.sha256).digest()[:RESUME_ID_BYTES]
