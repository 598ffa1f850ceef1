"""What one run of :class:`strategies.CodedSecAgg` owns: its settings and its state.

``CodedSecAgg.start`` takes a :class:`RunSettings` snapshot of the wrapper's settings and makes
a fresh :class:`RunState`; the round driver (:mod:`strategies.driver`), the membership and key
renewal (:mod:`strategies.membership`) and the reply handling (:mod:`strategies.replies`) work
on them. Nothing of a run lives on the wrapper, so two ``start`` calls never mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flwr.serverapp.strategy import Strategy

from coded_fl.layout import UpdateLayout
from coded_fl.secagg import ProtocolConfig, ServerMachine
from coded_fl.secagg.messages import Upload
from coded_fl.secagg.replies import SiloNotes
from coded_fl.secagg.transport import Reply
from coded_fl.vocabulary import MAX_DELTA_SCALE, TrainSpec

from .report import RoundReport

__all__ = ["RunSettings", "RunState"]


@dataclass(frozen=True)
class RunSettings:
    """The wrapper's settings as one run uses them (taken when the run starts).

    Parameters
    ----------
    strategy
        The wrapped Flower strategy.
    spec
        What the silos read from the train replies (:class:`coded_fl.vocabulary.TrainSpec`).
    extra_wait
        How long to wait for the configuration's extra uploads beyond n - s.
    round_timeout, recovery_timeout, key_timeout, evaluate_timeout
        Stage deadlines in seconds.
    poll_interval
        Seconds between pulls that brought nothing.
    progress
        Called with every :class:`RoundReport`.
    adaptive_clip
        Raise the round's delta scale g after a round that clipped at ``clip_quorum``
        partitions, and rerun it; lower it after a round that would not have clipped at g / 4.
    clip_quorum
        Partitions that must report clipping before the range widens.
    max_delta_scale
        The largest g the adaptation reaches (``max_clip_range`` / c, a power of two).
    max_aborted_rounds
        Stop the run (:class:`coded_fl.errors.RunAbortedError`) after this many rounds in a row
        aborted; 0: never.
    """

    strategy: Strategy
    spec: TrainSpec
    extra_wait: float
    round_timeout: float
    recovery_timeout: float
    key_timeout: float
    evaluate_timeout: float
    poll_interval: float
    progress: Callable[[RoundReport], None]
    adaptive_clip: bool = True
    max_aborted_rounds: int = 3
    clip_quorum: int = 1
    max_delta_scale: float = MAX_DELTA_SCALE


@dataclass
class RunState:
    """Everything one run owns; made fresh by every ``CodedSecAgg.start``.

    Attributes
    ----------
    config, layout, run_id
        The public protocol configuration, the update-vector layout and the id the
        session's training seeds and rounding keys derive from (``config.seed_id``).
    machine
        The server's protocol state machine.
    node_of, silo_of
        Silo index <-> Flower node id (a silo moves when its node is replaced).
    limit
        ``start``'s timeout, which caps every stage deadline.
    reports
        One :class:`RoundReport` per round.
    late_train
        Round -> seconds at which late uploads (or late error replies) came.
    late_errors
        Round -> silo -> why a reply that came after its stage closed failed, until the
        round's report takes it (:attr:`RoundReport.errors`).
    key_exchanges
        (before round, silos asked) of every key exchange of the run.
    key_seconds
        Seconds the run's first key exchange took (the silos load their kernels while
        answering it).
    activated
        Node -> the SuperLink's ``last_activated_at`` when its key came.
    notes
        What the silos' refusals said (:class:`coded_fl.secagg.driver.SiloNotes`): silos that
        need keys (rekeyed before the next round), silos that refused the current round
        because of a setting, and silo -> the weight bound it asked for in the current round
        (also as :attr:`needs_keys`, :attr:`misconfigured`, :attr:`weight_refused`).
    weight_bound
        The sample-weight bound W the rounds use (the strategy's ``max_weight``, or the
        automatic one).
    round_offset
        Protocol rounds = Flower round + this: a round rerun with a raised weight bound or
        delta scale takes the next protocol round number (a silo never trains one protocol
        round twice).
    fit_started
        Flower round -> monotonic time its training started (the silent-silo rule reads it).
    silent
        Silos the server heard nothing from (no reply in time, late or an error) through the
        last two rounds: the next round does not wait for them beyond what it needs
        (:attr:`RoundReport.silent`).
    delta_scale
        The delta scale g the rounds use (:attr:`coded_fl.vocabulary.TrainSpec.delta_scale`;
        the effective clip range is g c).
    dp_releases
        With distributed DP: the noised protocol rounds the server has asked for (every
        attempt counts: each could give it a noised sum), which the account composes.
    """

    config: ProtocolConfig
    layout: UpdateLayout
    run_id: str
    machine: ServerMachine
    node_of: dict[int, int]
    limit: float
    silo_of: dict[int, int] = field(default_factory=dict)
    reports: list[RoundReport] = field(default_factory=list)
    late_train: dict[int, list[float]] = field(default_factory=dict)
    late_errors: dict[int, dict[int, str]] = field(default_factory=dict)
    key_exchanges: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    key_seconds: float = 0.0
    activated: dict[int, str] = field(default_factory=dict)
    notes: SiloNotes = field(default_factory=SiloNotes)
    weight_bound: float = 0.0
    metric_names: dict[int, tuple[str, ...] | None] = field(default_factory=dict)
    fit_started: dict[int, float] = field(default_factory=dict)
    silent: frozenset[int] = frozenset()
    round_offset: int = 0
    delta_scale: float = 1.0
    dp_releases: int = 0

    def __post_init__(self) -> None:
        self.silo_of = {node: silo for silo, node in self.node_of.items()}

    @property
    def needs_keys(self) -> set[int]:
        """Silos that refused with ``NEEDS_KEYS`` (:attr:`notes`)."""
        return self.notes.needs_keys

    @property
    def misconfigured(self) -> dict[int, str]:
        """Silo -> detail, for silos that refused the current round because of a setting."""
        return self.notes.misconfigured

    @property
    def weight_refused(self) -> dict[int, int]:
        """Silo -> the weight bound it asked for in the current round."""
        return self.notes.weight_refused

    def taken(self, reply: Reply) -> None:
        """A reply the machine took: an upload's metric names (names only, read by the Flower
        transport) label the round's decoded metric slots.

        Parameters
        ----------
        reply
            The reply, as :func:`strategies.replies.read_reply` read it.
        """
        if isinstance(reply.message, Upload):
            self.metric_names[reply.silo] = reply.meta

    def wait(self, seconds: float) -> float:
        """``seconds``, capped by the run's :attr:`limit`.

        Parameters
        ----------
        seconds
            A stage's wait.

        Returns
        -------
        float
        """
        return min(seconds, self.limit)

    def deadline(self, seconds: float) -> float:
        """The monotonic time ``seconds`` from now, capped by the run's :attr:`limit`.

        Parameters
        ----------
        seconds
            A stage's wait.

        Returns
        -------
        float
        """
        return time.monotonic() + self.wait(seconds)
