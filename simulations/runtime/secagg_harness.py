"""An in-memory harness: one server machine, n client machines, a switchboard in between.

Every message goes through the binary codec (so its bytes are counted and its parsing is
exercised). Each silo can be made slow (a virtual delay before its upload arrives) or made to
drop at any stage. Arrival order follows the virtual clock; the server closes collection as
soon as it may (never waiting for stragglers), exactly as the Flower strategy does.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import torch

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.client import ClientMachine, refusal_for
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import (
    Message,
    RecoveryReply,
    RecoveryRequest,
    Upload,
    decode,
    encode,
)
from coded_fl.secagg.server import RoundAborted, RoundResult, ServerMachine

M = TypeVar("M", bound=Message)

__all__ = ["Harness", "RoundOutcome", "Silo", "deterministic_entropy", "gaussian_partials"]

#: partial update of ``partition`` in ``round``: the same tensor for every replica.
Partials = Callable[[int, int], torch.Tensor]


@dataclass(frozen=True)
class Silo:
    """How one silo behaves in a round.

    ``drop`` is the stage at which it disappears: ``"keys"`` (never answers the key exchange),
    ``"train"`` (gets the TrainRequest, never uploads), ``"recovery"`` (uploads, then never
    answers the RecoveryRequest). ``delay`` is the virtual time its upload takes to arrive.
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
    """

    def __init__(
        self,
        config: ProtocolConfig,
        *,
        partials: Partials | None = None,
        seed: int = 0,
        secure_entropy: bool = False,
    ) -> None:
        self.config = config
        self.partials = partials or gaussian_partials(config.vector_length, seed=seed)
        self.server = ServerMachine(config)
        self.clients = {
            i: ClientMachine()
            if secure_entropy
            else ClientMachine(entropy=deterministic_entropy(seed * 997 + i))
            for i in range(config.n)
        }
        self._cpu: dict[int, float] = {}
        self._server_cpu = 0.0
        self._up: dict[int, int] = {}
        self._down: dict[int, int] = {}

    # ------------------------------------------------------------------ wiring
    def _to_client(self, msg: M) -> M:
        raw = encode(msg)
        self._down[msg.recipient] = self._down.get(msg.recipient, 0) + len(raw)
        out = decode(raw)
        if type(out) is not type(msg):  # pragma: no cover - the codec round-trips types
            raise RemoteProtocolError("message changed type on the wire")
        return out

    def _to_server(self, msg: Message, refused: list[tuple[int, str]]) -> None:
        raw = encode(msg)
        self._up[msg.sender] = self._up.get(msg.sender, 0) + len(raw)
        t0 = time.thread_time()
        try:
            self.server.receive(decode(raw))
        except RemoteProtocolError as exc:
            refused.append((msg.sender, str(exc)))
        finally:
            self._server_cpu += time.thread_time() - t0

    def _client(self, silo: int, fn: Callable[[], Any]) -> Any:
        t0 = time.thread_time()
        try:
            return fn()
        finally:
            self._cpu[silo] = self._cpu.get(silo, 0.0) + time.thread_time() - t0

    # ------------------------------------------------------------------ stages
    def setup(
        self, behaviour: Mapping[int, Silo] | None = None, silos: list[int] | None = None
    ) -> tuple[int, ...]:
        """Key exchange; returns the silos that did not answer."""
        behaviour = behaviour or {}
        refused: list[tuple[int, str]] = []
        for req in self.server.start_key_exchange(silos):
            if behaviour.get(req.recipient, Silo()).drop == "keys":
                continue
            c = self.clients[req.recipient]
            delivered = self._to_client(req)
            reply = self._client(req.recipient, partial(c.on_key_request, delivered))
            self._to_server(reply, refused)
        if refused:
            raise RemoteProtocolError(f"key exchange refused: {refused}")
        return self.server.close_key_exchange()

    def run_round(self, number: int, behaviour: Mapping[int, Silo] | None = None) -> RoundOutcome:
        """One round: train requests, uploads in virtual-time order, recovery, decode."""
        behaviour = behaviour or {}
        self._cpu, self._server_cpu, self._up, self._down = {}, 0.0, {}, {}
        refused: list[tuple[int, str]] = []
        t0 = time.thread_time()
        requests = self.server.start_round(number)
        self._server_cpu += time.thread_time() - t0
        arrivals = []
        for req in requests:
            b = behaviour.get(req.recipient, Silo())
            if b.drop in ("keys", "train"):
                continue
            silo = req.recipient
            c = self.clients[silo]
            delivered = self._to_client(req)

            task = self._client(silo, lambda c=c, m=delivered: c.on_train_request(m))  # type: ignore[misc]
            # training is not protocol work: the partial updates are made outside the timing
            parts = [self.partials(number, k) for k in task.partitions]
            if b.tamper is not None:
                parts = [b.tamper(k, g) for k, g in zip(task.partitions, parts, strict=True)]
            upload = self._client(silo, lambda c=c, t=task, g=parts: c.upload(t, g))  # type: ignore[misc]
            if b.forge is not None:
                upload = b.forge(upload)
            arrivals.append((b.delay, silo, upload))
        arrivals.sort(key=lambda a: (a[0], a[1]))
        closed = False
        result: RoundResult | RoundAborted | None = None
        for _, _, upload in arrivals:
            self._to_server(upload, refused)  # a late one is refused: the round closed without it
            if not closed and self.server.uploads_ready and self.server.uploads_complete:
                closed = True
                result = self._recover(behaviour, refused)
        if not closed:  # the deadline: close with what arrived
            result = self._recover(behaviour, refused)
        if result is None:  # pragma: no cover - every path above sets it
            raise RuntimeError("round produced no outcome")
        return RoundOutcome(
            result, dict(self._cpu), self._server_cpu, dict(self._up), dict(self._down), refused
        )

    def _recover(
        self, behaviour: Mapping[int, Silo], refused: list[tuple[int, str]]
    ) -> RoundResult | RoundAborted:
        t0 = time.thread_time()
        out = self.server.close_collection()
        if not isinstance(out, RoundAborted):
            self.server.sum_uploads()  # as the Flower driver does, while the requests travel
        self._server_cpu += time.thread_time() - t0
        if isinstance(out, RoundAborted):
            return out
        self._ask(out, behaviour, refused)
        self._settle(behaviour, refused)
        while not self.server.recovery_ready:  # convicted silos: ask again without them
            again = self.server.retry_recovery()
            if again is None:
                break
            t0 = time.thread_time()
            self.server.sum_uploads()  # the survivor set changed: a new sum
            self._server_cpu += time.thread_time() - t0
            self._ask(again, behaviour, refused)
            self._settle(behaviour, refused)
        t0 = time.thread_time()
        try:
            return self.server.finish()
        finally:
            self._server_cpu += time.thread_time() - t0

    def _ask(
        self,
        requests: list[RecoveryRequest],
        behaviour: Mapping[int, Silo],
        refused: list[tuple[int, str]],
    ) -> None:
        """Deliver recovery requests; a silo's typed refusal (an accusation) goes to the server."""
        for req in requests:
            if behaviour.get(req.recipient, Silo()).drop == "recovery":
                continue
            c = self.clients[req.recipient]
            delivered = self._to_client(req)
            liar = behaviour.get(req.recipient, Silo()).accuse
            try:
                if liar is not None:  # the refusal an honest silo sends for a bad share
                    raise RemoteProtocolError("its mask share failed authentication", sender=liar)
                reply: Message = self._client(
                    req.recipient, partial(c.on_recovery_request, delivered)
                )
            except RemoteProtocolError as exc:
                refusal = refusal_for(exc, delivered)
                if refusal is None:
                    raise
                reply = refusal
            forge = behaviour.get(req.recipient, Silo()).forge_recovery
            if forge is not None and isinstance(reply, RecoveryReply):
                reply = forge(reply)
            self._to_server(reply, refused)

    def _settle(self, behaviour: Mapping[int, Silo], refused: list[tuple[int, str]]) -> None:
        """The evidence stage: each accused silo is asked to reveal the disputed share's key;
        a refusal or silence leaves the dispute to :meth:`ServerMachine.close_disputes`."""
        for req in self.server.reveal_requests():
            if behaviour.get(req.recipient, Silo()).withhold:
                continue
            c = self.clients[req.recipient]
            delivered = self._to_client(req)
            try:
                reply = self._client(req.recipient, partial(c.on_reveal_request, delivered))
            except RemoteProtocolError as exc:
                refused.append((req.recipient, str(exc)))
                continue
            self._to_server(reply, refused)
        self.server.close_disputes()

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
