"""Accusations: a refused share's dispute, the accused's reveal, and the verdicts
(:mod:`coded_fl.secagg.evidence`)."""

from __future__ import annotations

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES
from coded_fl.secagg.evidence import (
    DERIVED,
    SEALED,
    Entry,
    accusation_statement,
    judge,
    sealed_payload_bytes,
)
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.messages import SERVER, Refusal, RefusalCode, Reveal, RevealRequest
from coded_fl.secagg.server.state import Dispute, MachineCore, RoundState, ServerStage, Verdict


class DisputePhase(MachineCore):
    """The accusation phase of :class:`~coded_fl.secagg.server.machine.ServerMachine`: its
    methods, on the state :class:`~coded_fl.secagg.server.state.MachineCore` declares."""

    def _on_refusal(self, msg: Refusal) -> None:
        rnd = self._current()
        if msg.round != rnd.number:
            raise RemoteProtocolError(
                f"refusal for round {msg.round} during round {rnd.number}", sender=msg.sender
            )
        if msg.sender not in rnd.survivors:
            raise RemoteProtocolError("refusal from a silo that was not asked", sender=msg.sender)
        if msg.sender in rnd.replies or msg.sender in rnd.refused:
            raise RemoteProtocolError("a second answer to the recovery request", sender=msg.sender)
        rnd.refused.add(msg.sender)
        accused = msg.accused
        if (
            msg.code == RefusalCode.ACCUSES
            and accused is not None
            and accused != msg.sender
            and accused in rnd.survivors
        ):
            rnd.accusations.setdefault(accused, set()).add(msg.sender)
            self._dispute(rnd, accused, msg.sender, msg.evidence)

    def _item(self, rnd: RoundState, accused: int, accuser: int) -> tuple[bool, bytes] | None:
        """What the server relayed to ``accuser`` for ``accused``'s share: (derived, item)."""
        upload = rnd.uploads.get(accused)
        if upload is None:
            return None
        box = dict(upload.shares).get(accuser)
        if box is not None:
            return False, bytes(box)
        tag = dict(upload.tags).get(accuser)
        return None if tag is None else (True, upload.context + tag)

    def _dispute(self, rnd: RoundState, accused: int, accuser: int, evidence: bytes) -> None:
        """Open a dispute for an accusation (once per pair and round). An accuser with an
        identity must sign it over the item the server relayed; an accusation that is not so
        signed is judged at once: its accuser lied (the server verified the identity)."""
        pair = (accused, accuser)
        if pair in rnd.disputes or pair in rnd.verdicts:
            return
        found = self._item(rnd, accused, accuser)
        if found is None:  # pragma: no cover - every survivor leaves an entry for every other
            return
        derived, item = found
        cfg = self.config
        identity = self.credentials.get(accuser, (b"", b""))[0]
        if identity and not verify_signature(
            identity,
            accusation_statement(
                digest=cfg.digest,
                run_id=cfg.run_bytes,
                round_=rnd.number,
                accuser=accuser,
                accused=accused,
                item=item,
            ),
            evidence,
        ):
            self._verdict(
                rnd,
                accused,
                accuser,
                liar=accuser,
                reason="its accusation does not carry its valid signature",
            )
            return
        upload = rnd.uploads[accused]
        rnd.disputes[pair] = Dispute(derived, bytes(upload.context), item, bytes(evidence))

    def reveal_requests(self) -> list[RevealRequest]:
        """One :class:`RevealRequest` per accusation not yet put to its accused silo: reveal
        the ephemeral scalar of the disputed share (and no other).

        Returns
        -------
        list[RevealRequest]
        """
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        cfg = self.config
        out = []
        for (accused, accuser), d in sorted(rnd.disputes.items()):
            if d.asked:
                continue
            d.asked = True
            out.append(
                RevealRequest(
                    digest=cfg.digest,
                    round=rnd.number,
                    sender=SERVER,
                    recipient=accused,
                    accuser=accuser,
                    derived=d.derived,
                    context=d.context,
                    item=d.item,
                    accuser_key=self.roster[accuser],
                    accuser_credential=self.credentials.get(accuser, (b"", b"")),
                    accusation=d.evidence,
                )
            )
        return out

    @property
    def disputes_settled(self) -> bool:
        """True when every accusation of the round under way has its verdict."""
        rnd = self._round
        return rnd is None or not rnd.disputes

    def _on_reveal(self, msg: Reveal) -> None:
        """Judge a dispute with the scalar its accused silo revealed (a reveal for no pending
        dispute, e.g. a replay, is refused and changes nothing)."""
        rnd = self._current()
        cfg = self.config
        if msg.round != rnd.number:
            raise RemoteProtocolError(
                f"reveal for round {msg.round} during round {rnd.number}", sender=msg.sender
            )
        pair = (msg.sender, msg.accuser)
        dispute = rnd.disputes.get(pair)
        if dispute is None or not dispute.asked:
            raise RemoteProtocolError(
                f"a reveal for its share to silo {msg.accuser}, which no pending accusation "
                "disputes (replayed, or never asked)",
                sender=msg.sender,
            )
        if len(msg.secret) != 32:
            raise RemoteProtocolError("a revealed scalar is 32 bytes", sender=msg.sender)
        kind = DERIVED if dispute.derived else SEALED
        item = dispute.item[CONTEXT_BYTES:] if dispute.derived else dispute.item
        size = CONFIRM_BYTES if dispute.derived else sealed_payload_bytes(cfg.sharing.piece_length)
        why = judge(
            msg.secret,
            Entry.parse(item, payload_bytes=size, blame=msg.sender),
            kind=kind,
            recipient_key=self.roster[msg.accuser],
            context=dispute.context,
            field=cfg.field,
            piece_length=cfg.sharing.piece_length,
            run_id=cfg.run_bytes,
            round_=rnd.number,
            sender=msg.sender,
            recipient=msg.accuser,
            inputs=rnd.inputs.get(msg.sender, b""),  # what it was sent: it bound its shares
        )
        if why is None:
            self._verdict(
                rnd,
                msg.sender,
                msg.accuser,
                liar=msg.accuser,
                reason=f"silo {msg.sender} revealed its share's key and the share "
                + ("confirms" if dispute.derived else "opens to m field elements"),
            )
        else:
            self._verdict(rnd, msg.sender, msg.accuser, liar=msg.sender, reason=why)

    def close_disputes(self) -> tuple[Verdict, ...]:
        """Judge every accusation still without evidence against its accused silo (it did not
        reveal), and return the round's verdicts so far.

        Returns
        -------
        tuple[Verdict, ...]
        """
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        for accused, accuser in sorted(rnd.disputes):
            self._verdict(
                rnd,
                accused,
                accuser,
                liar=accused,
                reason="it did not reveal the key of the disputed share",
            )
        return tuple(v for _, v in sorted(rnd.verdicts.items()))

    def _verdict(
        self, rnd: RoundState, accused: int, accuser: int, *, liar: int, reason: str
    ) -> None:
        """Record a verdict: its liar is an offender, left out of the session's later rounds."""
        rnd.disputes.pop((accused, accuser), None)
        rnd.verdicts[(accused, accuser)] = Verdict(rnd.number, accuser, accused, liar, reason)
        self.excluded = frozenset({*self.excluded, liar})
