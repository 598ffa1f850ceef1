"""Recovery: the survivor set, the weight rows asked of each survivor, their replies, and the
retry without convicted silos; where the silos sign their keys, the survivor views first
(:mod:`coded_fl.secagg.views`: every member of S signs S before any recovery request over it)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.messages import SERVER, RecoveryReply, RecoveryRequest, ViewReply, ViewRequest
from coded_fl.secagg.server.state import (
    AbortCode,
    MachineCore,
    RoundAborted,
    RoundState,
    ServerStage,
    survivor_weights,
)
from coded_fl.secagg.verify import comparison_pairs, weight_rows
from coded_fl.secagg.views import view_statement


class RecoveryPhase(MachineCore):
    """The recovery phase of :class:`~coded_fl.secagg.server.machine.ServerMachine`: its
    methods, on the state :class:`~coded_fl.secagg.server.state.MachineCore` declares.

    Attributes
    ----------
    views_needed : bool
        Whether recoveries go through signed survivor views (the silos sign their keys).
    views_complete : bool
        Whether every member of the set being signed has signed it.
    """

    def close_collection(self) -> list[RecoveryRequest] | list[ViewRequest] | RoundAborted:
        """Fix S = the silos whose upload arrived; ask each of them for its share sums (where
        the silos sign their keys, first for their signatures of S: :meth:`close_views`)."""
        self._require(ServerStage.COLLECTING)
        rnd = self._current()
        cfg = self.config
        survivors = tuple(sorted(rnd.uploads))
        if len(survivors) < cfg.min_uploads:
            return self._abort(
                f"only {len(survivors)} of {len(self.roster)} silos uploaded in time; the round "
                f"needs max(n-s, U) = {cfg.min_uploads} (stragglers tolerated: s={cfg.s})",
                code=AbortCode.TOO_FEW_UPLOADS,
            )
        self.stage = ServerStage.RECOVERING
        if rnd.aligned:  # the group masks cancel in every weight row: nothing to recover
            self._fix_survivors(rnd, survivors)
            return []
        if self.views_needed:
            return self._view_requests(rnd, survivors, survivors)
        return self._recovery_requests(rnd, survivors, survivors)

    # ------------------------------------------------------------------ survivor views
    @property
    def views_needed(self) -> bool:
        """True when the silos sign their keys: a silo with trusted keys then answers a
        recovery only over a survivor set every survivor signed."""
        return bool(self._credentials_of(sorted(self.roster)))

    def _view_requests(
        self, rnd: RoundState, survivors: tuple[int, ...], ask: Sequence[int]
    ) -> list[ViewRequest]:
        """Ask every member of ``survivors`` to sign it; ``ask``: whom the recovery requests
        go to once all have."""
        rnd.view_set, rnd.view_ask, rnd.views = survivors, tuple(ask), {}
        self.stage = ServerStage.VIEWING
        digest = self.config.digest
        return [ViewRequest(digest, rnd.number, SERVER, i, survivors=survivors) for i in survivors]

    def _on_view_reply(self, msg: ViewReply) -> None:
        rnd = self._current()
        if msg.round != rnd.number:
            raise RemoteProtocolError(
                f"view reply for round {msg.round} during round {rnd.number}", sender=msg.sender
            )
        if msg.sender not in rnd.view_set:
            raise RemoteProtocolError("view reply from a silo not asked", sender=msg.sender)
        if msg.sender in rnd.views:
            raise RemoteProtocolError("duplicate view reply", sender=msg.sender)
        identity = self.credentials.get(msg.sender, (b"", b""))[0]
        cfg = self.config
        statement = view_statement(
            digest=cfg.digest, run_id=cfg.run_bytes, round_=rnd.number, survivors=rnd.view_set
        )
        if not verify_signature(identity, statement, msg.signature):
            raise RemoteProtocolError(
                "its signature of the survivor set does not verify under the identity key it "
                "endorsed its key with",
                sender=msg.sender,
            )
        rnd.views[msg.sender] = msg.signature

    @property
    def views_complete(self) -> bool:
        """True once every member of the set being signed has signed it."""
        rnd = self._round
        return (
            rnd is not None
            and self.stage == ServerStage.VIEWING
            and len(rnd.views) == len(rnd.view_set)
        )

    def close_views(self) -> list[RecoveryRequest] | list[ViewRequest] | RoundAborted:
        """Close the view stage: with every signature in, the recovery requests over the set
        (each carrying all the signatures); else the signers are asked to sign the smaller
        set they form (a silo signs a subset of what it signed), or the round aborts when they
        are too few.

        Returns
        -------
        list[RecoveryRequest] | list[ViewRequest] | RoundAborted
            What to send next, or why the round ends here.
        """
        self._require(ServerStage.VIEWING)
        rnd = self._current()
        signers = tuple(i for i in rnd.view_set if i in rnd.views)
        if signers == rnd.view_set:
            self.stage = ServerStage.RECOVERING
            return self._recovery_requests(rnd, rnd.view_set, rnd.view_ask)
        missing = sorted(set(rnd.view_set) - set(signers))
        ask = [j for j in rnd.view_ask if j in rnd.views]
        cfg = self.config
        if len(signers) < cfg.min_uploads or len(ask) < cfg.U:
            return self._abort(
                f"silo(s) {missing} did not sign the survivor set of round {rnd.number} "
                f"(survivor views, where the silos sign their keys): {len(signers)} signed; a "
                f"recovery needs max(n-s, U) = {cfg.min_uploads} survivors, U = {cfg.U} of "
                "them yet to answer",
                code=AbortCode.VIEWS_UNSIGNED,
            )
        return self._view_requests(rnd, signers, ask)

    def _fix_survivors(self, rnd: RoundState, survivors: tuple[int, ...]) -> np.ndarray:
        """Fix S: its weight rows and (a group code) the comparisons they make; any sum of the
        uploads over an earlier S is dropped. Returns the weight rows."""
        cfg = self.config
        rnd.survivors, rnd.masked, rnd.compared = survivors, None, None
        rnd.weights = weight_rows(cfg, survivors, group_masked=rnd.aligned)
        rnd.pairs = comparison_pairs(cfg, survivors, group_masked=rnd.aligned)
        return rnd.weights

    def _recovery_requests(
        self, rnd: RoundState, survivors: tuple[int, ...], ask: Sequence[int]
    ) -> list[RecoveryRequest]:
        """Fix S = ``survivors`` (its weight rows) and ask the silos ``ask`` for their sums."""
        cfg = self.config
        rows = self._fix_survivors(rnd, survivors)
        weights = tuple(tuple(int(v) for v in row) for row in rows)
        keys = tuple(self.roster[i] for i in survivors)
        credentials = self._credentials_of(survivors)
        # the survivors' signatures of S (survivor views; empty where silos sign nothing)
        views = tuple(rnd.views[i] for i in survivors) if rnd.view_set == survivors else ()
        requests = []
        # per survivor, what it left for each recipient: built once, O(sum of shares + tags);
        # each request then reads one entry per survivor (the (n - s)^2 part, kept minimal)
        sealed = [dict(rnd.uploads[i].shares) for i in survivors]
        tokens_of = [
            {j: rnd.uploads[i].context + tag for j, tag in rnd.uploads[i].tags} for i in survivors
        ]
        for j in ask:
            boxes = tuple([box.get(j, b"") for box in sealed])
            tokens = tuple([tok.get(j, b"") for tok in tokens_of])
            requests.append(
                RecoveryRequest(
                    digest=cfg.digest,
                    round=rnd.number,
                    sender=SERVER,
                    recipient=j,
                    survivors=survivors,
                    weights=weights,
                    shares=boxes,
                    keys=keys,
                    tokens=tokens,
                    credentials=credentials,
                    views=views,
                )
            )
        return requests

    def _on_recovery_reply(self, msg: RecoveryReply) -> None:
        rnd = self._current()
        cfg = self.config
        if msg.round != rnd.number:
            raise RemoteProtocolError(
                f"recovery reply for round {msg.round} during round {rnd.number}", sender=msg.sender
            )
        if msg.sender not in rnd.survivors:
            raise RemoteProtocolError(
                "recovery reply from a silo that was not asked", sender=msg.sender
            )
        if msg.sender in rnd.replies or msg.sender in rnd.refused:
            raise RemoteProtocolError("duplicate recovery reply", sender=msg.sender)
        expect = (survivor_weights(rnd).shape[0], cfg.sharing.piece_length)
        if tuple(msg.rows.shape) != expect:
            raise RemoteProtocolError(
                f"recovery reply has shape {tuple(msg.rows.shape)}, expected {expect}",
                sender=msg.sender,
            )
        try:
            cfg.field.validate(msg.rows, name="recovery reply")
        except ValueError as exc:
            raise RemoteProtocolError(str(exc), sender=msg.sender) from None
        rnd.replies[msg.sender] = msg.rows

    @property
    def recovery_ready(self) -> bool:
        """True once U recovery replies are in: the round can be decoded."""
        rnd = self._round
        return rnd is not None and (rnd.aligned or len(rnd.replies) >= self.config.U)

    @property
    def recovery_complete(self) -> bool:
        """True once every survivor asked has answered the recovery request (replied or
        refused): replies beyond U are checked against each other in :meth:`finish`."""
        rnd = self._round
        return rnd is not None and (
            rnd.aligned or len(rnd.replies) + len(rnd.refused) >= len(rnd.survivors)
        )

    @property
    def recovery_stuck(self) -> bool:
        """True when waiting longer cannot help the recovery request under way: too many
        survivors refused it for U replies, and either a silo is convicted (see
        :meth:`retry_recovery`) or every survivor has answered."""
        rnd = self._round
        if rnd is None or self.stage != ServerStage.RECOVERING:
            return False
        if len(rnd.survivors) - len(rnd.refused) >= self.config.U:
            return False
        return bool(self.convicted) or len(rnd.replies) + len(rnd.refused) == len(rnd.survivors)

    def retry_recovery(self) -> list[RecoveryRequest] | list[ViewRequest] | None:
        """Drop the convicted silos from S and ask again, if the protocol allows it.

        The smaller S' must still have max(n - s, U) silos, and U silos of S' must not have
        answered yet (a silo answers one recovery request per round): those are asked, with
        the decoding vector of S'. Answering for S' after refusing S reveals nothing new: the
        weight rows are checked against the public code as always.

        Returns
        -------
        list[RecoveryRequest] | list[ViewRequest] | None
            The new requests (where the silos sign their keys, the view requests for S'
            first), or None when no silo is convicted or S' is too small (then :meth:`finish`
            aborts the round naming the convicted silos).
        """
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        convicted = self.convicted
        if not convicted:
            return None
        rest = tuple(i for i in rnd.survivors if i not in convicted)
        liars = set(self.liars)  # a proven false accuser is not asked again
        ask = [j for j in rest if j not in rnd.replies and j not in liars]
        if len(rest) < self.config.min_uploads or len(ask) < self.config.U:
            return None
        rnd.excluded = tuple(sorted({*rnd.excluded, *convicted}))
        self._bar_next = frozenset(rnd.excluded)
        rnd.replies, rnd.refused, rnd.accusations = {}, set(), {}
        rnd.disputes = {}  # the verdicts stay: the shares are the same, and so is the judgement
        if self.views_needed:  # S' is signed first, by all its members (a subset of S)
            return self._view_requests(rnd, rest, ask)
        return self._recovery_requests(rnd, rest, ask)
