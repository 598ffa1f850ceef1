"""A share's keys and entry: what the upload seals and the recovery opens."""

from __future__ import annotations

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.secagg.client.state import MachineCore
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.evidence import (
    DERIVED,
    Entry,
    ephemeral_secret,
    exchange,
    public_of,
    share_secret,
    share_statement,
)
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.messages import SERVER


class SealingCore(MachineCore):
    """The share keys the upload and the recovery phases both use: a share's sender and
    recipient secrets, its entry in the upload, and the signed statements about it."""

    def _sender_secret(
        self,
        cfg: ProtocolConfig,
        recipient: int,
        round_: int,
        context: bytes,
        kind: bytes,
        roster: dict[int, bytes],
        inputs: bytes,
    ) -> tuple[bytes, bytes]:
        """The ephemeral public key and the key material of the share this silo leaves for
        ``recipient`` in the upload of ``context`` (:mod:`coded_fl.secagg.evidence`);
        ``inputs``: this silo's own digest of the round's training inputs."""
        _, silo, keys = self._identity()
        pub = roster.get(recipient)
        if pub is None:
            raise RemoteProtocolError(f"silo {recipient} is not in the roster", sender=SERVER)
        e = ephemeral_secret(
            keys.private_bytes,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=silo,
            recipient=recipient,
            context=context,
        )
        ephemeral = public_of(e)
        secret = share_secret(
            exchange(e, pub),
            run_id=cfg.run_bytes,
            round_=round_,
            sender=silo,
            recipient=recipient,
            ephemeral=ephemeral,
            recipient_key=pub,
            context=context if kind == DERIVED else b"",
            kind=kind,
            inputs=inputs,
        )
        return ephemeral, secret

    def _recipient_secret(
        self,
        cfg: ProtocolConfig,
        sender: int,
        round_: int,
        entry: Entry,
        context: bytes,
        kind: bytes,
        inputs: bytes,
    ) -> bytes:
        """The key material of the share ``sender`` left for this silo, from its entry, with
        ``inputs``: this silo's *own* digest of the round's training inputs (never one the
        server relays)."""
        _, silo, keys = self._identity()
        try:
            dh = exchange(keys.private_bytes, entry.ephemeral)
        except InputError:  # a small-order point: no scalar's public key, so the sender's lie
            raise RemoteProtocolError(
                f"its share for silo {silo} holds an unusable ephemeral key", sender=sender
            ) from None
        return share_secret(
            dh,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=sender,
            recipient=silo,
            ephemeral=entry.ephemeral,
            recipient_key=keys.public_bytes,
            context=context if kind == DERIVED else b"",
            kind=kind,
            inputs=inputs,
        )

    def _entry(
        self,
        cfg: ProtocolConfig,
        recipient: int,
        round_: int,
        kind: bytes,
        context: bytes,
        ephemeral: bytes,
        payload: bytes,
    ) -> bytes:
        """An upload's entry for one share, signed when this silo holds an identity."""
        me, silo = self.policy.identity, self.silo
        signature = b""
        if me is not None and silo is not None:
            signature = me.sign(
                share_statement(
                    digest=cfg.digest,
                    run_id=cfg.run_bytes,
                    round_=round_,
                    sender=silo,
                    recipient=recipient,
                    kind=kind,
                    context=context if kind == DERIVED else b"",
                    ephemeral=ephemeral,
                    recipient_key=self.roster[recipient],
                    payload=payload,
                )
            )
        return Entry(ephemeral, payload, signature).to_bytes()

    def _check_statement(
        self,
        cfg: ProtocolConfig,
        round_: int,
        sender: int,
        kind: bytes,
        context: bytes,
        entry: Entry,
        identity: bytes,
    ) -> None:
        """With the sender's identity relayed (and checked against the trust roster, if any),
        its signature of the entry must verify: the server checked it on arrival, so an entry
        that fails was altered in relay (blamed on the server, never an accusation)."""
        if not identity:
            return
        _, silo, keys = self._identity()
        statement = share_statement(
            digest=cfg.digest,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=sender,
            recipient=silo,
            kind=kind,
            context=context if kind == DERIVED else b"",
            ephemeral=entry.ephemeral,
            recipient_key=keys.public_bytes,
            payload=entry.payload,
        )
        if not verify_signature(identity, statement, entry.signature):
            raise RemoteProtocolError(
                f"the relayed entry of silo {sender}'s share does not carry its valid signature "
                "(altered in relay)",
                sender=SERVER,
            )
