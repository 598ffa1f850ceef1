"""The server machine's state: stages, the round's record, results, and the core every phase
shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch

from coded_fl.errors import LocalProtocolError
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import Upload

#: Rounds whose deal plans are remembered for late uploads.
LATE_ROUNDS = 8
#: Default drift tolerance: 1/16 of the clip range per partition. Honest replicas measured at
#: most 0.040 of it apart (``simulations.hetero.measure``, ``docs/bench/extra/
#: hetero_measure.json``: the 4x wider CNN after 5 epochs, AVX2 vs AVX-512), the main job's CNN
#: at most 3.1e-4 after 5 epochs.
DRIFT_TOLERANCE = 0.0625


class ServerStage(str, Enum):
    """The server's stage within keys and rounds."""

    INIT = "init"
    KEYS = "keys"
    READY = "ready"
    COLLECTING = "collecting"
    VIEWING = "viewing"
    RECOVERING = "recovering"


@dataclass(frozen=True)
class Verdict:
    """The server's judgement of one accusation (:mod:`coded_fl.secagg.evidence`).

    ``liar`` is the accuser when the disputed share opened (or confirmed) under the key its
    sender revealed, and the accused when it did not, when the accused revealed a scalar that
    is not its ephemeral key's, or revealed nothing. ``reason`` says which (no key material).
    """

    round: int
    accuser: int
    accused: int
    liar: int
    reason: str


@dataclass
class Dispute:
    """An accusation waiting for its evidence: what the server relayed to the accuser."""

    derived: bool
    context: bytes
    item: bytes
    evidence: bytes
    asked: bool = False


@dataclass(frozen=True, eq=False)
class RoundResult:
    """A completed round: the sum over all K partitions of the quantized updates, each
    coordinate the sum of some replica's values per partition, or erased (0) where replicas
    disagreed beyond what the parity checks could correct (see :mod:`coded_fl.codes.resolve`)."""

    round: int
    total: torch.Tensor  # float64, sum_k q(g_k) / scale
    aggregate: torch.Tensor  # the same in GF(p)
    survivors: tuple[int, ...]
    responders: tuple[int, ...]
    stragglers: tuple[int, ...]
    checks: int  # parity checks applied (extra uploads beyond n - s)
    disagreeing: int = 0  # coordinates whose parity checks failed (replicas differ there)
    corrected: int = 0  # of those, the ones whose error was located and removed
    erased: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    located: dict[int, int] = field(default_factory=dict)  # silo -> coordinates it was off
    excluded: tuple[int, ...] = ()  # uploaded, then dropped from S: convicted by accusations
    within_tolerance: int = 0  # disagreeing coordinates where replicas drift within tolerance
    # located as deviating: off beyond the tolerance where their group agreed, a recovery
    # reply inconsistent with the others, or a lie the evidence of an accusation proved (an
    # accuser or an accused: ``verdicts``); left out of the session's later rounds
    offenders: tuple[int, ...] = ()
    unresolved: dict[int, int] = field(default_factory=dict)  # silo -> erased where it was off
    #: accusations judged in this round; their liars are in ``offenders``
    verdicts: tuple[Verdict, ...] = ()


class AbortCode(str, Enum):
    """Why a round produced nothing, as a value a program can branch on (the reason's text
    says the same for a person, with the figures). The value is the stored form.

    The protocol's (:class:`RoundAborted`): ``TOO_FEW_UPLOADS`` (fewer than max(n-s, U)
    uploads in time), ``VIEWS_UNSIGNED`` (too few survivors signed the survivor set),
    ``CONVICTED`` (silos proven to have sent bad shares leave too few to unmask),
    ``TOO_FEW_RECOVERY_REPLIES`` (fewer than U recovery replies), ``RECOVERY_INCONSISTENT``
    (recovery replies that are no codeword), ``REPLICAS_DISAGREE`` (replicas of a partition
    disagree beyond the drift tolerance or the parity checks, at more coordinates than
    ``max_erased_fraction``), ``BROKEN_SILO`` (a silo off at more coordinates than that),
    ``GIVEN_UP`` (the driver gave the round up: a deadline).

    The adapter's (``RoundReport.abort_code``): ``NO_TRAINING`` (the wrapped strategy
    configured none), ``UNPACK_FAILED`` (the decoded sum is not a valid layout),
    ``CLIP_WIDENED`` (too many partitions clipped: the round is rerun with a wider range),
    ``INNER_STRATEGY`` (the wrapped strategy's aggregate returned no arrays).
    """

    TOO_FEW_UPLOADS = "too-few-uploads"
    VIEWS_UNSIGNED = "views-unsigned"
    CONVICTED = "convicted"
    TOO_FEW_RECOVERY_REPLIES = "too-few-recovery-replies"
    RECOVERY_INCONSISTENT = "recovery-inconsistent"
    REPLICAS_DISAGREE = "replicas-disagree"
    BROKEN_SILO = "broken-silo"
    GIVEN_UP = "given-up"
    NO_TRAINING = "no-training"
    UNPACK_FAILED = "unpack-failed"
    CLIP_WIDENED = "clip-widened"
    INNER_STRATEGY = "inner-strategy"


@dataclass(frozen=True)
class RoundAborted:
    """A round that produced nothing; ``code`` says why as a value (:class:`AbortCode`),
    ``reason`` in words, ``suspects`` names silos if known (the liars of the round's judged
    accusations among them)."""

    round: int
    reason: str
    suspects: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    code: AbortCode = AbortCode.GIVEN_UP


