"""An in-memory harness: one server machine, n client machines, a switchboard in between.

Every message goes through the binary codec (so its bytes are counted and its parsing is
exercised). Each silo can be made slow (a virtual delay before its upload arrives) or made to
drop at any stage. The rounds are run by :class:`coded_fl.secagg.driver.ProtocolDriver`, the
driver the Flower strategy uses, over an in-memory switchboard whose clock is virtual: replies
arrive in the order of their delays, and the server closes collection as soon as it may (never
waiting for stragglers).

>>> cfg = ProtocolConfig(num_silos=4, num_stragglers=1, privacy_threshold=1, vector_length=3)
>>> h = Harness(cfg, seed=0)
>>> h.setup()
()
>>> out = h.run_round(1, behaviour={3: Silo(delay=5.0)})
>>> out.result.stragglers, out.result.survivors
((3,), (0, 1, 2))
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg.client import ClientMachine, refusal_for
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.driver import KeyExchangeError, ProtocolDriver
from coded_fl.secagg.messages import (
    KeyRequest,
    Message,
    RecoveryReply,
    RecoveryRequest,
    RevealRequest,
    TrainRequest,
    Upload,
    ViewRequest,
    decode,
    encode,
)
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.replies import take_late
from coded_fl.secagg.server import RoundAborted, RoundResult, ServerMachine
from coded_fl.secagg.transport import Batch, Reply, Waits

__all__ = [
    "Harness",
    "RoundOutcome",
    "Silo",
    "deterministic_entropy",
    "gaussian_partials",
]

#: partial update of ``partition`` in ``round``: the same tensor for every replica.
Partials = Callable[[int, int], torch.Tensor]


@dataclass(frozen=True)
class Silo:
    """How one silo behaves in a round.

    ``drop`` is the stage at which it disappears: ``"keys"`` (never answers the key exchange),
    ``"train"`` (gets the TrainRequest, never uploads), ``"recovery"`` (uploads, then never
    answers the RecoveryRequest; where the silos sign their keys, ``"view"`` uploads and
    never signs the survivor set). ``delay`` is the virtual time its upload takes to arrive.
    ``tamper`` may rewrite its partial updates before encoding (a replica that disagrees);
    ``forge`` may rewrite its whole upload (e.g. garble the sealed shares it sends), and
    ``forge_recovery`` its recovery reply (a deviating silo's crafted share sums). ``accuse``
    makes it refuse the recovery with a (false) accusation of that silo; ``withhold`` makes it
    never reveal a disputed share's key.
    """

    drop: str | None = None
    delay: float = 0.0
    tamper: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    forge: Callable[[Upload], Upload] | None = None
    forge_recovery: Callable[[RecoveryReply], RecoveryReply] | None = None
    #: (recovery stage) refuse every recovery request with an accusation naming this silo
    accuse: int | None = None
    #: (evidence stage) never answer a request to reveal a disputed share's key
    withhold: bool = False


@dataclass
class RoundOutcome:
    """One round's result, the bytes each side moved and the silos that dropped."""

    result: RoundResult | RoundAborted
    client_seconds: dict[int, float] = field(default_factory=dict)
    server_seconds: float = 0.0
    bytes_up: dict[int, int] = field(default_factory=dict)
    bytes_down: dict[int, int] = field(default_factory=dict)
    refused: list[tuple[int, str]] = field(default_factory=list)
    #: step -> CPU seconds of each time it ran: the server's machine calls (``server_upload``,
    #: ``server_close``, ``server_sum``, ``server_finish``, ...) and the silos' work
    #: (``client_upload``, ``client_recovery``: the machine call and the encoding)
    steps: dict[str, list[float]] = field(default_factory=dict)
    #: message kind (``train_request``, ``upload``, ``recovery_request``, ``recovery_reply``,
    #: ...) -> the size in bytes of each one sent
    sizes: dict[str, list[int]] = field(default_factory=dict)


def deterministic_entropy(seed: int) -> Callable[[int], bytes]:
    """A seeded byte source for reproducible test runs (never for real masks).

    Parameters
    ----------
    seed
        The seed.

    Returns
    -------
    Callable[[int], bytes]
    """
    rng = random.Random(seed)
    return lambda n: rng.randbytes(n)


def gaussian_partials(d: int, *, seed: int = 0, scale: float = 0.1) -> Partials:
    """Partition k's update in round r: a fixed Gaussian vector (same on every replica).

    Parameters
    ----------
    d
        Vector length.
    seed
        Seeds every (round, partition) vector.
    scale
        Standard deviation.

    Returns
    -------
    Callable[[int, int], torch.Tensor]
    """

    def make(round_: int, partition: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed * 1_000_003 + round_ * 1009 + partition)
        return torch.randn(d, generator=g) * scale

    return make


class Harness:
    """Runs the protocol for ``config`` among in-memory machines.

    Parameters
    ----------
    config
        The protocol configuration.
    partials
        ``partials(round, partition)`` -> that partition's update (default: Gaussian vectors
        of :func:`gaussian_partials`, the same on every replica).
    seed
        Seeds the default partials and the machines' entropy.
    secure_entropy
        Use the OS CSPRNG instead of seeded entropy.
    policy
        The silos' limits (default: :class:`~coded_fl.secagg.policy.ClientPolicy`'s).
    """

    def __init__(
        self,
        config: ProtocolConfig,
        *,
        partials: Partials | None = None,
        seed: int = 0,
        secure_entropy: bool = False,
        policy: ClientPolicy | None = None,
    ) -> None:
        self.config = config
        self.partials = partials or gaussian_partials(config.vector_length, seed=seed)
        self.server = ServerMachine(config)
        self.clients = {
            i: ClientMachine(policy=policy)
            if secure_entropy
            else ClientMachine(entropy=deterministic_entropy(seed * 997 + i), policy=policy)
            for i in range(config.n)
        }
        self._out = RoundOutcome(RoundAborted(0, "not run"))
        self._decode = 0.0  # CPU seconds the switchboard spent decoding the reply in hand

    # ------------------------------------------------------------------ stages
    def setup(
        self, behaviour: Mapping[int, Silo] | None = None, silos: list[int] | None = None
    ) -> tuple[int, ...]:
        """Key exchange; returns the silos that did not answer."""
        self._out = RoundOutcome(RoundAborted(0, "keys"))
        board = _Switchboard(self, behaviour or {}, 0)
        try:
            keys = self._driver(board).key_exchange(silos)
        except KeyExchangeError as exc:
            if exc.errors:
                why = f"key exchange refused: {sorted(exc.errors.items())}"
                raise RemoteProtocolError(why) from None
            raise
        if keys.errors:
            raise RemoteProtocolError(f"key exchange refused: {sorted(keys.errors.items())}")
        return keys.missing

    def run_round(
        self,
        number: int,
        behaviour: Mapping[int, Silo] | None = None,
        *,
        waits: Waits | None = None,
    ) -> RoundOutcome:
        """One round: train requests, uploads in virtual-time order, recovery, decode; then the
        uploads that came after the close (the machine refuses them: the round closed).
        ``waits`` are the stages' deadlines in virtual seconds (default: none; the round
        closes as soon as the configuration lets it)."""
        out = self._out = RoundOutcome(RoundAborted(number, "not run"))
        board = _Switchboard(self, behaviour or {}, number)
        driver = self._driver(board)
        run = driver.run_round(number, waits=waits)
        if run.result is None:  # pragma: no cover - the driver always decides
            raise RuntimeError("round produced no outcome")
        out.result = run.result
        out.refused.extend(sorted(run.errors.items()))
        for reply in board.late:
            why = take_late(self.server, driver.notes, reply)
            if why is not None:
                out.refused.append((reply.silo, why))
        out.server_seconds = sum(sum(v) for k, v in out.steps.items() if k.startswith("server_"))
        return out

    def _driver(self, board: _Switchboard) -> ProtocolDriver:
        return ProtocolDriver(self.server, board, on_step=self._note)

    def _note(self, step: str, seconds: float) -> None:
        """A server step's CPU seconds (a received message's decoding counted in)."""
        if step in (
            "server_keys",
            "server_upload",
            "server_recovery",
            "server_reveal",
            "server_view",
        ):
            seconds, self._decode = seconds + self._decode, 0.0
        self._out.steps.setdefault(step, []).append(seconds)

    def _ask(
        self,
        requests: list[RecoveryRequest],
        behaviour: Mapping[int, Silo],
        refused: list[tuple[int, str]],
    ) -> None:
        """Deliver recovery requests and hand each answer (a reply or a typed refusal, e.g. an
        accusation) to the server: a stage driven by hand, for tests that stop the round at
        its evidence stage."""
        board = _Switchboard(self, behaviour, requests[0].round if requests else 0)
        driver = self._driver(board)
        errors: dict[int, str] = {}
        for reply in board.send(requests, stage="recovery", round_=board.round).handle:
            driver.take_reply("recovery", board.read(reply), errors, {})
        refused.extend(sorted(errors.items()))

    def expected_total(self, number: int) -> torch.Tensor:
        """The exact sum the round must produce: quantize every partition like a silo does and
        add the signed integers (independent of masks and codes)."""
        from coded_fl.quantize import RoundingKey, stochastic_round

        cfg = self.config
        total = torch.zeros(cfg.vector_length, dtype=torch.int64)
        for k in range(cfg.gradient_code.K):
            key = RoundingKey.for_partition(cfg.seed_id, number, k)
            total += stochastic_round(self.partials(number, k), cfg.quantization, key)
        return total


@dataclass(order=True)
class _Arrival:
    """A silo's answer on the wire: when it arrives (virtual seconds), from whom, its bytes or
    why the silo sent none."""

    at: float
    silo: int
    raw: bytes = field(default=b"", compare=False)
    error: str = field(default="", compare=False)


#: The client step a stage's reply encoding is timed into (the step that made the reply).
_ENCODE_INTO = {"train": "client_upload", "recovery": "client_recovery"}

#: Message kinds by stage, as :attr:`RoundOutcome.sizes` names them: (request, reply).
_KINDS = {
    "keys": ("key_request", "key_reply"),
    "train": ("train_request", "upload"),
    "recovery": ("recovery_request", "recovery_reply"),
    "reveal": ("reveal_request", "reveal"),
    "view": ("view_request", "view_reply"),
}


class _Switchboard:
    """The harness's :class:`~coded_fl.secagg.driver.Transport`: every request is encoded,
    decoded by its silo's machine, answered as the silo's :class:`Silo` behaviour says, and
    the answer encoded; answers arrive in virtual time (a train request's after the silo's
    delay, the others at once). Answers the driver stops waiting for are kept in
    :attr:`late`."""

    def __init__(self, harness: Harness, behaviour: Mapping[int, Silo], round_: int) -> None:
        self.h = harness
        self.behaviour = behaviour
        self.round = round_
        self.clock = 0.0
        self.late: list[Reply] = []

    def now(self) -> float:
        return self.clock

    def _count(self, table: dict[int, int], silo: int, kind: str, raw: bytes) -> None:
        table[silo] = table.get(silo, 0) + len(raw)
        self.h._out.sizes.setdefault(kind, []).append(len(raw))

    def _client(
        self, silo: int, step: str | None, fn: Callable[[], Any], *, add: bool = False
    ) -> Any:
        """Run ``fn`` as silo ``silo``'s work, timed under ``step`` (``add``: into the step's
        last entry, e.g. the encoding of the reply the step made)."""
        out = self.h._out
        t0 = time.thread_time()
        try:
            return fn()
        finally:
            sec = time.thread_time() - t0
            out.client_seconds[silo] = out.client_seconds.get(silo, 0.0) + sec
            if step is not None:
                times = out.steps.setdefault(step, [])
                if add and times:
                    times[-1] += sec
                else:
                    times.append(sec)

    def send(self, requests: Sequence[Message], *, stage: str, round_: int) -> Batch:
        ask, answer = _KINDS[stage]
        arrivals: list[_Arrival] = []
        for req in requests:
            silo = req.recipient
            raw = encode(req)
            self._count(self.h._out.bytes_down, silo, ask, raw)
            delivered = decode(raw)
            if type(delivered) is not type(req):  # pragma: no cover - the codec keeps types
                raise RemoteProtocolError("message changed type on the wire")
            b = self.behaviour.get(silo, Silo())
            reply, delay, error = self._answer(silo, b, delivered)
            if error:  # the silo refused without a typed refusal: it says why, sends nothing
                arrivals.append(_Arrival(self.clock, silo, error=error))
                continue
            if reply is None:
                continue
            raw_reply = self._client(
                silo,
                None,
                lambda m=reply: encode(m),  # type: ignore[misc]
            )
            self._count(self.h._out.bytes_up, silo, answer, raw_reply)
            arrivals.append(_Arrival(self.clock + delay, silo, raw_reply))
        return Batch(stage, round_, tuple(q.recipient for q in requests), sorted(arrivals))

    def _answer(self, silo: int, b: Silo, msg: Message) -> tuple[Message | None, float, str]:
        """What silo ``silo`` sends back for ``msg``, after how long (None: nothing) and, for
        a reveal it refuses, why. Any other error the silo's machine raises propagates (a test
        sees it)."""
        c = self.h.clients[silo]
        if isinstance(msg, KeyRequest):
            if b.drop == "keys":
                return None, 0.0, ""
            return self._client(silo, "client_keys", lambda: c.on_key_request(msg)), 0.0, ""
        if isinstance(msg, TrainRequest):
            if b.drop in ("keys", "train"):
                return None, 0.0, ""
            task = self._client(silo, "client_train_request", lambda: c.on_train_request(msg))
            # training is not protocol work: the partial updates are made outside the timing
            parts = [self.h.partials(msg.round, k) for k in task.partitions]
            if b.tamper is not None:
                parts = [b.tamper(k, g) for k, g in zip(task.partitions, parts, strict=True)]
            upload = self._client(silo, "client_upload", lambda: c.upload(task, parts))
            return (b.forge(upload) if b.forge is not None else upload), b.delay, ""
        if isinstance(msg, RecoveryRequest):
            if b.drop == "recovery":
                return None, 0.0, ""
            reply: Message
            try:
                if b.accuse is not None:  # the refusal an honest silo sends for a bad share
                    raise RemoteProtocolError(
                        "its mask share failed authentication", sender=b.accuse
                    )
                reply = self._client(silo, "client_recovery", lambda: c.on_recovery_request(msg))
            except RemoteProtocolError as exc:
                refusal = refusal_for(exc, msg)
                if refusal is None:
                    raise
                reply = refusal
            if b.forge_recovery is not None and isinstance(reply, RecoveryReply):
                reply = b.forge_recovery(reply)
            return reply, 0.0, ""
        if isinstance(msg, ViewRequest):
            if b.drop == "view":
                return None, 0.0, ""
            try:
                return self._client(silo, "client_view", lambda: c.on_view_request(msg)), 0.0, ""
            except RemoteProtocolError as exc:  # it signs nothing, and says why
                return None, 0.0, str(exc)
        if not isinstance(msg, RevealRequest):  # pragma: no cover - the driver's five stages
            raise TypeError(f"the harness does not answer {type(msg).__name__}")
        if b.withhold:
            return None, 0.0, ""
        try:
            return self._client(silo, "client_reveal", lambda: c.on_reveal_request(msg)), 0.0, ""
        except RemoteProtocolError as exc:
            return None, 0.0, str(exc)

    def read(self, arrival: _Arrival) -> Reply:
        """The driver's view of an arrival: its decoded message, or why there is none."""
        if arrival.error:
            return Reply(arrival.silo, error=arrival.error)
        try:
            return Reply(arrival.silo, decode(arrival.raw))
        except CodedFLError as exc:
            return Reply(arrival.silo, error=str(exc), unreadable=True)

    def collect(
        self,
        batch: Batch,
        expect: tuple[type[Message], ...],
        on_reply: Callable[[Reply], bool],
        *,
        deadline: Callable[[], float],
    ) -> None:
        pending: list[_Arrival] = list(batch.handle)
        while pending and pending[0].at <= deadline():
            arrival = pending.pop(0)
            self.clock = max(self.clock, arrival.at)
            t0 = time.thread_time()
            reply = self.read(arrival)
            self.h._decode = time.thread_time() - t0  # server work: into the receive step
            if on_reply(reply):
                break
        self.late.extend(self.read(a) for a in pending)
