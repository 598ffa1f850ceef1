"""The silo machine's state: stages, the train task, and the core every phase shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from coded_fl.crypto import KeyPair, pairwise_key
from coded_fl.errors import (
    LocalProtocolError,
    NeedsKeysError,
    RemoteProtocolError,
    UntrustedKeyError,
)
from coded_fl.prg import Entropy
from coded_fl.quantize import QuantizationStats, RoundingKey
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import (
    SERVER,
    KeyReply,
    Message,
    RecoveryReply,
    RefusalCode,
    Reveal,
    ViewReply,
)
from coded_fl.secagg.policy import ClientPolicy

#: Rounds are below 2**63 (they bind the sealed shares' associated data).
MAX_ROUND = 2**63
#: Rounds a silo remembers having trained without a recovery that verified them (see
#: :meth:`ClientMachine.on_train_request`); beyond this the oldest is forgotten and every round
#: up to it is refused from then on.
MAX_UNVERIFIED_ROUNDS = 32
#: The label of a refusal that says the silo holds no keys for the server's session (a
#: restarted node, or one that missed the key exchange): the server reruns the key exchange.
NEEDS_KEYS = RefusalCode.NEEDS_KEYS.label


class ClientStage(str, Enum):
    """A silo's stage: NEW (no keys), then keyed stages per round."""

    NEW = "new"
    KEYED = "keyed"
    TRAINING = "training"
    UPLOADED = "uploaded"
    RECOVERED = "recovered"


@dataclass(frozen=True)
class TrainTask:
    """What the silo must compute in round ``round``: one partial update per partition."""

    round: int
    silo: int
    partitions: tuple[int, ...]
    coefficients: tuple[int, ...]
    rounding_keys: tuple[RoundingKey, ...]
    #: :func:`~coded_fl.secagg.derive.request_digest` of the TrainRequest (binds the shares)
    request: bytes = b""
    #: the round uses the group-aligned mask (one round trip; ``masking="aligned"``)
    aligned: bool = False
    #: edge keys to seal in the upload, as the request asked: (q, h, recipient)
    deal: tuple[tuple[int, int, int], ...] = ()


#: What :meth:`ClientMachine.receive` returns.
Reaction = KeyReply | TrainTask | RecoveryReply | Reveal | ViewReply


class MachineCore:
    """The state every phase of :class:`~coded_fl.secagg.client.machine.ClientMachine` works on
    (set in its ``__init__``, restored by ``from_bytes``), and the checks they share: the stage,
    a request's header and trust, the silo's identity and pairwise keys."""

    _entropy: Entropy
    policy: ClientPolicy
    stage: ClientStage
    config: ProtocolConfig | None
    silo: int | None
    _keys: KeyPair | None
    roster: dict[int, bytes]
    round: int
    recovered_round: int
    trained: tuple[int, ...]
    fixed_weight: float
    floor: int
    _pairwise: dict[tuple[bytes, int, bytes], bytes]
    uploaded: tuple[int, ...]
    inputs: dict[int, bytes]
    viewed: dict[int, tuple[int, ...]]
    edge_keys: dict[tuple[int, int], bytes]
    stats: QuantizationStats
    _table: dict[tuple[ClientStage, type[Message]], Callable[[Any], Reaction]]

    def _identity(self) -> tuple[ProtocolConfig, int, KeyPair]:
        """Configuration, silo index and key pair; only after a KeyRequest was accepted."""
        if self.config is None or self.silo is None or self._keys is None:
            raise LocalProtocolError("this silo has no configuration or keys yet")
        return self.config, self.silo, self._keys

    def _require(self, *stages: ClientStage) -> None:
        if self.stage not in stages:
            raise LocalProtocolError(
                f"silo {self.silo}: cannot do that in stage {self.stage.value} "
                f"(allowed: {', '.join(s.value for s in stages)})"
            )

    def _check_header(self, msg: Message) -> ProtocolConfig:
        cfg = self.config
        if cfg is None or self.stage == ClientStage.NEW:
            raise NeedsKeysError(
                f"{NEEDS_KEYS}: this silo has no keys for the run (a restarted node?); the "
                "server must run the key exchange with it first",
                sender=SERVER,
            )
        if msg.sender != SERVER:
            raise RemoteProtocolError(
                f"{type(msg).__name__} from silo {msg.sender}: only the server sends one",
                sender=SERVER,
            )
        if msg.digest != cfg.digest:
            raise NeedsKeysError(
                f"{NEEDS_KEYS}: message is for another configuration or session (digest "
                "mismatch): this silo missed the key exchange of the server's session",
                sender=SERVER,
            )
        if msg.recipient != self.silo:
            raise RemoteProtocolError(
                f"message addressed to silo {msg.recipient}, this is silo {self.silo}",
                sender=SERVER,
            )
        return cfg

    def _check_trust(
        self,
        cfg: ProtocolConfig,
        entries: Sequence[tuple[int, bytes]],
        credentials: Sequence[tuple[bytes, bytes]],
    ) -> None:
        """With a trust roster, refuse (:class:`UntrustedKeyError`) unless every peer entry is
        endorsed by a trusted identity for its silo index, one identity per index; before
        anything is derived from any key. Without one, nothing is checked."""
        trust = self.policy.trusted
        if trust is None:
            return
        creds = list(credentials) or [(b"", b"")] * len(entries)
        if len(creds) != len(entries):
            raise RemoteProtocolError(
                f"{len(creds)} credentials for {len(entries)} relayed keys", sender=SERVER
            )
        seen: dict[bytes, int] = {}
        for (peer, key), (identity, signature) in zip(entries, creds, strict=True):
            if peer == self.silo:  # its own entry: its own key pair's, nothing else
                if self._keys is None or key != self._keys.public_bytes:
                    raise NeedsKeysError(
                        f"{NEEDS_KEYS}: a relayed entry for this silo holds another key than "
                        "its current one (it rekeyed since, or the key was substituted)",
                        sender=SERVER,
                    )
                continue
            trust.check(
                digest=cfg.digest,
                run=cfg.run_bytes,
                silo=peer,
                public_key=key,
                identity=identity,
                signature=signature,
            )
            other = seen.setdefault(identity, peer)
            if other != peer:
                raise UntrustedKeyError(
                    f"codedfl-untrusted-key: one identity endorses the keys of silos {other} "
                    f"and {peer}; each site must hold its own identity key "
                    "(codedfl.identity-key), or the server relayed a substituted key",
                    sender=SERVER,
                )

    def _key_for(self, peer: int, roster: dict[int, bytes] | None = None) -> bytes:
        """The sealing key shared with ``peer`` (edge keys travel under it)."""
        pub = (self.roster if roster is None else roster).get(peer)
        if pub is None:
            raise RemoteProtocolError(f"silo {peer} is not in the roster", sender=SERVER)
        cached = self._pairwise.get((b"", peer, pub))
        if cached is None:
            if self._keys is None or self.config is None or self.silo is None:
                raise LocalProtocolError("no key pair yet")
            cached = pairwise_key(
                self._keys, pub, run_id=self.config.run_bytes, me=self.silo, peer=peer
            )
            self._pairwise[(b"", peer, pub)] = cached
        return cached
