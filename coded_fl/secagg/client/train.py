"""A TrainRequest: the round's checks (floor, replays, weight bound, rows), the edge keys relayed
to this silo, and the :class:`~coded_fl.secagg.client.state.TrainTask` it returns."""

from __future__ import annotations

import dataclasses

from coded_fl.crypto import check_public_key
from coded_fl.errors import NeedsKeysError, RemoteProtocolError
from coded_fl.quantize import RoundingKey
from coded_fl.secagg.aligned import edge_silos, incident, open_edge_key
from coded_fl.secagg.client.state import (
    MAX_ROUND,
    MAX_UNVERIFIED_ROUNDS,
    ClientStage,
    MachineCore,
    TrainTask,
)
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.derive import request_digest
from coded_fl.secagg.masking.aligned_wire import request_edges
from coded_fl.secagg.messages import SERVER, TrainRequest


class TrainPhase(MachineCore):
    """The training request phase of :class:`~coded_fl.secagg.client.machine.ClientMachine`: its
    methods, on the state :class:`~coded_fl.secagg.client.state.MachineCore` declares."""

    def on_train_request(self, msg: TrainRequest) -> TrainTask:
        """Accept round ``msg.round``; return what to train.

        A silo trains a round at most once: it refuses a round it trained and any round at or
        below its *floor*, the last round whose recovery it answered (a recovery verifies a
        round: the shares of every survivor authenticate for it, so the other silos trained
        it too). A round it cannot verify yet (e.g. round 99 from a buggy server, or a replay
        from elsewhere) does not move the floor: earlier real rounds keep working. At most
        :data:`MAX_UNVERIFIED_ROUNDS` such rounds are remembered; beyond that the oldest is
        forgotten and the floor rises to it, so no round is ever trained twice.

        Parameters
        ----------
        msg
            The server's train request for one protocol round.
        """
        cfg = self._check_header(msg)
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        if msg.round <= self.floor or msg.round in self.trained:
            raise RemoteProtocolError(
                f"TrainRequest for round {msg.round} replays a round this silo trained, or is "
                f"not above round {self.floor} (its last verified or forgotten round)",
                sender=SERVER,
            )
        if msg.round >= MAX_ROUND:
            raise RemoteProtocolError(
                f"TrainRequest for round {msg.round}: rounds must be below 2**63", sender=SERVER
            )
        roster = dict(msg.roster)
        if len(roster) != len(msg.roster) or not all(0 <= s < cfg.n for s in roster):
            raise RemoteProtocolError("roster has duplicate or unknown silo ids", sender=SERVER)
        for peer, key in roster.items():  # every key now, not after training
            try:
                check_public_key(key, sender=SERVER)
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(
                    f"the roster's key of silo {peer} is unusable: {exc}", sender=SERVER
                ) from None
        _, silo, keys = self._identity()
        if roster.get(silo) != keys.public_bytes:
            raise NeedsKeysError(
                "roster does not hold this silo's current public key (rekey needed)", sender=SERVER
            )
        self._check_trust(cfg, msg.roster, msg.credentials)
        if len(roster) < cfg.min_uploads:
            raise RemoteProtocolError(
                f"roster has {len(roster)} silos, fewer than the {cfg.min_uploads} a round needs",
                sender=SERVER,
            )
        edge_keys, deal = self._edge_requests(cfg, silo, msg, roster)
        if msg.aligned and cfg.aligned:
            missing = [
                e
                for e, _ in incident(cfg.mask_edges, cfg.group_code.group_of(silo))
                if e not in edge_keys
            ]
            if missing:  # a straggler this round; the server relays its keys until confirmed
                raise RemoteProtocolError(
                    f"a group-masked round, but this silo lacks the keys of mask-graph edge(s) "
                    f"{missing}: relay them with the request (they are being dealt)",
                    sender=SERVER,
                )
        task = dataclasses.replace(
            self._task_for(msg.round, request_digest(cfg.digest, msg.round, msg.roster)),
            aligned=msg.aligned,
            deal=deal,
        )
        trained = sorted({*self.trained, msg.round})
        if len(trained) > MAX_UNVERIFIED_ROUNDS:  # forget the oldest: refuse up to it from now
            self.floor = max(self.floor, trained.pop(0))
        self.trained = tuple(trained)
        self.roster = roster
        self.edge_keys = edge_keys
        self.round = msg.round
        self.stage = ClientStage.TRAINING
        self._task = task
        return task

    def check_weight_bound(self, max_weight: float, *, auto: bool) -> None:
        """Refuse a weight bound that would tell the server more than the power of two of this
        silo's partition weights: a fixed bound (``auto`` False, the user's ``max_weight``)
        that differs from the first one of the run. (An automatic bound is a power of two,
        which :meth:`coded_fl.vocabulary.TrainSpec.from_dict` checks.) Without this, a server
        could ask round after round with another bound and, from the silo's refusals (a
        partition above the bound), bisect its ``num-examples``. Call it before the request
        changes anything; the first fixed bound is remembered by :meth:`on_train_request`'s
        caller through :meth:`pin_weight_bound`.

        Parameters
        ----------
        max_weight
            The round's weight bound W.
        auto
            Whether it is the server's automatic bound.

        Raises
        ------
        RemoteProtocolError
            A fixed bound other than the run's first (blamed on the server).
        """
        if not auto and self.fixed_weight and max_weight != self.fixed_weight:
            raise RemoteProtocolError(
                f"max-weight {max_weight:g} differs from this run's fixed weight bound "
                f"{self.fixed_weight:g}: a fixed bound does not change within a run",
                sender=SERVER,
            )

    def pin_weight_bound(self, max_weight: float, *, auto: bool) -> None:
        """Remember the run's fixed weight bound (the first one a request named).

        Parameters
        ----------
        max_weight, auto
            As for :meth:`check_weight_bound`.
        """
        if not auto and not self.fixed_weight:
            self.fixed_weight = float(max_weight)

    def _edge_requests(
        self, cfg: ProtocolConfig, silo: int, msg: TrainRequest, roster: dict[int, bytes]
    ) -> tuple[dict[tuple[int, int], bytes], tuple[tuple[int, int, int], ...]]:
        """The edge keys this silo holds once ``msg``'s relayed keys are opened, and its deal
        instructions, after checking both: an edge of the mask graph at this silo's group, a
        dealer and a recipient that are members of the edge's two groups and in the roster.
        A server cannot have a key sealed to a silo outside the edge (that silo could then
        unmask a group). Nothing changes here; the caller commits."""
        cfg.scheme.check_request(msg)
        if not cfg.aligned:
            return self.edge_keys, ()
        groups = cfg.group_code.groups
        edges = set(cfg.mask_edges)

        def members(e: tuple[int, int], who: int, what: str) -> None:
            if e not in edges:
                raise RemoteProtocolError(f"{what}: {e} is not a mask-graph edge", sender=SERVER)
            inside = edge_silos(groups, e)
            if silo not in inside or who not in inside or who == silo:
                raise RemoteProtocolError(
                    f"{what}: edge {e} joins silos {sorted(inside)}; silo {who} and this silo "
                    f"{silo} must be two of them",
                    sender=SERVER,
                )
            if who not in roster:
                raise RemoteProtocolError(f"{what}: silo {who} is not in the roster", sender=SERVER)

        relayed, deal = request_edges(msg)
        held = dict(self.edge_keys)
        for dealer, q, h, box in relayed:
            members((q, h), dealer, "a relayed edge key")
            held[(q, h)] = open_edge_key(
                self._key_for(dealer, roster),
                box,
                run_id=cfg.run_bytes,
                dealer=dealer,
                recipient=silo,
                edge=(q, h),
            )
        for q, h, recipient in deal:
            members((q, h), recipient, "a deal instruction")
        return held, tuple(deal)

    def _task_for(self, round_: int, request: bytes) -> TrainTask:
        """What this silo trains in ``round_``: its partitions, code row and rounding keys."""
        cfg, silo, _ = self._identity()
        code = cfg.gradient_code
        support = tuple(int(k) for k in code.support(silo))
        return TrainTask(
            round=round_,
            silo=silo,
            partitions=support,
            coefficients=tuple(int(c) for c in code.coefficients(silo)),
            rounding_keys=tuple(RoundingKey.for_partition(cfg.seed_id, round_, k) for k in support),
            request=request,
        )
