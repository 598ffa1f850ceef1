"""A RevealRequest: the ephemeral scalar of one accused share, after the checks that it is
this silo's own."""

from __future__ import annotations

from coded_fl.crypto import check_public_key
from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.client.state import MAX_ROUND, ClientStage, MachineCore
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES
from coded_fl.secagg.evidence import (
    Entry,
    accusation_statement,
    ephemeral_secret,
    public_of,
    sealed_payload_bytes,
)
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.messages import SERVER, Reveal, RevealRequest


class RevealPhase(MachineCore):
    """The reveal phase of :class:`~coded_fl.secagg.client.machine.ClientMachine`: its
    methods, on the state :class:`~coded_fl.secagg.client.state.MachineCore` declares."""

    def on_reveal_request(self, msg: RevealRequest) -> Reveal:
        """Reveal the ephemeral scalar of the one share this silo left for ``msg.accuser``.

        Only that share's scalar: it opens that share and nothing else (the accuser holds the
        share already). Checked before anything is revealed: the accuser is another roster
        silo; with a trust roster its key is trusted and it signed the accusation (a silo
        with an identity reveals only for an accusation its accuser signed); the relayed item
        is this silo's entry for the accuser (its ephemeral key is the one this silo derives
        again from the context). Nothing changes in the machine.

        Parameters
        ----------
        msg
            The server's request to reveal the key of the share this silo left for msg.accuser.

        Raises
        ------
        RemoteProtocolError
            Blaming the server, for anything that does not check.
        """
        cfg = self._check_header(msg)
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        _, silo, keys = self._identity()
        if not 0 < msg.round < MAX_ROUND:
            raise RemoteProtocolError(
                f"a reveal request for round {msg.round}: rounds are in [1, 2**63)", sender=SERVER
            )
        accuser = msg.accuser
        if accuser == silo or not 0 <= accuser < cfg.n:
            raise RemoteProtocolError(
                f"a reveal request names accuser {accuser} (this is silo {silo})", sender=SERVER
            )
        check_public_key(msg.accuser_key, sender=SERVER)
        self._check_trust(cfg, ((accuser, msg.accuser_key),), (msg.accuser_credential,))
        identity = msg.accuser_credential[0]
        if self.policy.trusted is not None or identity:
            statement = accusation_statement(
                digest=cfg.digest,
                run_id=cfg.run_bytes,
                round_=msg.round,
                accuser=accuser,
                accused=silo,
                item=msg.item,
            )
            if not identity or not verify_signature(identity, statement, msg.accusation):
                raise RemoteProtocolError(
                    f"a reveal request without silo {accuser}'s signed accusation: this silo "
                    "reveals a share's key only when its recipient accuses",
                    sender=SERVER,
                )
        if len(msg.context) != CONTEXT_BYTES:
            raise RemoteProtocolError(
                "a reveal request's context has the wrong size", sender=SERVER
            )
        if msg.derived:
            if msg.item[:CONTEXT_BYTES] != msg.context:
                raise RemoteProtocolError(
                    "a reveal request's token holds another context", sender=SERVER
                )
            entry = Entry.parse(msg.item[CONTEXT_BYTES:], payload_bytes=CONFIRM_BYTES, blame=SERVER)
        else:
            payload = sealed_payload_bytes(cfg.sharing.piece_length)
            entry = Entry.parse(msg.item, payload_bytes=payload, blame=SERVER)
        e = ephemeral_secret(
            keys.private_bytes,
            run_id=cfg.run_bytes,
            round_=msg.round,
            sender=silo,
            recipient=accuser,
            context=msg.context,
        )
        if public_of(e) != entry.ephemeral:
            raise RemoteProtocolError(
                f"the disputed entry of round {msg.round} for silo {accuser} holds an ephemeral "
                "key this silo did not make for it: nothing is revealed",
                sender=SERVER,
            )
        return Reveal(
            digest=cfg.digest,
            round=msg.round,
            sender=silo,
            recipient=SERVER,
            accuser=accuser,
            secret=e,
        )
