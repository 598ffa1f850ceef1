"""The silo machine: its phases put together, its constructor, its one entry point ``receive``
with the transition table, and its persistence (``to_bytes`` / ``from_bytes``)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from coded_fl.crypto import KeyPair
from coded_fl.errors import LocalProtocolError, RemoteProtocolError
from coded_fl.prg import Entropy
from coded_fl.quantize import QuantizationStats
from coded_fl.secagg.client.keys import KeysPhase
from coded_fl.secagg.client.recovery import RecoveryPhase
from coded_fl.secagg.client.reveal import RevealPhase
from coded_fl.secagg.client.state import ClientStage, Reaction
from coded_fl.secagg.client.train import TrainPhase
from coded_fl.secagg.client.upload import UploadPhase
from coded_fl.secagg.client.views import ViewPhase
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.derive import request_digest
from coded_fl.secagg.messages import (
    SERVER,
    KeyRequest,
    Message,
    RecoveryRequest,
    RevealRequest,
    TrainRequest,
    ViewRequest,
)
from coded_fl.secagg.policy import ClientPolicy


class ClientMachine(KeysPhase, TrainPhase, UploadPhase, RecoveryPhase, RevealPhase, ViewPhase):
    """One silo. ``silo`` is its index 0..n-1 (taken from the first KeyRequest if None).

    Parameters
    ----------
    entropy
        The source of secret randomness (keys, mask seeds): the OS CSPRNG unless a test
        passes a seeded one.
    policy
        The silo's minimums on the configurations it accepts (default: none).
    """

    def __init__(
        self, *, entropy: Entropy = os.urandom, policy: ClientPolicy | None = None
    ) -> None:
        self._entropy = entropy
        self.policy = ClientPolicy() if policy is None else policy
        self.stage = ClientStage.NEW
        self.config: ProtocolConfig | None = None
        self.silo: int | None = None
        self._keys: KeyPair | None = None
        self.roster: dict[int, bytes] = {}
        self.round = 0  # the latest round whose TrainRequest was accepted
        self.recovered_round = 0  # the latest round answered with a RecoveryReply
        # rounds trained but not yet verified by a recovery, and the floor at or below which
        # every TrainRequest is refused (see on_train_request)
        self.trained: tuple[int, ...] = ()
        #: the fixed weight bound (max-weight) of the run, once a request named one (0: none yet)
        self.fixed_weight = 0.0
        self.floor = 0
        self._pairwise: dict[tuple[bytes, int, bytes], bytes] = {}
        self.uploaded: tuple[int, ...] = ()  # rounds uploaded (a second upload is refused)
        # per round uploaded, the digest of the inputs it trained on (binds its shares; the
        # recovery checks every survivor's shares against this silo's own digest)
        self.inputs: dict[int, bytes] = {}
        # per round, the survivor set this silo signed last (survivor views): it answers a
        # recovery request only for that set
        self.viewed: dict[int, tuple[int, ...]] = {}
        self.edge_keys: dict[tuple[int, int], bytes] = {}  # masking="aligned": secret
        self.stats = QuantizationStats()
        # in stage NEW a train or recovery request meets _check_header, which raises NeedsKeysError
        keyed = (
            ClientStage.KEYED,
            ClientStage.TRAINING,
            ClientStage.UPLOADED,
            ClientStage.RECOVERED,
        )
        self._table: dict[tuple[ClientStage, type[Message]], Callable[[Any], Reaction]] = {
            (ClientStage.NEW, KeyRequest): self.on_key_request,
            (ClientStage.NEW, TrainRequest): self._check_header,  # type: ignore[dict-item]
            (ClientStage.NEW, RecoveryRequest): self._check_header,  # type: ignore[dict-item]
            (ClientStage.NEW, RevealRequest): self._check_header,  # type: ignore[dict-item]
            (ClientStage.NEW, ViewRequest): self._check_header,  # type: ignore[dict-item]
        }
        for stage in keyed:
            self._table[(stage, KeyRequest)] = self.on_key_request
            self._table[(stage, TrainRequest)] = self.on_train_request
            self._table[(stage, RecoveryRequest)] = self.on_recovery_request
            self._table[(stage, RevealRequest)] = self.on_reveal_request
            self._table[(stage, ViewRequest)] = self.on_view_request

    def receive(self, msg: Message) -> Reaction:
        """Take one server message: the one entry point of the machine.

        Parameters
        ----------
        msg
            A decoded server message.

        Returns
        -------
        KeyReply | TrainTask | RecoveryReply
            The reply to send, or for a TrainRequest the :class:`TrainTask` to train and hand
            to :meth:`upload`.

        Raises
        ------
        NeedsKeysError
            The silo has no keys for the server's session (answer with :func:`refusal_for`).
        RemoteProtocolError
            The message is refused (malformed, replayed, for another silo, ...); nothing
            changed.
        """
        handler = self._table.get((self.stage, type(msg)))
        if handler is None:
            raise RemoteProtocolError(
                f"a silo does not accept {type(msg).__name__} (stage {self.stage.value})",
                sender=SERVER,
            )
        return handler(msg)

    def __repr__(self) -> str:  # no key material
        return f"ClientMachine(silo={self.silo}, stage={self.stage.value}, round={self.round})"

    @property
    def key_id(self) -> str | None:
        """A public name of this silo's current key-agreement key (hex of the first 16 bytes
        of its SHA-256; None before keys): new with every key exchange."""
        if self._keys is None:
            return None
        return hashlib.sha256(self._keys.public_bytes).hexdigest()[:32]

    def to_bytes(self) -> bytes:
        """The whole state, keys included: keep it on the silo only (e.g. Flower context.state)."""
        state = {
            "stage": self.stage.value,
            "config": None if self.config is None else self.config.to_json().decode(),
            "silo": self.silo,
            "private": None if self._keys is None else self._keys.private_bytes.hex(),
            "roster": [[s, k.hex()] for s, k in sorted(self.roster.items())],
            "round": self.round,
            "recovered_round": self.recovered_round,
            "trained": list(self.trained),
            "uploaded": list(self.uploaded),
            "inputs": [[r, d.hex()] for r, d in sorted(self.inputs.items())],
            "viewed": [[r, list(s)] for r, s in sorted(self.viewed.items())],
            "floor": self.floor,
            "edges": [[q, h, k.hex()] for (q, h), k in sorted(self.edge_keys.items())],
            "fixed_weight": self.fixed_weight,
            "task": None,
        }
        task = getattr(self, "_task", None)
        if task is not None and self.stage == ClientStage.TRAINING:
            state["task"] = task.round
        return json.dumps(state).encode()

    @classmethod
    def from_bytes(
        cls, raw: bytes, *, entropy: Entropy = os.urandom, policy: ClientPolicy | None = None
    ) -> ClientMachine:
        """The machine :meth:`to_bytes` saved.

        Parameters
        ----------
        raw
            The saved state.
        entropy, policy
            As for the constructor (neither is saved).

        Returns
        -------
        ClientMachine

        Raises
        ------
        LocalProtocolError
            If the state is unreadable (the message names no secret).
        """
        try:
            state = json.loads(raw)
            m = cls(entropy=entropy, policy=policy)
            m.stage = ClientStage(state["stage"])
            m.config = (
                None
                if state["config"] is None
                else ProtocolConfig.from_json(state["config"].encode())
            )
            m.silo = state["silo"]
            m._keys = (
                None
                if state["private"] is None
                else KeyPair.from_private_bytes(bytes.fromhex(state["private"]))
            )
            m.roster = {int(s): bytes.fromhex(k) for s, k in state["roster"]}
            m.round = int(state["round"])
            m.recovered_round = int(state["recovered_round"])
            # a state saved before unverified rounds were tracked: its round is the floor
            m.floor = int(state.get("floor", m.round))
            m.trained = tuple(int(r) for r in state.get("trained", ()))
            m.uploaded = tuple(int(r) for r in state.get("uploaded", ()))
            m.inputs = {int(r): bytes.fromhex(d) for r, d in state.get("inputs", ())}
            m.viewed = {int(r): tuple(int(i) for i in s) for r, s in state.get("viewed", ())}
            m.edge_keys = {(int(q), int(h)): bytes.fromhex(k) for q, h, k in state.get("edges", ())}
            m.fixed_weight = float(state.get("fixed_weight", 0.0))
        except (ValueError, KeyError, TypeError, RemoteProtocolError) as exc:
            raise LocalProtocolError(
                f"stored client state is unreadable: {type(exc).__name__}"
            ) from None
        if m.stage == ClientStage.TRAINING and m.config is not None and m.silo is not None:
            request = request_digest(m.config.digest, m.round, tuple(sorted(m.roster.items())))
            m._task = m._task_for(m.round, request)
        return m