@dataclass
class RoundState:
    number: int
    uploads: dict[int, Upload] = field(default_factory=dict)
    survivors: tuple[int, ...] = ()
    weights: np.ndarray | None = None
    replies: dict[int, torch.Tensor] = field(default_factory=dict)
    # accused silo -> the survivors that accused it (ACCUSES refusals of this round)
    accusations: dict[int, set[int]] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)  # survivors that refused the request
    excluded: tuple[int, ...] = ()  # convicted silos dropped from S in this round
    barred: frozenset[int] = frozenset()  # convicted in the previous round: upload refused
    masked: torch.Tensor | None = None  # sum_uploads(): the weighted masked sums over S
    # a group code's comparisons in the weight rows after row 0 (None: another code's checks)
    pairs: tuple[tuple[int, int], ...] | None = None
    # a group-masked round's comparisons where nonzero (diffs, cols), found without forming them
    compared: tuple[np.ndarray, np.ndarray] | None = None
    aligned: bool = False  # group-masked round: no recovery stage (masks cancel)
    # silo -> the (q, h, recipient) deals its TrainRequest asked for (its upload may carry them)
    deal: dict[int, frozenset[tuple[int, int, int]]] = field(default_factory=dict)
    # (accused, accuser) -> the accusation waiting for its evidence, then its verdict
    disputes: dict[tuple[int, int], Dispute] = field(default_factory=dict)
    verdicts: dict[tuple[int, int], Verdict] = field(default_factory=dict)
    # silo -> the digest of the training inputs the driver sent it (start_round): a disputed
    # share is judged under its sender's (docs/protocol.md, "Verifiable accusations")
    inputs: dict[int, bytes] = field(default_factory=dict)
    # survivor views: the set being signed, whom to ask once it is, and its signatures so far
    view_set: tuple[int, ...] = ()
    view_ask: tuple[int, ...] = ()
    views: dict[int, bytes] = field(default_factory=dict)


def survivor_weights(rnd: RoundState) -> np.ndarray:
    """The weight rows fixed with the round's survivor set (decoding vector, then checks).

    Parameters
    ----------
    rnd
        The round in progress.

    Raises
    ------
    LocalProtocolError
        If the survivor set is not fixed yet.
    """
    if rnd.weights is None:
        raise LocalProtocolError("the round has no survivor set yet (close_collection first)")
    return rnd.weights


class MachineCore:
    """The state every phase of :class:`~coded_fl.secagg.server.machine.ServerMachine` works on
    (set in its ``__init__``), and the helpers they share: the stage check, the current round,
    the relayed credentials, the accusation counts and the abort."""

    config: ProtocolConfig
    max_erased_fraction: float
    drift_tolerance: float
    weight_coordinate: int | None
    excluded: frozenset[int]
    stage: ServerStage
    roster: dict[int, bytes]
    credentials: dict[int, tuple[bytes, bytes]]
    last_round: int
    _pending_keys: dict[int, bytes]
    _pending_credentials: dict[int, tuple[bytes, bytes]]
    _asked: set[int]
    _round: RoundState | None
    _bar_next: frozenset[int]
    _edge_tags: dict[int, dict[tuple[int, int], bytes]]
    _relay: dict[int, dict[tuple[int, int], tuple[int, bytes]]]
    _deals: dict[int, dict[int, frozenset[tuple[int, int, int]]]]

    def _require(self, *stages: ServerStage) -> None:
        if self.stage not in stages:
            raise LocalProtocolError(
                f"server cannot do that in stage {self.stage.value} "
                f"(allowed: {', '.join(s.value for s in stages)})"
            )

    def _current(self) -> RoundState:
        if self._round is None:
            raise LocalProtocolError("no round in progress")
        return self._round

    def _credentials_of(self, silos: Sequence[int]) -> tuple[tuple[bytes, bytes], ...]:
        """The (identity, endorsement) pairs to relay with ``silos``' keys (empty: none
        signed)."""
        creds = tuple(self.credentials.get(s, (b"", b"")) for s in silos)
        return creds if any(i for i, _ in creds) else ()

    @property
    def accusers_needed(self) -> int:
        """Distinct accusers that convict a silo: max(T + 1, 2).

        At most T silos collude, so T + 1 accusers include an honest one (whose share really
        failed authentication); never fewer than 2, so no silo excludes another alone.
        """
        return max(self.config.T + 1, 2)

    @property
    def liars(self) -> tuple[int, ...]:
        """The silos the current round's verdicts found lying."""
        rnd = self._round
        if rnd is None:
            return ()
        return tuple(sorted({v.liar for v in rnd.verdicts.values()}))

    @property
    def convicted(self) -> tuple[int, ...]:
        """Survivors of the current round to drop from S: accused by at least
        :attr:`accusers_needed` silos, or proven to have sent a bad share by a verdict; never
        one that every verdict on it cleared (its accusers lied)."""
        rnd = self._round
        if rnd is None:
            return ()
        need = self.accusers_needed
        counted = {i for i, by in rnd.accusations.items() if len(by) >= need}
        guilty = {v.accused for v in rnd.verdicts.values() if v.liar == v.accused}
        cleared = {v.accused for v in rnd.verdicts.values() if v.liar == v.accuser} - guilty
        return tuple(sorted((counted | guilty) - cleared))

    def _abort(
        self, reason: str, suspects: tuple[int, ...] = (), *, code: AbortCode
    ) -> RoundAborted:
        rnd = self._current()
        out = RoundAborted(
            round=rnd.number,
            reason=reason,
            suspects=tuple(sorted({*suspects, *self.liars})),
            survivors=rnd.survivors,
            verdicts=tuple(v for _, v in sorted(rnd.verdicts.items())),
            code=code,
        )
        self._round = None
        self.stage = ServerStage.READY
        return out
