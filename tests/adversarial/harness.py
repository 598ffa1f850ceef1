"""The adversarial-server harness (issue 29): a server that deviates, against honest silos.

The silos are always the real ones; only the server side deviates. Two drivers:

- :class:`MachineAdversary`, sans-IO: the real :class:`~coded_fl.secagg.ServerMachine` and
  real :class:`~coded_fl.secagg.ClientMachine` silos (the in-memory harness of
  ``simulations.runtime.secagg_harness``, every message through the binary codec). The
  adversary takes the honest server's messages and alters, re-addresses, replays or forges
  them, and keeps everything the silos send, late uploads included.
- :class:`AdversarialGrid`, Flower: the real ``CodedSecAgg`` driver and every silo's real
  ClientApp with ``coded_secagg_mod`` around it (the ClientMachine again, as deployed), over
  the fault tests' in-process grid. The transport is the adversary: it may rewrite each train
  message per recipient (the train spec, the user's config record), keeps every protocol
  reply, and can hand any message it kept to a silo again with other contents.

Every test in this package re-enacts one deviation and asserts one of: every honest silo
refuses it with a typed error (its class, and the refusal code where the silo answers with a
typed ``Refusal``), its state unchanged; or the server's view is a function of the sum, plus
exactly what ``docs/protocol.md`` states it learns beyond the sum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Message, RecordDict

from coded_fl.errors import RemoteProtocolError
from coded_fl.pipeline import encode_upload
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.client import ClientMachine, TrainTask, refusal_for
from coded_fl.secagg.messages import (
    Message as ProtocolMessage,
)
from coded_fl.secagg.messages import (
    RefusalCode,
    TrainRequest,
    Upload,
    decode,
    encode,
)
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.server import ServerMachine
from coded_fl.vocabulary import TRAIN_KEY
from coded_fl_flower.records import message_from
from simulations.runtime.secagg_harness import Harness
from tests.unit.test_strategy_faults import FakeGrid

__all__ = ["AdversarialGrid", "MachineAdversary", "ServerView", "copy_message"]

#: Rewrites one train message before its silo gets it: (silo, the protocol request, the Flower
#: message, changed in place).
Rewrite = Callable[[int, TrainRequest, Message], None]


# ----------------------------------------------------------------------------- sans-IO
class MachineAdversary:
    """A deviating server over the real machines.

    Parameters
    ----------
    config
        The run's configuration.
    seed
        Seeds the silos' entropy and the partial updates (the in-memory harness's).
    policy
        Silo index -> its policy (identity, trusted keys, ...), set before the key exchange.
    """

    def __init__(
        self,
        config: ProtocolConfig,
        *,
        seed: int = 0,
        policy: Callable[[int], ClientPolicy] | None = None,
    ) -> None:
        self.h = Harness(config, seed=seed)
        if policy is not None:
            for i, machine in self.clients.items():
                machine.policy = policy(i)
        self.h.setup()

    @property
    def config(self) -> ProtocolConfig:
        return self.h.config

    @property
    def server(self) -> ServerMachine:
        return self.h.server

    @property
    def clients(self) -> dict[int, ClientMachine]:
        return self.h.clients

    def honest_rounds(self, *numbers: int) -> None:
        """Rounds run by the book (key dealing, say) before the adversary acts."""
        for r in numbers:
            res = self.h.run_round(r).result
            assert isinstance(res, RoundResult), res

    def deliver(self, silo: int, msg: ProtocolMessage) -> Any:
        """``msg`` through the codec to ``silo``; what its machine returns (or raises)."""
        return self.clients[silo].receive(decode(encode(msg)))

    def task_and_upload(
        self,
        silo: int,
        request: TrainRequest,
        *,
        tamper: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[TrainTask, Upload]:
        """``silo`` accepts ``request``, trains its partitions (``tamper``: a replica that
        differs) and uploads."""
        task = self.deliver(silo, request)
        parts = self.partials(task, tamper=tamper)
        return task, self.clients[silo].upload(task, parts)

    def partials(
        self, task: TrainTask, *, tamper: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        parts = [self.h.partials(task.round, k) for k in task.partitions]
        if tamper is not None:
            parts = [tamper(k, g) for k, g in zip(task.partitions, parts, strict=True)]
        return parts

    def coded(self, task: TrainTask, partials: list[torch.Tensor]) -> np.ndarray:
        """The silo's coded update c_i without a mask: an independent oracle of what an
        upload hides (the same quantization, code row and rounding keys)."""
        cfg = self.config
        c = encode_upload(
            [g.reshape(-1) for g in partials],
            list(task.coefficients),
            list(task.rounding_keys),
            cfg.quantization,
            cfg.field,
        )
        return c.numpy().astype(np.int64)

    def refuses(
        self, silo: int, msg: ProtocolMessage, error: type[RemoteProtocolError]
    ) -> tuple[RemoteProtocolError, RefusalCode | None]:
        """``silo`` refuses ``msg`` with exactly ``error`` and changes nothing; the error and
        the typed refusal code it answers with (None: a Flower error reply, no signal)."""
        before = self.clients[silo].to_bytes()
        with pytest.raises(error) as info:
            self.deliver(silo, msg)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
        assert self.clients[silo].to_bytes() == before, "a refused message changed the state"
        refusal = refusal_for(info.value, msg)
        return info.value, None if refusal is None else refusal.code


# ----------------------------------------------------------------------------- Flower
def copy_message(msg: Message, node: int, **records: Any) -> Message:
    """A new train message to ``node`` with ``msg``'s content, ``records`` replaced."""
    content = RecordDict({**dict(msg.content.items()), **records})
    return Message(content, dst_node_id=node, message_type=msg.metadata.message_type)


