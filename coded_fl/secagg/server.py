"""The server's side of the protocol as a sans-IO state machine.

Theory of operation (``docs/protocol.md`` has the whole protocol and its proofs; the one caller
that orders these calls is :class:`coded_fl.secagg.driver.ProtocolDriver`):

- ``start_key_exchange`` -> KeyRequests; ``receive(KeyReply)``; ``close_key_exchange`` fixes the
  roster (once per run, again when membership changes).
- ``start_round(r)`` -> TrainRequests to the roster; ``receive(Upload)`` as they arrive;
  ``uploads_ready`` turns true at max(n-s, U) uploads; the driver then calls
  ``close_collection`` (it never waits for the rest), which fixes the survivor set S and returns
  one RecoveryRequest per survivor: the weights (the code's decoding vector for S, plus parity
  checks when extra uploads came in) and, per survivor, the sealed share it addressed to that
  silo or, for a share it derived (the silo is in its derived set), its context and tag.
- ``receive(RecoveryReply)``; ``recovery_ready`` at U replies; ``finish`` decodes
  :math:`\\sum_k q(g_k) = \\sum_{i\\in S} a_i y_i - \\sum_{i \\in S} a_i z_i` and dequantizes it.
- ``masking="aligned"`` (:mod:`coded_fl.secagg.aligned`): each TrainRequest may relay sealed
  edge keys and ask the silo to deal some; each upload confirms the edge keys its silo holds
  (a late upload too). Once every edge of the mask graph has one confirmed key, with a holder
  in both of its groups, rounds are group-masked: ``close_collection`` returns no recovery
  request (the masks cancel in every weight row) and ``finish`` decodes at once.
- A round that cannot complete (too few uploads or recovery replies by the driver's deadline,
  replicas that disagree, an aggregate out of range) ends in :class:`RoundAborted` with the
  reason; nothing partial is returned and the machine is ready for the next round.
- Accusations: a survivor that cannot open the share silo i sealed for it answers with a
  ``Refusal`` (code ``ACCUSES``) instead of a reply. Each accusation is judged
  (:mod:`coded_fl.secagg.evidence`): ``reveal_requests`` asks the accused silo for the
  ephemeral scalar of that one share, ``receive(Reveal)`` opens the share the server relayed
  under it, and ``close_disputes`` judges the rest against their accused (no reveal). The
  liar, accuser or accused, is named (:attr:`RoundResult.offenders`, :class:`Verdict`) and
  left out of the session's later rounds; an accused proven lying is dropped from S like a
  convicted one. Besides, a silo accused by at least
  :meth:`ServerMachine.accusers_needed` = max(T + 1, 2) distinct survivors is *convicted*: at
  most T silos collude, so one of its accusers is honest and the share really failed (one
  silo, or T colluding ones, cannot exclude an honest silo). Once replies cannot reach U
  (``recovery_stuck``), ``retry_recovery`` drops the convicted silos from S and asks the
  survivors that have not answered yet again with the decoding vector of the smaller S (when
  it still has max(n-s, U) silos and U of them can answer); otherwise ``finish`` aborts naming
  them. Either way a convicted silo's upload is refused in the next round (it is left out of
  that round's S), then it takes part again.

Transition table (stage, input) -> handler; any other pair raises :class:`RemoteProtocolError`
(for a peer's message) or :class:`LocalProtocolError` (for a driver call) and changes nothing.
The server only ever holds masked uploads and aggregates: no individual update in the clear.

Length: one module because every handler works on the round state of the machine; about 350
lines of code, the rest documentation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch

from coded_fl.codes.repetition import GroupCode
from coded_fl.codes.resolve import Resolution, resolve
from coded_fl.codes.vote import sparse_comparisons, vote
from coded_fl.crypto import SEAL_OVERHEAD, check_public_key
from coded_fl.errors import (
    ConfigurationError,
    DecodingError,
    LocalProtocolError,
    RemoteProtocolError,
)
from coded_fl.quantize import dequantize
from coded_fl.secagg.aligned import EDGE_KEY_BYTES, EDGE_TAG_BYTES, edge_silos, incident
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES
from coded_fl.secagg.evidence import (
    DERIVED,
    SEALED,
    Entry,
    accusation_statement,
    judge,
    sealed_payload_bytes,
    share_statement,
)
from coded_fl.secagg.identity import check_credential_sizes, verify_endorsement, verify_signature
from coded_fl.secagg.messages import (
    SERVER,
    KeyReply,
    KeyRequest,
    Message,
    RecoveryReply,
    RecoveryRequest,
    Refusal,
    RefusalCode,
    Reveal,
    RevealRequest,
    TrainRequest,
    Upload,
)
from coded_fl.secagg.verify import comparison_pairs, weight_rows

__all__ = [
    "DRIFT_TOLERANCE",
    "RoundAborted",
    "RoundResult",
    "ServerMachine",
    "ServerStage",
    "Verdict",
]

#: Rounds whose deal plans are remembered for late uploads.
_LATE_ROUNDS = 8
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
class _Dispute:
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


@dataclass(frozen=True)
class RoundAborted:
    """A round that produced nothing; ``reason`` says why, ``suspects`` names silos if known
    (the liars of the round's judged accusations among them)."""

    round: int
    reason: str
    suspects: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()
    verdicts: tuple[Verdict, ...] = ()


@dataclass
class _Round:
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
    disputes: dict[tuple[int, int], _Dispute] = field(default_factory=dict)
    verdicts: dict[tuple[int, int], Verdict] = field(default_factory=dict)
    # silo -> the digest of the training inputs the driver sent it (start_round): a disputed
    # share is judged under its sender's (docs/protocol.md, "Verifiable accusations")
    inputs: dict[int, bytes] = field(default_factory=dict)


class ServerMachine:
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
        self._round: _Round | None = None
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
        }

    def __repr__(self) -> str:
        return (
            f"ServerMachine(stage={self.stage.value}, round={self.last_round}, "
            f"roster={len(self.roster)})"
        )

    # ------------------------------------------------------------------ dispatch
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

    def _require(self, *stages: ServerStage) -> None:
        if self.stage not in stages:
            raise LocalProtocolError(
                f"server cannot do that in stage {self.stage.value} "
                f"(allowed: {', '.join(s.value for s in stages)})"
            )

    # ------------------------------------------------------------------ keys
    def start_key_exchange(self, silos: Sequence[int] | None = None) -> list[KeyRequest]:
        """Ask ``silos`` (default all n) for their public keys; call again to rekey.

        Parameters
        ----------
        silos
            The silos to ask (default: all n).

        Returns
        -------
        list[KeyRequest]
            One request per silo asked.
        """
        self._require(ServerStage.INIT, ServerStage.READY)
        cfg = self.config
        targets = sorted(set(range(cfg.n) if silos is None else silos))
        if any(not 0 <= s < cfg.n for s in targets) or not targets:
            raise LocalProtocolError(f"silos must be a non-empty subset of 0..{cfg.n - 1}")
        self._pending_keys, self._asked = {}, set(targets)
        self._pending_credentials = {}
        self.stage = ServerStage.KEYS
        body = cfg.to_json()
        return [
            KeyRequest(digest=cfg.digest, round=0, sender=SERVER, recipient=s, config=body)
            for s in targets
        ]

    def _on_key_reply(self, msg: KeyReply) -> None:
        if msg.sender not in self._asked:
            raise RemoteProtocolError("key reply from a silo that was not asked", sender=msg.sender)
        if msg.sender in self._pending_keys:
            raise RemoteProtocolError("duplicate key reply", sender=msg.sender)
        check_public_key(msg.public_key, sender=msg.sender)
        check_credential_sizes(msg.identity, msg.signature, sender=msg.sender)
        if msg.identity and not verify_endorsement(
            digest=self.config.digest,
            run=self.config.run_bytes,
            silo=msg.sender,
            public_key=msg.public_key,
            identity=msg.identity,
            signature=msg.signature,
        ):  # the server cannot judge trust, but a signature that does not verify is garbage
            raise RemoteProtocolError(
                "the endorsement of its key does not verify under its identity key",
                sender=msg.sender,
            )
        key = bytes(msg.public_key)
        taken = {**self.roster, **self._pending_keys}
        if any(k == key for silo, k in taken.items() if silo != msg.sender):
            # a silo that copies another's public key could not open what is sealed to it (it
            # lacks the private key) and would only ever be rekeyed: refused at once. Which of
            # two claimants is honest only authenticated keys can tell; the first one keeps it.
            raise RemoteProtocolError(
                "public key is already another silo's: every silo must send its own",
                sender=msg.sender,
            )
        self._pending_keys[msg.sender] = key
        self._pending_credentials[msg.sender] = (bytes(msg.identity), bytes(msg.signature))

    @property
    def keys_received(self) -> int:
        """Key replies accepted in the key exchange under way."""
        return len(self._pending_keys)

    @property
    def keyed_in_exchange(self) -> tuple[int, ...]:
        """The silos whose key reply the key exchange under way accepted."""
        return tuple(sorted(self._pending_keys))

    def close_key_exchange(self) -> tuple[int, ...]:
        """Fix the roster (new keys replace old ones); returns the silos that did not answer.

        Raises :class:`DecodingError` if fewer than max(n-s, U) silos would have keys.
        """
        self._require(ServerStage.KEYS)
        roster = {**self.roster, **self._pending_keys}
        need = self.config.min_uploads
        if len(roster) < need:
            raise DecodingError(
                f"only {len(roster)} silos have keys; a round needs max(n-s, U) = {need}: "
                "start more SuperNodes or lower num_stragglers / recovery_threshold"
            )
        missing = tuple(sorted(self._asked - set(self._pending_keys)))
        for silo in self._pending_keys:  # new keys: edge keys dealt to the old ones are gone
            self._edge_tags.pop(silo, None)
            self._relay.pop(silo, None)
        self.roster, self._pending_keys = roster, {}
        self.credentials.update(self._pending_credentials)
        self._pending_credentials = {}
        self.stage = ServerStage.READY
        return missing

    def _credentials_of(self, silos: Sequence[int]) -> tuple[tuple[bytes, bytes], ...]:
        """The (identity, endorsement) pairs to relay with ``silos``' keys (empty: none
        signed)."""
        creds = tuple(self.credentials.get(s, (b"", b"")) for s in silos)
        return creds if any(i for i, _ in creds) else ()

    # ------------------------------------------------------------------ collection
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
        aligned = cfg.aligned and self.edges_ready
        deal = self._deal_plan(number) if cfg.aligned else {}
        self._round = _Round(number, barred=self._bar_next | self.excluded, aligned=aligned)
        self._round.deal = {s: frozenset(d) for s, d in deal.items()}
        self._round.inputs = {
            s: bytes(inputs if isinstance(inputs, (bytes, bytearray)) else inputs.get(s, b""))
            for s in self.roster
        }
        self._deals[number] = self._round.deal
        for old in sorted(self._deals)[:-_LATE_ROUNDS]:
            del self._deals[old]
        self._bar_next = frozenset()
        self.last_round = number
        self.stage = ServerStage.COLLECTING
        relay = self._relay  # kept until confirmed: a silo that missed it gets it again
        return [
            TrainRequest(
                digest=cfg.digest,
                round=number,
                sender=SERVER,
                recipient=s,
                roster=roster,
                credentials=credentials,
                aligned=aligned,
                edge_keys=tuple(
                    (dealer, q, h, box)
                    for (q, h), (dealer, box) in sorted(relay.get(s, {}).items())
                ),
                deal=tuple(sorted(deal.get(s, ()))),
            )
            for s, _ in roster
        ]

    # ------------------------------------------------------------------ edge keys (aligned)
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
        if not cfg.aligned:
            if msg.dealt or msg.confirms:
                raise RemoteProtocolError(
                    "edge keys in a run without masking='aligned'", sender=msg.sender
                )
            return
        asked = deal.get(msg.sender, frozenset())
        seen = set()
        for recipient, q, h, box in msg.dealt:
            if (q, h, recipient) not in asked or (q, h, recipient) in seen:
                raise RemoteProtocolError(
                    f"dealt edge key {(q, h)} for silo {recipient} was not asked for",
                    sender=msg.sender,
                )
            seen.add((q, h, recipient))
            if len(box) != EDGE_KEY_BYTES + SEAL_OVERHEAD:
                raise RemoteProtocolError("a sealed edge key has the wrong size", sender=msg.sender)
        mine = {e for e, _ in incident(cfg.mask_edges, cfg.group_code.group_of(msg.sender))}
        edges = [(q, h) for q, h, _ in msg.confirms]
        if len(set(edges)) != len(edges) or not set(edges) <= mine:
            raise RemoteProtocolError(
                f"edge confirmations must name distinct edges at its group, got {edges}",
                sender=msg.sender,
            )
        if any(len(t) != EDGE_TAG_BYTES for _, _, t in msg.confirms):
            raise RemoteProtocolError(
                f"an edge confirmation is not {EDGE_TAG_BYTES} bytes", sender=msg.sender
            )

    def _take_edge_fields(self, msg: Upload) -> None:
        if not self.config.aligned:
            return
        self._edge_tags[msg.sender] = {(q, h): bytes(t) for q, h, t in msg.confirms}
        pending = self._relay.get(msg.sender, {})
        for edge in self._edge_tags[msg.sender]:  # confirmed: no need to relay it again
            pending.pop(edge, None)
        for recipient, q, h, box in msg.dealt:
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
            self.config.min_uploads + self.config.extra_replies,
            len(set(self.roster) - rnd.barred),
        )
        return len(rnd.uploads) >= want

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

    def _fix_survivors(self, rnd: _Round, survivors: tuple[int, ...]) -> np.ndarray:
        """Fix S: its weight rows and (a group code) the comparisons they make; any sum of the
        uploads over an earlier S is dropped. Returns the weight rows."""
        cfg = self.config
        rnd.survivors, rnd.masked, rnd.compared = survivors, None, None
        rnd.weights = weight_rows(cfg, survivors, group_masked=rnd.aligned)
        rnd.pairs = comparison_pairs(cfg, survivors, group_masked=rnd.aligned)
        return rnd.weights

    def _recovery_requests(
        self, rnd: _Round, survivors: tuple[int, ...], ask: Sequence[int]
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

    # ------------------------------------------------------------------ recovery
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
        expect = (_weights(rnd).shape[0], cfg.sharing.piece_length)
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

    # ------------------------------------------------------------------ evidence
    def _item(self, rnd: _Round, accused: int, accuser: int) -> tuple[bool, bytes] | None:
        """What the server relayed to ``accuser`` for ``accused``'s share: (derived, item)."""
        upload = rnd.uploads.get(accused)
        if upload is None:
            return None
        box = dict(upload.shares).get(accuser)
        if box is not None:
            return False, bytes(box)
        tag = dict(upload.tags).get(accuser)
        return None if tag is None else (True, upload.context + tag)

    def _dispute(self, rnd: _Round, accused: int, accuser: int, evidence: bytes) -> None:
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
        rnd.disputes[pair] = _Dispute(derived, bytes(upload.context), item, bytes(evidence))

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

    def _verdict(self, rnd: _Round, accused: int, accuser: int, *, liar: int, reason: str) -> None:
        """Record a verdict: its liar is an offender, left out of the session's later rounds."""
        rnd.disputes.pop((accused, accuser), None)
        rnd.verdicts[(accused, accuser)] = Verdict(rnd.number, accuser, accused, liar, reason)
        self.excluded = frozenset({*self.excluded, liar})

    @property
    def liars(self) -> tuple[int, ...]:
        """The silos the current round's verdicts found lying."""
        rnd = self._round
        if rnd is None:
            return ()
        return tuple(sorted({v.liar for v in rnd.verdicts.values()}))

    @property
    def accusers_needed(self) -> int:
        """Distinct accusers that convict a silo: max(T + 1, 2).

        At most T silos collude, so T + 1 accusers include an honest one (whose share really
        failed authentication); never fewer than 2, so no silo excludes another alone.
        """
        return max(self.config.T + 1, 2)

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

    def sum_uploads(self) -> None:
        """Sum the survivors' masked uploads with the round's weight rows now.

        Optional: :meth:`finish` does it otherwise. The sum needs the survivor set S, which
        :meth:`close_collection` fixes, but not the recovery replies, so a driver calls this
        while the recovery requests are out and the server would otherwise wait: the largest
        part of the decode, ((n - s) x d multiply-adds per row), then leaves the round's
        critical path. If the survivor set changes (:meth:`retry_recovery`) the sum is
        dropped and made again.
        """
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        if rnd.masked is not None:
            return
        cfg = self.config
        uploads = [rnd.uploads[i].masked for i in rnd.survivors]
        code = cfg.gradient_code
        if rnd.aligned and isinstance(code, GroupCode):
            # row 0 (the decoding vector reads one reference per group); the comparisons
            # are checked in one pass and formed only where replicas differ
            rnd.masked = cfg.field.matmul(_weights(rnd)[:1], uploads)
            rnd.compared = code.differences(rnd.survivors, rnd.pairs or (), uploads)
        else:
            rnd.masked = cfg.field.matmul(_weights(rnd), uploads)

    def finish(self) -> RoundResult | RoundAborted:
        """Decode the round (needs U recovery replies), or abort it saying why."""
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        cfg = self.config
        if len(rnd.replies) < cfg.U and not rnd.aligned:
            convicted = self.convicted
            if convicted:
                self._bar_next = frozenset({*rnd.excluded, *convicted})
                return self._abort(
                    f"silo(s) {list(convicted)}: the mask shares they left failed at "
                    f"{self.accusers_needed} or more survivors, or the evidence of an "
                    "accusation proved one bad, and the "
                    f"survivors without them are too few to unmask (need max(n-s, U) = "
                    f"{cfg.min_uploads} silos, U = {cfg.U} of them able to answer); they are left "
                    "out of the next round",
                    suspects=convicted,
                )
            return self._abort(
                f"only {len(rnd.replies)} of {len(rnd.survivors)} survivors answered the recovery "
                f"request; unmasking needs U = {cfg.U} (lower recovery_threshold to tolerate "
                "dropouts during recovery)"
            )
        weights = _weights(rnd)
        F = cfg.field
        self.sum_uploads()  # a no-op if the driver did it while the replies travelled
        masked = rnd.masked
        if masked is None:  # pragma: no cover - sum_uploads() just set it
            raise LocalProtocolError("no sum of the uploads")
        wrong: tuple[int, ...] = ()
        if rnd.aligned:  # the group masks cancel in every row
            sums = masked
        else:
            try:  # more than U replies are checked against each other (a codeword)
                replies, wrong = cfg.sharing.verified(rnd.replies)
            except DecodingError as exc:
                return self._abort(f"{exc}; the aggregate was not formed", suspects=exc.suspects)
            masks = cfg.sharing.decode(replies)  # (R, d): sum_i w_i z_i per row
            sums = F.sub(masked, masks)  # row 0: sum_k q(g_k); rows 1..: parity checks
        e = weights.shape[0] - 1
        res, voted = self._decode(rnd, weights, sums)
        located = {rnd.survivors[i]: c for i, c in res.located.items()}
        unresolved = {rnd.survivors[i]: c for i, c in res.unresolved.items()}
        erased = int(res.erased.numel())
        limit = self.max_erased_fraction * res.value.numel()
        broken = () if voted else tuple(sorted(i for i, c in located.items() if c > limit))
        if erased > limit and voted:
            beyond = sorted({*located, *unresolved})
            return self._abort(
                f"replicas of a partition disagree beyond the drift tolerance "
                f"(drift_tolerance={self.drift_tolerance:g} of the clip range) at {erased} of "
                f"{res.value.numel()} coordinates with no majority in their group "
                f"({res.out_of_range} outside the range of a true sum), more than "
                f"max_erased_fraction={self.max_erased_fraction:g} allows; the aggregate was not "
                f"applied; silos beyond the tolerance: "
                + (
                    ", ".join(f"{i} ({located.get(i, 0) + unresolved.get(i, 0)})" for i in beyond)
                    or "none"
                )
                + ". Honest sites drift further after long local training: raise "
                "drift_tolerance, or wait for more replies per group (extra_replies)",
                suspects=tuple(beyond),
            )
        if broken:
            # correction assumes at most e // 2 off replies per coordinate; a silo off at more
            # coordinates than float noise ever makes uses that budget everywhere, so another
            # silo's noise at the same coordinate would go beyond what the checks guarantee
            return self._abort(
                f"silo(s) {list(broken)} sent replies off at "
                f"{', '.join(str(located[i]) for i in broken)} of {res.value.numel()} "
                f"coordinates, more than max_erased_fraction={self.max_erased_fraction:g} "
                "allows for replicas that differ by float noise: a broken or malicious silo; "
                "the aggregate was not applied",
                suspects=broken,
            )
        if erased > limit:
            top = max(located.values(), default=0)
            suspects = tuple(sorted(i for i, c in located.items() if c == top and c > 0))
            named = (
                f"; suspect silo(s) {list(suspects)} (located at {top} of them)"
                if suspects
                else (
                    "; add extra replies (>= 2) to locate the silo"
                    if e < 2
                    else "; no silo could be located"
                )
            )
            return self._abort(
                f"replicas of a partition disagree beyond float noise: the aggregate is corrupt "
                f"at {erased} of {res.value.numel()} coordinates ({res.disagreeing} failed the "
                f"parity checks, {res.out_of_range} were outside the range of a true sum), more "
                f"than max_erased_fraction={self.max_erased_fraction:g} allows; it was not "
                f"applied{named}",
                suspects=suspects,
            )
        total = dequantize(
            res.value, cfg.quantization, F, check_range=False
        )  # out of range: erased
        result = RoundResult(
            round=rnd.number,
            total=total,
            aggregate=res.value,
            survivors=rnd.survivors,
            responders=tuple(sorted(rnd.replies)),
            stragglers=tuple(
                s for s in sorted(self.roster) if s not in rnd.uploads and s not in rnd.barred
            ),
            checks=e,
            disagreeing=res.disagreeing,
            corrected=res.corrected,
            erased=res.erased,
            located=located,
            excluded=rnd.excluded,
            within_tolerance=res.within_tolerance,
            offenders=tuple(sorted({*(located if voted else ()), *wrong, *self.liars})),
            unresolved=unresolved,
            verdicts=tuple(v for _, v in sorted(rnd.verdicts.items())),
        )
        self.excluded = frozenset({*self.excluded, *result.offenders})
        self._round = None
        self.stage = ServerStage.READY
        return result

    def _decode(
        self, rnd: _Round, weights: np.ndarray, sums: torch.Tensor
    ) -> tuple[Resolution, bool]:
        """The round's sum, coordinate by coordinate: a vote within each silo group for a group
        code (True), the parity checks' location and correction otherwise (False)."""
        cfg = self.config
        quant = cfg.quantization
        bound = quant.num_summands * quant.max_abs
        pairs = rnd.pairs
        code = cfg.gradient_code
        if pairs is None or not isinstance(code, GroupCode):
            e = sums.shape[0] - 1
            return resolve(cfg.field, weights, sums, bound=bound, radius=e // 2), False
        if rnd.compared is not None:  # a group-masked round: found in sum_uploads
            diffs, cols = rnd.compared
        else:  # recovered rows: the comparisons in full
            diffs, cols = sparse_comparisons(sums)
        total = sums[0]
        groups: list[int] = []
        for ref, _ in pairs:
            group = code.group_of(rnd.survivors[ref])
            if group not in groups:
                groups.append(group)
        step = self.drift_tolerance * quant.max_abs
        wc = self.weight_coordinate
        if wc is not None:  # the mean weight rho: the packed updates scale with it
            at = np.flatnonzero(cols == wc)
            weight = vote(
                cfg.field,
                total[wc : wc + 1],
                diffs[:, at],
                np.zeros(at.size, dtype=np.int64),
                pairs,
                tolerance=[0] * len(groups),
                bound=bound,
            )
            rho_sum = int(cfg.field.to_signed(weight.value)[0])
            step *= min(1.0, max(0.0, rho_sum / quant.max_abs / code.K))
        # at least one quantization step per partition: replicas whose floats differ in the
        # last bits may round to neighbouring steps
        tolerance = [
            max(1, math.ceil(step)) * code.partitions_of_group(q) if self.drift_tolerance else 0
            for q in groups
        ]
        res = vote(
            cfg.field,
            total,
            diffs,
            cols,
            pairs,
            tolerance=tolerance,
            bound=bound,
            exact=() if wc is None else (wc,),
        )
        return res, True

    def abort(self, reason: str) -> RoundAborted:
        """Give up the current round (e.g. the driver's deadline passed).

        Parameters
        ----------
        reason
            Why the round is given up (in the RoundAborted).

        Returns
        -------
        RoundAborted
        """
        self._require(ServerStage.COLLECTING, ServerStage.RECOVERING)
        return self._abort(reason)

    # ------------------------------------------------------------------ internals
    def _current(self) -> _Round:
        if self._round is None:
            raise LocalProtocolError("no round in progress")
        return self._round

    def _abort(self, reason: str, suspects: tuple[int, ...] = ()) -> RoundAborted:
        rnd = self._current()
        out = RoundAborted(
            round=rnd.number,
            reason=reason,
            suspects=tuple(sorted({*suspects, *self.liars})),
            survivors=rnd.survivors,
            verdicts=tuple(v for _, v in sorted(rnd.verdicts.items())),
        )
        self._round = None
        self.stage = ServerStage.READY
        return out


def _weights(rnd: _Round) -> np.ndarray:
    if rnd.weights is None:
        raise LocalProtocolError("the round has no survivor set yet (close_collection first)")
    return rnd.weights
