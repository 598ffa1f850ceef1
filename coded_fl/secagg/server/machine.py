"""The server machine: its phases put together, its constructor and its one entry point,
``receive``, with the transition table."""

from __future__ import annotations

from collections.abc import Callable

from coded_fl.errors import ConfigurationError, RemoteProtocolError
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import (
    SERVER,
    KeyReply,
    Message,
    RecoveryReply,
    Refusal,
    Reveal,
    Upload,
    ViewReply,
)
from coded_fl.secagg.server.collect import CollectPhase
from coded_fl.secagg.server.decode import DecodePhase
from coded_fl.secagg.server.disputes import DisputePhase
from coded_fl.secagg.server.keys import KeysPhase
from coded_fl.secagg.server.recovery import RecoveryPhase
from coded_fl.secagg.server.state import DRIFT_TOLERANCE, RoundState, ServerStage


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
