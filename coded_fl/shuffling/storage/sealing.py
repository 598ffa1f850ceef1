"""One coded message of a shuffle (:class:`ShuffleMessage`), its sealing under the group key
(AES-256-GCM, or an integrity-only SHA-256 tag without one) and the header checks every session
makes before it takes a message."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.plan.planner import ShufflePlan

__all__ = ["ShuffleMessage"]

_DOMAIN = b"codedfl-shuffle-msg-v1"
_NONCE = 12
_TAG = 16


@dataclass(frozen=True)
class ShuffleMessage:
    """One coded message on the wire. ``body``: ciphertext + GCM tag, or payload + SHA-256 tag.

    Attributes
    ----------
    plan_id : bytes
        The plan's 16-byte id.
    epoch : int
        The shuffle's epoch.
    index : int
        The message's index in the plan.
    sender : int
        The silo that sends it, or :data:`~coded_fl.shuffling.plan.planner.CENTRAL`.
    nonce : bytes
        The 12-byte AES-GCM nonce; empty without a group key.
    body : bytes
        ``piece_size`` bytes of payload plus a 16-byte tag (GCM, or truncated SHA-256).
    """

    plan_id: bytes
    epoch: int
    index: int
    sender: int
    nonce: bytes
    body: bytes = field(repr=False)

    def header(self) -> bytes:
        """The associated data: everything but the body and nonce."""
        return _DOMAIN + self.plan_id + struct.pack(">qqq", self.epoch, self.index, self.sender)

    @property
    def wire_bytes(self) -> int:
        """Bytes on the wire, as :func:`~coded_fl.shuffling.transport.wire.encode_message` writes
        them: plan id, epoch, index and sender (8 bytes each), the nonce's length (1 byte), the
        nonce and the body."""
        return len(self.plan_id) + 24 + 1 + len(self.nonce) + len(self.body)


class _Sealer:
    """AES-256-GCM with the group key, or an integrity-only SHA-256 tag without one."""

    def __init__(self, key: bytes | None, entropy: Callable[[int], bytes]) -> None:
        if key is not None and (not isinstance(key, bytes) or len(key) != 32):
            raise InputError("group_key must be 32 bytes")
        self._aead = AESGCM(key) if key is not None else None
        self._entropy = entropy

    def __repr__(self) -> str:
        return f"_Sealer(encrypted={self._aead is not None})"

    def seal(
        self, plan: ShufflePlan, epoch: int, index: int, sender: int, payload: bytes
    ) -> ShuffleMessage:
        draft = ShuffleMessage(plan.plan_id, epoch, index, sender, b"", b"")
        if self._aead is None:
            tag = hashlib.sha256(draft.header() + payload).digest()[:_TAG]
            return ShuffleMessage(plan.plan_id, epoch, index, sender, b"", payload + tag)
        nonce = self._entropy(_NONCE)
        if len(nonce) != _NONCE:
            raise InputError("the entropy source must return the bytes asked for")
        body = self._aead.encrypt(nonce, payload, draft.header())
        return ShuffleMessage(plan.plan_id, epoch, index, sender, nonce, body)

    def open(self, msg: ShuffleMessage) -> bytes:
        if self._aead is None:
            payload, tag = msg.body[:-_TAG], msg.body[-_TAG:]
            if hashlib.sha256(msg.header() + payload).digest()[:_TAG] != tag:
                raise RemoteProtocolError(
                    f"message {msg.index} fails its integrity check (corrupted in transit)",
                    sender=msg.sender,
                )
            return payload
        try:
            return self._aead.decrypt(msg.nonce, msg.body, msg.header())
        except InvalidTag:
            raise RemoteProtocolError(
                f"message {msg.index} fails authentication (corrupted, replayed or re-routed)",
                sender=msg.sender,
            ) from None


def _check_header(plan: ShufflePlan, epoch: int, msg: ShuffleMessage) -> None:
    if not isinstance(msg, ShuffleMessage):
        raise RemoteProtocolError(f"expected a ShuffleMessage, got {type(msg).__name__}")
    if msg.plan_id != plan.plan_id or msg.epoch != epoch:
        raise RemoteProtocolError(
            f"message {msg.index} belongs to another shuffle (plan {msg.plan_id.hex()[:8]}, "
            f"epoch {msg.epoch}; this one is plan {plan.plan_id.hex()[:8]}, epoch {epoch})",
            sender=msg.sender,
        )
    if not 0 <= msg.index < plan.n_messages:
        raise RemoteProtocolError(f"no message {msg.index} in the plan", sender=msg.sender)
    expected = int(plan.msg_sender[msg.index])
    if msg.sender != expected:
        raise RemoteProtocolError(
            f"message {msg.index} is the plan's message of sender {expected}", sender=msg.sender
        )