@dataclass
class AdversarialGrid(FakeGrid):
    """The fault tests' grid (every silo's real ClientApp with ``coded_secagg_mod``) with a
    deviating transport: ``rewrite`` may change each train message before its silo gets it;
    ``sent`` keeps every train message as delivered, ``replies`` every protocol reply (or
    error text) per silo, ``uploads`` every upload by round and silo, late ones included."""

    rewrite: Rewrite | None = None
    sent: dict[int, list[Message]] = field(default_factory=dict)
    answers: dict[int, list[ProtocolMessage | str]] = field(default_factory=dict)
    uploads: dict[int, dict[int, Upload]] = field(default_factory=dict)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        msgs = list(messages)
        for msg in msgs:
            silo = msg.metadata.dst_node_id - 100
            req = message_from(msg.content) if "codedfl.msg" in msg.content else None
            if isinstance(req, TrainRequest) and self.rewrite is not None:
                self.rewrite(silo, req, msg)
            self.sent.setdefault(silo, []).append(copy_message(msg, 100 + silo))
        ids = list(super().push_messages(msgs))
        for mid, msg in zip(ids, msgs, strict=True):
            reply, silo = self.replies.get(mid), msg.metadata.dst_node_id - 100
            if reply is None:
                continue
            got = reply.error.reason if reply.has_error() else message_from(reply.content)
            self.answers.setdefault(silo, []).append(got)
            if isinstance(got, Upload):
                self.uploads.setdefault(got.round, {})[got.sender] = got
        return ids

    def ask(self, silo: int, original: Message, **train: object) -> ProtocolMessage:
        """``silo``'s ClientApp answers ``original`` again, its train spec changed by
        ``train``; a refusal the mod raises propagates with its type (Flower would turn it
        into an error reply)."""
        records: dict[str, Any] = {}
        if train:
            spec = dict(original.content[TRAIN_KEY].items())
            records[TRAIN_KEY] = ConfigRecord({**spec, **train})  # type: ignore[dict-item]
        msg = copy_message(original, 100 + silo, **records)
        return message_from(self.app(msg, self.contexts[100 + silo]).content)

    def requests(self, silo: int) -> list[tuple[TrainRequest, Message]]:
        """The train requests ``silo`` was sent, decoded, with the messages that carried them."""
        out = []
        for msg in self.sent.get(silo, []):
            req = message_from(msg.content)
            if isinstance(req, TrainRequest):
                out.append((req, msg))
        return out


def change_record(msg: Message, key: str, **entries: object) -> None:
    """Replace record ``key`` of ``msg`` by a copy with ``entries`` changed (in place)."""
    record = dict(msg.content[key].items()) if key in msg.content else {}
    msg.content[key] = ConfigRecord({**record, **entries})  # type: ignore[dict-item]


# ----------------------------------------------------------------------------- the view
@dataclass
class ServerView:
    """Every weight-row sum the real server machine unmasks (its view of a decoded round): per
    decode, the round, S, the weight rows and the unmasked sums (row 0 the aggregate, the
    others the group comparisons or parity checks)."""

    decoded: list[tuple[int, tuple[int, ...], np.ndarray, np.ndarray]] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = ServerMachine._decode

        def spy(machine: ServerMachine, rnd: Any, weights: np.ndarray, sums: Any) -> Any:
            rows = np.asarray(torch.as_tensor(sums).numpy(), dtype=np.int64).copy()
            self.decoded.append((rnd.number, tuple(rnd.survivors), weights.copy(), rows))
            return original(machine, rnd, weights, sums)

        monkeypatch.setattr(ServerMachine, "_decode", spy)
