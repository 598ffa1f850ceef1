"""A RecoveryRequest: the weight rows checked against the public code, every share opened or
rederived and key-confirmed, the weighted sums returned, or an accusation."""

from __future__ import annotations

import numpy as np
import torch

from coded_fl.crypto import check_public_key
from coded_fl.errors import (
    KeyConfirmationError,
    LocalProtocolError,
    NeedsKeysError,
    RemoteProtocolError,
)
from coded_fl.prg import SEED_BYTES, MaskStream
from coded_fl.secagg.client.sealing import SealingCore
from coded_fl.secagg.client.state import NEEDS_KEYS, ClientStage
from coded_fl.secagg.client.views import check_views
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES, tags_match
from coded_fl.secagg.evidence import (
    DERIVED,
    SEALED,
    Entry,
    accusation_statement,
    open_share,
    sealed_payload_bytes,
)
from coded_fl.secagg.messages import SERVER, RecoveryReply, RecoveryRequest
from coded_fl.secagg.verify import check_weight_rows


class RecoveryPhase(SealingCore):
    """The recovery phase of :class:`~coded_fl.secagg.client.machine.ClientMachine`: its
    methods, on the state :class:`~coded_fl.secagg.client.state.MachineCore` declares."""

    def on_recovery_request(self, msg: RecoveryRequest) -> RecoveryReply:
        """Check the requested weights against the public code and return the share sums.

        Parameters
        ----------
        msg
            The server's recovery request: the survivors, the weights and the shares relayed for
            this silo.

        Returns
        -------
        RecoveryReply
            This silo's weighted share sums.
        """
        cfg = self._check_header(msg)
        # any keyed stage: the round's inputs digest, kept per uploaded round, is what counts
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        if msg.round < self.floor:
            raise RemoteProtocolError(
                f"RecoveryRequest for round {msg.round} replays an earlier round (current: "
                f"{self.floor})",
                sender=SERVER,
            )
        if self.recovered_round >= msg.round:
            raise RemoteProtocolError(
                f"a second RecoveryRequest for round {msg.round}: a silo answers once per round",
                sender=SERVER,
            )
        survivors = msg.survivors
        if len(msg.keys) != len(survivors):
            raise RemoteProtocolError("one public key per survivor is required", sender=SERVER)
        for i, key in zip(survivors, msg.keys, strict=True):
            # a key the silo already has must not change within a round; one it lacks (its
            # state is a stale copy from before the TrainRequest) is taken from the request:
            # a wrong key only makes that survivor's sealed share fail authentication
            check_public_key(key, sender=SERVER)
            if self.roster.get(i, key) != key and msg.round == self.round:
                raise RemoteProtocolError(
                    f"the recovery request changes silo {i}'s public key within the round",
                    sender=SERVER,
                )
        self._check_trust(cfg, tuple(zip(survivors, msg.keys, strict=True)), msg.credentials)
        rows = check_weight_rows(cfg, survivors, msg.weights)
        _, silo, _ = self._identity()
        # this silo's own digest of the round's inputs, never one the server relays: shares
        # made from other inputs then fail authentication (issue 29, attack 1)
        inputs = self.inputs.get(msg.round)
        if inputs is None:  # a restarted node, or state written back from before its upload
            raise NeedsKeysError(
                f"{NEEDS_KEYS}: RecoveryRequest for round {msg.round}, but this silo holds no "
                "record of uploading it (the inputs it trained on bind the shares, so it "
                "cannot check them): a restarted node, or its state is older than its upload",
                sender=SERVER,
            )
        shares = []
        tokens = msg.tokens or (b"",) * len(survivors)
        if len(tokens) != len(survivors):
            raise RemoteProtocolError("one share or token per survivor is required", sender=SERVER)
        identities = [c[0] for c in msg.credentials] or [b""] * len(survivors)
        if len(identities) != len(survivors):
            raise RemoteProtocolError("one credential per survivor is required", sender=SERVER)
        if self.policy.trusted is not None:  # survivor views: the set every survivor signed
            check_views(
                cfg, msg, silo=silo, signed=self.viewed.get(msg.round), identities=identities
            )
        for i, box, token, identity in zip(survivors, msg.shares, tokens, identities, strict=True):
            if bool(token) == bool(box):
                raise RemoteProtocolError(
                    f"silo {i}'s entry must be a sealed share or a derived-share token, not "
                    "both or neither",
                    sender=SERVER,
                )
            try:
                if token:
                    shares.append(self._rederive(cfg, msg.round, i, silo, token, identity, inputs))
                else:
                    shares.append(self._open(cfg, msg.round, i, box, identity, inputs))
            except RemoteProtocolError as exc:
                me = self.policy.identity
                if exc.sender == i and i != silo and me is not None:  # a signed accusation
                    exc.evidence = me.sign(
                        accusation_statement(
                            digest=cfg.digest,
                            run_id=cfg.run_bytes,
                            round_=msg.round,
                            accuser=silo,
                            accused=i,
                            item=token or box,
                        )
                    )
                raise
        agg = cfg.field.matmul(rows, shares, validate=False)  # each share checked above
        self.round = max(self.round, msg.round)
        self.recovered_round = msg.round
        self.floor = max(self.floor, msg.round)
        self.trained = tuple(r for r in self.trained if r > self.floor)
        self.stage = ClientStage.RECOVERED
        return RecoveryReply(
            digest=cfg.digest, round=msg.round, sender=silo, recipient=SERVER, rows=agg
        )

    def _open(
        self,
        cfg: ProtocolConfig,
        round_: int,
        sender: int,
        box: bytes,
        identity: bytes,
        inputs: bytes,
    ) -> torch.Tensor:
        """The share ``sender`` sealed for this silo, opened with its entry's ephemeral key and
        this silo's own inputs digest (in the key and the box's associated data)."""
        m = cfg.sharing.piece_length
        entry = Entry.parse(box, payload_bytes=sealed_payload_bytes(m), blame=SERVER)
        self._check_statement(cfg, round_, sender, SEALED, b"", entry, identity)
        secret = self._recipient_secret(cfg, sender, round_, entry, b"", SEALED, inputs)
        share = open_share(
            secret,
            entry,
            kind=SEALED,
            field=cfg.field,
            piece_length=m,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=sender,
            recipient=self._identity()[1],
            inputs=inputs,
        )
        if share is None:  # pragma: no cover - a sealed entry always opens to a share
            raise LocalProtocolError("no share")
        return share

    def _rederive(
        self,
        cfg: ProtocolConfig,
        round_: int,
        sender: int,
        silo: int,
        token: bytes,
        identity: bytes,
        inputs: bytes,
    ) -> torch.Tensor:
        """The share ``sender`` derived for this silo, after its key-confirmation tag checks."""
        if len(token) < CONTEXT_BYTES:
            raise RemoteProtocolError(
                f"a share token has {len(token)} bytes, fewer than its {CONTEXT_BYTES}-byte "
                "context",
                sender=SERVER,
            )
        context = token[:CONTEXT_BYTES]
        entry = Entry.parse(token[CONTEXT_BYTES:], payload_bytes=CONFIRM_BYTES, blame=SERVER)
        if sender != silo:
            self._check_statement(cfg, round_, sender, DERIVED, context, entry, identity)
        secret = self._recipient_secret(cfg, sender, round_, entry, context, DERIVED, inputs)
        if not tags_match(entry.payload, secret[SEED_BYTES:]):
            if sender == silo:  # our own share: our keys changed since the upload
                raise NeedsKeysError(
                    f"{NEEDS_KEYS}: this silo's own derived share of round {round_} does not "
                    "confirm: its keys changed since its upload (a restarted node?); rekey it",
                    sender=SERVER,
                )
            raise KeyConfirmationError(
                f"its derived mask share for silo {silo} in round {round_} fails key "
                f"confirmation: silo {sender} derived it with another key than silo {silo}'s "
                f"(a stale roster, or a silo that rekeyed after the round started), or from "
                f"other training inputs than silo {silo} was sent, or its tag is wrong; the "
                f"server asks silo {sender} to reveal the share's ephemeral key and judges",
                sender=sender,
            )
        out = np.empty(cfg.sharing.piece_length, dtype=np.uint32)
        MaskStream(secret[:SEED_BYTES], cfg.p).fill(out)
        return torch.from_numpy(out)
