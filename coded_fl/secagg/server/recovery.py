"""Recovery: the survivor set, the weight rows asked of each survivor, their replies, and the
retry without convicted silos."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.messages import SERVER, RecoveryReply, RecoveryRequest
from coded_fl.secagg.server.state import (
    MachineCore,
    RoundAborted,
    RoundState,
    ServerStage,
    survivor_weights,
)
from coded_fl.secagg.verify import comparison_pairs, weight_rows


class RecoveryPhase(MachineCore):
    """The recovery phase of :class:`~coded_fl.secagg.server.machine.ServerMachine`: its
    methods, on the state :class:`~coded_fl.secagg.server.state.MachineCore` declares."""

    def close_collection(self) -> list[RecoveryRequest] | RoundAborted:
        """Fix S = the silos whose upload arrived; ask each of them for its share sums."""
        self._require(ServerStage.COLLECTING)
        rnd = self._current()
        cfg = self.config
        survivors = tuple(sorted(rnd.uploads))
        if len(survivors) < cfg.min_uploads:
            return self._abort(
                f"only {len(survivors)} of {len(self.roster)} silos uploaded in time; the round "
                f"needs max(n-s, U) = {cfg.min_uploads} (stragglers tolerated: s={cfg.s})"
            )
        self.stage = ServerStage.RECOVERING
        if rnd.aligned:  # the group masks cancel in every weight row: nothing to recover
            self._fix_survivors(rnd, survivors)
            return []
        return self._recovery_requests(rnd, survivors, survivors)

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

    def retry_recovery(self) -> list[RecoveryRequest] | None:
        """Drop the convicted silos from S and ask again, if the protocol allows it.

        The smaller S' must still have max(n - s, U) silos, and U silos of S' must not have
        answered yet (a silo answers one recovery request per round): those are asked, with
        the decoding vector of S'. Answering for S' after refusing S reveals nothing new: the
        weight rows are checked against the public code as always.

        Returns
        -------
        list[RecoveryRequest] | None
            The new requests, or None when no silo is convicted or S' is too small (then
            :meth:`finish` aborts the round naming the convicted silos).
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
        return self._recovery_requests(rnd, rest, ask)
