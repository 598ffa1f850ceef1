"""Collection: a round's TrainRequests, the aligned masking's edge keys (deals, relays,
confirmations, late uploads), and the checks on each Upload."""

from __future__ import annotations

from collections.abc import Mapping

from coded_fl.crypto import SEAL_OVERHEAD
from coded_fl.errors import LocalProtocolError, RemoteProtocolError
from coded_fl.secagg.aligned import EDGE_KEY_BYTES, EDGE_TAG_BYTES, edge_silos, incident
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES
from coded_fl.secagg.evidence import DERIVED, SEALED, Entry, sealed_payload_bytes, share_statement
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.masking.aligned_wire import EdgeKeyRequest, upload_edges
from coded_fl.secagg.messages import SERVER, TrainRequest, Upload
from coded_fl.secagg.server.state import LATE_ROUNDS, MachineCore, RoundState, ServerStage


class CollectPhase(MachineCore):
    """The collection phase of :class:`~coded_fl.secagg.server.machine.ServerMachine`: its
    methods, on the state :class:`~coded_fl.secagg.server.state.MachineCore` declares."""

    def start_round(
        self, number: int, *, inputs: bytes | Mapping[int, bytes] = b""
    ) -> list[TrainRequest]:
        """Open round ``number``: one TrainRequest (with the roster) per roster silo.

        Parameters
        ----------
        number
            The round.
        inputs
            The digest of the training inputs the driver sends with the requests (the model,
            train spec and config record: ``clients.mod._model_digest``), one for every silo or
            one per silo; the silos bind their shares to it, and a disputed share is judged
            under the digest of the inputs its sender was sent. Empty where the driver sends
            none (the sans-IO harness: its silos upload with an empty digest too).

        Raises
        ------
        LocalProtocolError
            Outside stage READY, or if ``number`` does not follow the last round.
        """
        self._require(ServerStage.READY)
        if number <= self.last_round:
            raise LocalProtocolError(f"round {number} must follow round {self.last_round}")
        cfg = self.config
        roster = tuple(sorted(self.roster.items()))
        credentials = self._credentials_of([s for s, _ in roster])
        aligned = cfg.scheme.round_cancels(self)  # the round's masks cancel in the decode
        deal = self._deal_plan(number) if cfg.aligned else {}
        self._round = RoundState(number, barred=self._bar_next | self.excluded, aligned=aligned)
        self._round.deal = {s: frozenset(d) for s, d in deal.items()}
        self._round.inputs = {
            s: bytes(inputs if isinstance(inputs, (bytes, bytearray)) else inputs.get(s, b""))
            for s in self.roster
        }
        self._deals[number] = self._round.deal
        for old in sorted(self._deals)[:-LATE_ROUNDS]:
            del self._deals[old]
        self._bar_next = frozenset()
        self.last_round = number
        self.stage = ServerStage.COLLECTING
        return [
            TrainRequest(
                digest=cfg.digest,
                round=number,
                sender=SERVER,
                recipient=s,
                roster=roster,
                credentials=credentials,
                aligned=aligned,
                extension=self._edge_request(s, deal),
            )
            for s, _ in roster
        ]

    def _edge_request(
        self, silo: int, deal: dict[int, set[tuple[int, int, int]]]
    ) -> EdgeKeyRequest | None:
        """The edge keys relayed to ``silo`` (kept until it confirms them: a silo that missed
        them gets them again) and its deal instructions; None when there are neither."""
        edge_keys = tuple(
            (dealer, q, h, box)
            for (q, h), (dealer, box) in sorted(self._relay.get(silo, {}).items())
        )
        mine = tuple(sorted(deal.get(silo, ())))
        return EdgeKeyRequest(edge_keys=edge_keys, deal=mine) if edge_keys or mine else None

    def _edge_members(self, edge: tuple[int, int]) -> list[int]:
        return sorted(edge_silos(self.config.group_code.groups, edge) & self.roster.keys())

    def _edge_reference(self, edge: tuple[int, int]) -> tuple[int, bytes] | None:
        """The holder whose key of ``edge`` everyone should have (the smallest member that
        confirmed one) and its tag; None if no member holds a key yet."""
        for m in self._edge_members(edge):
            tag = self._edge_tags.get(m, {}).get(edge)
            if tag is not None:
                return m, tag
        return None

    @property
    def edges_ready(self) -> bool:
        """With ``masking="aligned"``: a round can use the group masks (one round trip).

        For every mask-graph edge, the silos that confirmed a key of it all confirmed the same
        one, and each of the edge's two groups has such a silo. A silo that has not confirmed
        (a crashed node, or one whose key is on its way) does not hold the round back: if it
        answers, it opens the keys relayed with its request first, or, lacking them, refuses
        the round (a straggler for it) until they reach it.
        """
        cfg = self.config
        if not cfg.aligned:
            return False
        groups = cfg.group_code.groups
        for edge in cfg.mask_edges:
            ref = self._edge_reference(edge)
            if ref is None:
                return False
            tags = {m: self._edge_tags.get(m, {}).get(edge) for m in self._edge_members(edge)}
            if any(t is not None and t != ref[1] for t in tags.values()):
                return False
            if not all(any(tags.get(m) == ref[1] for m in groups[q]) for q in edge):
                return False
        return True

    def _deal_plan(self, number: int) -> dict[int, set[tuple[int, int, int]]]:
        """Silo -> the (q, h, recipient) deals to ask of it: for each edge, its reference
        holder seals the key for every member that has not confirmed it and has no sealed key
        on its way. While nobody holds a key, the smallest member that has uploaded since its
        keys makes one (or, before anyone has, the members take turns by round: a crashed
        node never stalls an edge)."""
        plan: dict[int, set[tuple[int, int, int]]] = {}
        for edge in self.config.mask_edges:
            members = self._edge_members(edge)
            if len(members) < 2:
                continue
            ref = self._edge_reference(edge)
            if ref is None:
                alive = [m for m in members if m in self._edge_tags]
                dealer, tag = (alive[0] if alive else members[number % len(members)]), None
            else:
                dealer, tag = ref
            for m in members:
                if m == dealer or edge in self._relay.get(m, {}):  # a box is on its way
                    continue
                if tag is not None and self._edge_tags.get(m, {}).get(edge) == tag:
                    continue
                plan.setdefault(dealer, set()).add((edge[0], edge[1], m))
        return plan

    def _late_edges(self, msg: Upload) -> None:
        """Keep the edge-key confirmations and dealt keys of an upload that came after its
        round closed (a straggler still holds and deals keys); its vector is not used. An
        upload of a round not remembered, from outside the roster, or whose edge fields do not
        check is ignored here (the caller refuses it as late)."""
        asked = self._deals.get(msg.round)
        if not self.config.aligned or asked is None or msg.sender not in self.roster:
            return
        try:
            self._check_edge_fields(msg, asked)
        except RemoteProtocolError:
            return
        self._take_edge_fields(msg)

    def _check_edge_fields(
        self, msg: Upload, deal: dict[int, frozenset[tuple[int, int, int]]]
    ) -> None:
        """Check an upload's dealt boxes (only the deals its request asked for) and edge
        confirmations (edges at its group, tags of the right size); raises before any change."""
        cfg = self.config
        cfg.scheme.check_extension(msg, sender=msg.sender)
        if not cfg.aligned:
            return
        dealt, confirms = upload_edges(msg)
        asked = deal.get(msg.sender, frozenset())
        seen = set()
        for recipient, q, h, box in dealt:
            if (q, h, recipient) not in asked or (q, h, recipient) in seen:
                raise RemoteProtocolError(
                    f"dealt edge key {(q, h)} for silo {recipient} was not asked for",
                    sender=msg.sender,
                )
            seen.add((q, h, recipient))
            if len(box) != EDGE_KEY_BYTES + SEAL_OVERHEAD:
                raise RemoteProtocolError("a sealed edge key has the wrong size", sender=msg.sender)
        mine = {e for e, _ in incident(cfg.mask_edges, cfg.group_code.group_of(msg.sender))}
        edges = [(q, h) for q, h, _ in confirms]
        if len(set(edges)) != len(edges) or not set(edges) <= mine:
            raise RemoteProtocolError(
                f"edge confirmations must name distinct edges at its group, got {edges}",
                sender=msg.sender,
            )
        if any(len(t) != EDGE_TAG_BYTES for _, _, t in confirms):
            raise RemoteProtocolError(
                f"an edge confirmation is not {EDGE_TAG_BYTES} bytes", sender=msg.sender
            )

    def _take_edge_fields(self, msg: Upload) -> None:
        if not self.config.aligned:
            return
        dealt, confirms = upload_edges(msg)
        self._edge_tags[msg.sender] = {(q, h): bytes(t) for q, h, t in confirms}
        pending = self._relay.get(msg.sender, {})
        for edge in self._edge_tags[msg.sender]:  # confirmed: no need to relay it again
            pending.pop(edge, None)
        for recipient, q, h, box in dealt:
            self._relay.setdefault(recipient, {})[(q, h)] = (msg.sender, bytes(box))

    def _on_upload(self, msg: Upload) -> None:
        rnd = self._current()
        cfg = self.config
        if msg.round != rnd.number:
            raise RemoteProtocolError(
                f"upload for round {msg.round} during round {rnd.number}", sender=msg.sender
            )
        if msg.sender not in self.roster:
            raise RemoteProtocolError("upload from a silo outside the roster", sender=msg.sender)
        if msg.sender in rnd.uploads:
            raise RemoteProtocolError("duplicate upload in this round", sender=msg.sender)
        if msg.sender in self.excluded:
            raise RemoteProtocolError(
                "left out of the rest of the session: named an offender (its replies were off "
                "beyond the drift tolerance where the other members of its group agreed, or "
                "the evidence of an accusation showed it lied)",
                sender=msg.sender,
            )
        if msg.sender in rnd.barred:
            raise RemoteProtocolError(
                f"left out of round {rnd.number}: at least {self.accusers_needed} silos could not "
                f"open the mask shares it sealed for them in round {rnd.number - 1}",
                sender=msg.sender,
            )
        if msg.masked.numel() != cfg.vector_length:
            raise RemoteProtocolError(
                f"upload has {msg.masked.numel()} elements, expected {cfg.vector_length}",
                sender=msg.sender,
            )
        self._check_edge_fields(msg, rnd.deal)
        if rnd.aligned:
            if msg.shares or msg.tags or msg.context:
                raise RemoteProtocolError(
                    "a group-masked round's upload carries no shares, tags or context",
                    sender=msg.sender,
                )
        else:
            self._check_share_fields(msg)
        self._validate_masked(msg)
        self._take_edge_fields(msg)
        rnd.uploads[msg.sender] = msg

    def _check_share_fields(self, msg: Upload) -> None:
        """A secret-shared round's upload: one tag per silo of its derived set and one sealed
        share per roster silo outside it, in order, each of its fixed size."""
        cfg = self.config
        members = sorted(self.roster)
        derived = cfg.sharing.derived_set(msg.sender, members)
        if [r for r, _ in msg.tags] != list(derived):
            raise RemoteProtocolError(
                f"upload must carry one confirmation tag per silo of its derived set {derived}, "
                "in order",
                sender=msg.sender,
            )
        if [r for r, _ in msg.shares] != [j for j in members if j not in derived]:
            raise RemoteProtocolError(
                "upload must carry one sealed share per roster silo outside its derived set, "
                "in order",
                sender=msg.sender,
            )
        if len(msg.context) != CONTEXT_BYTES:
            raise RemoteProtocolError(
                f"the share context must be {CONTEXT_BYTES} bytes", sender=msg.sender
            )
        identity = self.credentials.get(msg.sender, (b"", b""))[0]
        box = sealed_payload_bytes(cfg.sharing.piece_length)
        entries = [(j, t, DERIVED, CONFIRM_BYTES) for j, t in msg.tags]
        entries += [(j, c, SEALED, box) for j, c in msg.shares]
        for j, raw, kind, size in entries:
            entry = Entry.parse(raw, payload_bytes=size, blame=msg.sender)
            if not identity:
                if entry.signature:
                    raise RemoteProtocolError(
                        "a share entry is signed, but the silo sent no identity with its key",
                        sender=msg.sender,
                    )
                continue
            statement = share_statement(
                digest=cfg.digest,
                run_id=cfg.run_bytes,
                round_=msg.round,
                sender=msg.sender,
                recipient=j,
                kind=kind,
                context=msg.context if kind == DERIVED else b"",
                ephemeral=entry.ephemeral,
                recipient_key=self.roster[j],
                payload=entry.payload,
            )
            if not verify_signature(identity, statement, entry.signature):
                raise RemoteProtocolError(
                    f"its entry for silo {j}'s share does not carry its valid signature",
                    sender=msg.sender,
                )

    def _validate_masked(self, msg: Upload) -> None:
        try:
            self.config.field.validate(msg.masked, name="masked upload")
        except ValueError as exc:
            raise RemoteProtocolError(str(exc), sender=msg.sender) from None

    @property
    def uploads_ready(self) -> bool:
        """True once max(n-s, U) uploads are in: the round can close without the rest."""
        rnd = self._round
        return rnd is not None and len(rnd.uploads) >= self.config.min_uploads

    @property
    def uploads_complete(self) -> bool:
        """True when waiting longer cannot help: the wanted extras are in, or every silo is."""
        rnd = self._round
        if rnd is None:
            return False
        want = min(
            self.config.min_uploads + self.config.extra_replies, len(set(self.roster) - rnd.barred)
        )
        return len(rnd.uploads) >= want
