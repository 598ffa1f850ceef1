"""The server machine: its phases put together, its constructor, its one entry point for
messages, ``receive``, with the transition table, and its flow (:mod:`~coded_fl.secagg.server.
actions`): ``open_key_exchange`` / ``open_round``, then ``next_action`` says what the driver
does next, ``stop_waiting`` and ``compute`` move it on."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from coded_fl.errors import ConfigurationError, LocalProtocolError, RemoteProtocolError
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import (
    SERVER,
    KeyReply,
    Message,
    RecoveryReply,
    RecoveryRequest,
    Refusal,
    Reveal,
    Upload,
    ViewReply,
    ViewRequest,
)
from coded_fl.secagg.server.actions import (
    AFTER_WAIT,
    COMPUTE,
    Action,
    Await,
    Compute,
    Deadline,
    KeysDone,
    RoundDone,
    SendRequests,
    Stage,
)
from coded_fl.secagg.server.collect import CollectPhase
from coded_fl.secagg.server.decode import DecodePhase
from coded_fl.secagg.server.disputes import DisputePhase
from coded_fl.secagg.server.keys import KeysPhase
from coded_fl.secagg.server.recovery import RecoveryPhase
from coded_fl.secagg.server.state import (
    DRIFT_TOLERANCE,
    RoundAborted,
    RoundResult,
    RoundState,
    ServerStage,
)


class ServerMachine(KeysPhase, CollectPhase, RecoveryPhase, DisputePhase, DecodePhase):
    """Drives one run for ``config``; the roster maps silo index -> public key.

    Parameters
    ----------
    config
        The public protocol configuration of the run.
    max_erased_fraction
        The largest fraction of a round's coordinates that may be erased (replicas that
        disagree beyond correction), and (codes other than the repetition code) at which one
        silo's replies may be located as off; above it the round is aborted, naming the silos
        located as off.
    drift_tolerance
        With a group code (the repetition code): how far, as a fraction of the clip range per
        partition of the group, a replica may lie from its group's per-coordinate median and
        still count as agreeing (float drift between sites; ``docs/protocol.md``, "Replicas
        that disagree"). Beyond it the silo is located as off at that coordinate, overruled by
        its group's majority (or the coordinate erased without one), named in
        :attr:`RoundResult.offenders` and left out of every later round of the session.
        0 asks for bit-identical replicas.
    weight_coordinate
        The coordinate that carries each partition's weight :math:`\\rho_k c`
        (:attr:`coded_fl.layout.UpdateLayout.weight_index`), if any: voted with tolerance 0
        (the same integer in every honest replica), and its decoded sum scales the tolerance by
        the mean :math:`\\rho`, as the packed updates :math:`\\rho_k (\\theta_k - \\theta)`
        scale with it.
    """

    def __init__(
        self,
        config: ProtocolConfig,
        *,
        max_erased_fraction: float = 0.01,
        drift_tolerance: float = DRIFT_TOLERANCE,
        weight_coordinate: int | None = None,
    ) -> None:
        if not 0.0 <= max_erased_fraction < 1.0:
            raise ConfigurationError(
                f"max_erased_fraction must be in [0, 1), got {max_erased_fraction!r}"
            )
        if (
            isinstance(drift_tolerance, bool)
            or not isinstance(drift_tolerance, (int, float))
            or not 0.0 <= drift_tolerance <= 1.0
        ):
            raise ConfigurationError(
                f"drift_tolerance must be a number in [0, 1] (a fraction of the clip range), "
                f"got {drift_tolerance!r}"
            )
        self.config = config
        self.max_erased_fraction = max_erased_fraction
        self.drift_tolerance = float(drift_tolerance)
        if weight_coordinate is not None and not 0 <= weight_coordinate < config.vector_length:
            raise ConfigurationError(
                f"weight_coordinate={weight_coordinate} is outside the vector of "
                f"{config.vector_length}"
            )
        self.weight_coordinate = weight_coordinate
        # silos located as off beyond the drift tolerance: refused for the rest of the session
        self.excluded: frozenset[int] = frozenset()
        self.stage = ServerStage.INIT
        self.roster: dict[int, bytes] = {}
        self._pending_keys: dict[int, bytes] = {}
        # silo -> (identity key, endorsement) it sent with its key: relayed with every entry
        self.credentials: dict[int, tuple[bytes, bytes]] = {}
        self._pending_credentials: dict[int, tuple[bytes, bytes]] = {}
        self._asked: set[int] = set()
        self.last_round = 0
        self._round: RoundState | None = None
        self._bar_next: frozenset[int] = frozenset()  # convicted silos, barred next round
        # masking="aligned": the edge-key tags each silo last confirmed, and the sealed edge
        # keys relayed to their recipient with every TrainRequest until it confirms them
        self._edge_tags: dict[int, dict[tuple[int, int], bytes]] = {}
        self._relay: dict[int, dict[tuple[int, int], tuple[int, bytes]]] = {}
        # round -> silo -> the deals its TrainRequest asked for (the last few rounds: a late
        # upload's edge fields are checked against its own round's)
        self._deals: dict[int, dict[int, frozenset[tuple[int, int, int]]]] = {}
        self._table: dict[tuple[ServerStage, type[Message]], Callable[[Message], None]] = {
            (ServerStage.KEYS, KeyReply): self._on_key_reply,  # type: ignore[dict-item]
            (ServerStage.COLLECTING, Upload): self._on_upload,  # type: ignore[dict-item]
            (ServerStage.RECOVERING, RecoveryReply): self._on_recovery_reply,  # type: ignore[dict-item]
            (ServerStage.RECOVERING, Refusal): self._on_refusal,  # type: ignore[dict-item]
            (ServerStage.RECOVERING, Reveal): self._on_reveal,  # type: ignore[dict-item]
            (ServerStage.VIEWING, ViewReply): self._on_view_reply,  # type: ignore[dict-item]
        }
        # the flow (next_action): requests not yet handed out, work to do, the wait under way,
        # the outcome of the exchange or round; whether the recovery is a retry
        self._outbox: SendRequests | None = None
        self._work: str | None = None
        self._waiting: Stage | None = None
        self._outcome: KeysDone | RoundDone | RoundAborted | None = None
        self._retrying = False

    def __repr__(self) -> str:
        return (
            f"ServerMachine(stage={self.stage.value}, round={self.last_round}, "
            f"roster={len(self.roster)})"
        )

    def receive(self, msg: Message) -> None:
        """Take one message from a silo; refuse (and change nothing) if it is out of place.

        Parameters
        ----------
        msg
            A silo's message (key reply, upload, recovery reply, reveal or refusal).
        """
        cfg = self.config
        if msg.digest != cfg.digest:
            raise RemoteProtocolError(
                "message is for another configuration (digest mismatch): the silo runs other "
                "protocol settings or another run",
                sender=msg.sender,
            )
        if msg.recipient != SERVER:
            raise RemoteProtocolError("message is not addressed to the server", sender=msg.sender)
        if not 0 <= msg.sender < cfg.n:
            raise RemoteProtocolError(f"unknown sender {msg.sender}", sender=msg.sender)
        handler = self._table.get((self.stage, type(msg)))
        if isinstance(msg, Upload) and (handler is None or msg.round != self.last_round):
            self._late_edges(msg)  # a late upload still confirms and deals edge keys
        if handler is None:
            raise RemoteProtocolError(
                f"{type(msg).__name__} is not expected in stage {self.stage.value} "
                f"(round {self.last_round}): late, early or replayed",
                sender=msg.sender,
            )
        handler(msg)

    # ------------------------------------------------------------------ the flow
    def open_key_exchange(self, silos: Sequence[int] | None = None) -> None:
        """Start a key exchange (:meth:`start_key_exchange`); :meth:`next_action` then says
        what to do, until :class:`KeysDone`.

        Parameters
        ----------
        silos
            The silos to ask (default: all n).
        """
        requests = self.start_key_exchange(silos)
        self._expect(SendRequests(Stage.KEYS, tuple(requests), Deadline.KEYS))

    def open_round(self, number: int, *, inputs: bytes | Mapping[int, bytes] = b"") -> None:
        """Start round ``number`` (:meth:`start_round`); :meth:`next_action` then says what to
        do, until :class:`RoundDone` or :class:`RoundAborted`.

        Parameters
        ----------
        number
            The round (never reused in a session).
        inputs
            The digest of the training inputs (one for all, or one per silo).
        """
        requests = self.start_round(number, inputs=inputs)
        self._expect(SendRequests(Stage.TRAIN, tuple(requests), Deadline.ROUND))

    def next_action(self) -> Action:
        """What the driver does next: requests to send, work to do, replies to await, or the
        outcome (returned again until the next exchange or round opens).

        Returns
        -------
        Action

        Raises
        ------
        LocalProtocolError
            If no key exchange or round was opened.
        """
        if self._outbox is not None:
            out, self._outbox = self._outbox, None
            return out
        if self._work is not None:
            return Compute(self._work)
        if self._outcome is not None:
            return self._outcome
        stage = self._waiting
        if stage is None:
            raise LocalProtocolError("nothing under way: open a key exchange or a round first")
        return Await(stage, *self._wait_flags(stage))

    def stop_waiting(self) -> None:
        """End the wait under way (every reply in, or the driver's deadline passed): the
        machine closes the stage and says what follows (:data:`~coded_fl.secagg.server.
        actions.AFTER_WAIT`).

        Raises
        ------
        LocalProtocolError
            If no wait is under way, or requests or work are still pending.
        CodedFLError
            The key exchange's close, if too few silos sent keys.
        """
        stage = self._waiting
        if stage is None or self._outbox is not None or self._work is not None:
            raise LocalProtocolError("no wait under way: follow next_action()")
        self._waiting = None
        getattr(self, AFTER_WAIT[stage][1])()

    def compute(self) -> None:
        """Do the work the pending :class:`Compute` names.

        Raises
        ------
        LocalProtocolError
            If no work is pending.
        """
        if self._work is None or self._outbox is not None:
            raise LocalProtocolError("no work pending: follow next_action()")
        step, self._work = self._work, None
        getattr(self, COMPUTE[step])()

    def _expect(self, send: SendRequests, *, work: str | None = None) -> None:
        """Hand ``send`` out next, then ``work``, then await its stage's replies."""
        if send.stage is Stage.TRAIN or send.stage is Stage.KEYS:
            self._outcome, self._retrying = None, False
        self._outbox, self._work, self._waiting = send, work, send.stage

    def _wait_flags(self, stage: Stage) -> tuple[bool, bool]:
        """(ready, complete) of the wait for ``stage``'s replies (see :class:`Await`)."""
        if stage is Stage.KEYS:
            return False, self.keys_received >= len(self._asked)
        if stage is Stage.TRAIN:
            return self.uploads_ready, self.uploads_complete
        if stage is Stage.VIEW:
            return False, self.views_complete
        if stage is Stage.RECOVERY:
            return self.recovery_ready, self.recovery_complete or self.recovery_stuck
        return False, self.disputes_settled

    def _next_requests(
        self, requests: list[RecoveryRequest] | list[ViewRequest], *, renew: bool
    ) -> None:
        """Views to sign or recovery requests; ``renew``: their wait starts the recovery's
        deadline (else it goes on under the one running)."""
        viewing = bool(requests) and isinstance(requests[0], ViewRequest)
        send = SendRequests(
            Stage.VIEW if viewing else Stage.RECOVERY,
            tuple(requests),
            Deadline.RECOVERY if renew else Deadline.CONTINUE,
            retry=self._retrying,
        )
        self._expect(send, work=None if viewing else "server_sum")

    def _after_keys(self) -> None:
        self._outcome = KeysDone(self.close_key_exchange())

    def _after_collection(self) -> None:
        out = self.close_collection()
        if isinstance(out, RoundAborted):
            self._outcome = out
        elif not out:  # the masks cancel: decode at once
            self._work = "server_finish"
        else:  # the recovery's deadline starts here, views first where the silos sign keys
            self._next_requests(out, renew=True)

    def _after_views(self) -> None:
        out = self.close_views()
        if isinstance(out, RoundAborted):
            self._outcome = out
        else:  # a smaller set to sign goes on under the views' deadline; the recovery (not a
            # retry's) starts its own
            recovering = bool(out) and not isinstance(out[0], ViewRequest)
            self._next_requests(out, renew=recovering and not self._retrying)

    def _after_recovery(self) -> None:
        asks = self.reveal_requests()
        if asks:  # accusations: the evidence stage first
            self._expect(SendRequests(Stage.REVEAL, tuple(asks), Deadline.CONTINUE))
        else:
            self._settle()

    def _settle(self) -> None:
        """Judge the accusations left, then decode, or ask again without convicted silos."""
        self.close_disputes()
        again = None if self.recovery_ready else self.retry_recovery()
        if again is None:
            self._work = "server_finish"
        else:
            self._retrying = True
            self._next_requests(again, renew=False)

    def _finish_round(self) -> None:
        out = self.finish()
        self._outcome = RoundDone(out) if isinstance(out, RoundResult) else out
