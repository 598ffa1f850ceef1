"""The silo's side of the protocol as a sans-IO state machine.

Theory of operation (see ``docs/protocol.md`` for the whole protocol):

1. ``KeyRequest`` -> :meth:`ClientMachine.on_key_request` -> ``KeyReply``: learn the public
   configuration, make an X25519 key pair for the run.
2. ``TrainRequest`` (round r, roster of public keys) -> :meth:`on_train_request` returns a
   :class:`TrainTask` (which partitions to train, with which rounding keys); the caller trains
   them and hands the partial updates to :meth:`upload`, which quantizes, encodes with the
   silo's gradient-code row, masks, and shares the mask (privacy T, threshold U): the U shares
   of its derived set are derived from key agreement (:mod:`coded_fl.secagg.derive`), the mask
   and the other n - U shares follow from them, and only those are sealed -> ``Upload``
   (a round is uploaded at most once: :class:`~coded_fl.errors.MaskReuseError`).
3. ``RecoveryRequest`` (round r, survivors S, weight rows, the sealed shares the survivors sent
   this silo, and the context and tag of each share derived for it) ->
   :meth:`on_recovery_request` checks that row 0 is exactly the public code's decoding vector
   for S and every other row a parity check of the code on S, opens or rederives (and
   key-confirms) each share, answers at most once per round, and returns the weighted sums of
   the shares -> ``RecoveryReply``. A share it cannot use makes it refuse with an accusation of
   its sender (signed with its identity key, if it has one).
4. ``RevealRequest`` (an accusation of this silo's share for one recipient) ->
   :meth:`on_reveal_request` -> ``Reveal``: the ephemeral scalar of that one share, recomputed
   from the silo's private key and the upload's context, after checking that the relayed
   entry holds the ephemeral key it made for that recipient and, with a trust roster, that
   the accuser signed the accusation (:mod:`coded_fl.secagg.evidence`). Nothing changes.

Every share (derived or sealed) has its own ephemeral X25519 key, whose public half travels in
the share's entry of the upload; with an identity key the silo signs every entry. Every share's
key is bound to the digest of the round's training inputs as the silo computing it holds it
(the sender its own at upload, the recipient its own, kept per uploaded round, at recovery),
so a silo sent other inputs than the others cannot take part in one recovery with them.

With ``masking="aligned"`` (:mod:`coded_fl.secagg.aligned`) a TrainRequest may also relay edge
keys sealed for this silo and ask it to deal edge keys to other members of its edges' groups
(both checked against the public groups before anything changes); the upload carries the dealt
keys and a confirmation tag per edge key held. In a group-masked round (``aligned`` in the
request) the upload is the coded update under the group mask alone: no shares, and no
recovery request follows.

One entry point, :meth:`ClientMachine.receive`, dispatches through a transition table
``(stage, message type) -> handler``; a pair not in the table is refused with
:class:`RemoteProtocolError`. In stage NEW a train or recovery request raises
:class:`NeedsKeysError`, which :func:`refusal_for` turns into the typed :class:`Refusal` the
server rekeys on (an accusation of another silo's share travels the same way). Stages and
transitions (anything else raises and changes nothing)::

    NEW     --KeyRequest-->        KEYED
    KEYED   --TrainRequest(r)-->   TRAINING(r)        (r above the floor, not trained before)
    TRAINING(r) --upload()-->      UPLOADED(r)
    any keyed stage --RecoveryRequest(r >= current round, not yet answered)--> RECOVERED(r)
    any keyed stage --TrainRequest(r' > r)--> TRAINING(r')
    any keyed stage --KeyRequest(same config)--> same stage (the same public key again)
    any keyed stage --RevealRequest(its own share's entry)--> same stage (a Reveal)

The state (keys included) round-trips through :meth:`to_bytes` / :meth:`from_bytes` so a Flower
ClientApp can keep it in ``context.state`` between messages. It never leaves the silo.

Length: one state machine: its handlers, the upload and the persistence share the machine's
private state (about 640 lines of code; the key derivation of seed-derived shares lives in
:mod:`coded_fl.secagg.derive`, the interpolation in :mod:`coded_fl.secagg.sharing`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import torch

from coded_fl.crypto import KEY_BYTES, KeyPair, check_public_key, pairwise_key, seal
from coded_fl.errors import (
    ExceedsLimitsError,
    InputError,
    KeyConfirmationError,
    LocalProtocolError,
    MaskReuseError,
    NeedsKeysError,
    RemoteProtocolError,
    UntrustedKeyError,
)
from coded_fl.pipeline import encode_upload
from coded_fl.prg import SEED_BYTES, Entropy, MaskStream, fresh_seed
from coded_fl.quantize import QuantizationStats, RoundingKey
from coded_fl.secagg.aligned import (
    EDGE_KEY_BYTES,
    edge_silos,
    edge_tag,
    group_mask_streams,
    incident,
    mask_context,
    open_edge_key,
    seal_edge_key,
)
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.derive import (
    CONFIRM_BYTES,
    CONTEXT_BYTES,
    NONCE_BYTES,
    request_digest,
    share_context,
    tags_match,
)
from coded_fl.secagg.evidence import (
    DERIVED,
    SEALED,
    Entry,
    accusation_statement,
    ephemeral_secret,
    exchange,
    open_share,
    public_of,
    sealed_payload_bytes,
    share_purpose,
    share_secret,
    share_statement,
)
from coded_fl.secagg.identity import verify_signature
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
from coded_fl.secagg.policy import ClientPolicy
from coded_fl.secagg.verify import check_weight_rows

__all__ = [
    "NEEDS_KEYS",
    "ClientMachine",
    "ClientStage",
    "TrainTask",
    "misconfigured",
    "refusal_for",
    "weight_bound",
]

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
Reaction = KeyReply | TrainTask | RecoveryReply | Reveal


def refusal_for(error: RemoteProtocolError, request: Message) -> Refusal | None:
    """The typed refusal that answers ``request`` when the machine raised ``error``, if any.

    Four refusals are signals the server acts on: :class:`NeedsKeysError` (rekey this silo), a
    share from another silo that failed authentication (the refusal accuses that silo),
    :class:`~coded_fl.errors.ExceedsLimitsError` (a configuration above the silo's limits:
    code ``MISCONFIGURED``) and :class:`~coded_fl.errors.UntrustedKeyError` (a relayed key the
    silo's trusted keys do not vouch for: code ``UNTRUSTED_KEY``). Any other error is not a
    signal: None (the adapter reports it as an error).

    Parameters
    ----------
    error
        What :meth:`ClientMachine.receive` raised.
    request
        The server message that was refused.

    Returns
    -------
    Refusal | None
    """
    if isinstance(error, NeedsKeysError):
        code, accused = RefusalCode.NEEDS_KEYS, None
    elif isinstance(error, UntrustedKeyError):
        code, accused = RefusalCode.UNTRUSTED_KEY, None
    elif isinstance(error, ExceedsLimitsError):
        code, accused = RefusalCode.MISCONFIGURED, None
    elif error.sender is not None and error.sender != SERVER:
        code, accused = RefusalCode.ACCUSES, int(error.sender)
    else:
        return None
    return Refusal(
        digest=request.digest,
        round=request.round,
        sender=request.recipient,
        recipient=SERVER,
        code=code,
        accused=accused,
        detail=str(error),
        evidence=error.evidence if code == RefusalCode.ACCUSES else b"",
    )


def misconfigured(request: Message, detail: str) -> Refusal:
    """The typed refusal of a silo that cannot take part because of a setting.

    Parameters
    ----------
    request
        The server message the silo cannot serve.
    detail
        What is wrong and which setting to change (no secret).

    Returns
    -------
    Refusal
        Code ``MISCONFIGURED``.
    """
    return Refusal(
        digest=request.digest,
        round=request.round,
        sender=request.recipient,
        recipient=SERVER,
        code=RefusalCode.MISCONFIGURED,
        detail=detail,
    )


def weight_bound(request: Message, detail: str, bound: int) -> Refusal:
    """The typed refusal of a silo whose partition holds more examples than the round's
    automatic weight bound (the silo's state is left as before the round).

    Parameters
    ----------
    request
        The train request the silo cannot serve with that bound.
    detail
        What happened (no secret).
    bound
        The smallest power of two that holds the partition's weight.

    Returns
    -------
    Refusal
        Code ``WEIGHT_BOUND``.
    """
    return Refusal(
        digest=request.digest,
        round=request.round,
        sender=request.recipient,
        recipient=SERVER,
        code=RefusalCode.WEIGHT_BOUND,
        detail=detail,
        bound=bound,
    )


class ClientMachine:
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
        }
        for stage in keyed:
            self._table[(stage, KeyRequest)] = self.on_key_request
            self._table[(stage, TrainRequest)] = self.on_train_request
            self._table[(stage, RecoveryRequest)] = self.on_recovery_request
            self._table[(stage, RevealRequest)] = self.on_reveal_request

    # ------------------------------------------------------------------ dispatch
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

    # ------------------------------------------------------------------ helpers
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

    def _sender_secret(
        self,
        cfg: ProtocolConfig,
        recipient: int,
        round_: int,
        context: bytes,
        kind: bytes,
        roster: dict[int, bytes],
        inputs: bytes,
    ) -> tuple[bytes, bytes]:
        """The ephemeral public key and the key material of the share this silo leaves for
        ``recipient`` in the upload of ``context`` (:mod:`coded_fl.secagg.evidence`);
        ``inputs``: this silo's own digest of the round's training inputs."""
        _, silo, keys = self._identity()
        pub = roster.get(recipient)
        if pub is None:
            raise RemoteProtocolError(f"silo {recipient} is not in the roster", sender=SERVER)
        e = ephemeral_secret(
            keys.private_bytes,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=silo,
            recipient=recipient,
            context=context,
        )
        ephemeral = public_of(e)
        secret = share_secret(
            exchange(e, pub),
            run_id=cfg.run_bytes,
            round_=round_,
            sender=silo,
            recipient=recipient,
            ephemeral=ephemeral,
            recipient_key=pub,
            context=context if kind == DERIVED else b"",
            kind=kind,
            inputs=inputs,
        )
        return ephemeral, secret

    def _recipient_secret(
        self,
        cfg: ProtocolConfig,
        sender: int,
        round_: int,
        entry: Entry,
        context: bytes,
        kind: bytes,
        inputs: bytes,
    ) -> bytes:
        """The key material of the share ``sender`` left for this silo, from its entry, with
        ``inputs``: this silo's *own* digest of the round's training inputs (never one the
        server relays)."""
        _, silo, keys = self._identity()
        try:
            dh = exchange(keys.private_bytes, entry.ephemeral)
        except InputError:  # a small-order point: no scalar's public key, so the sender's lie
            raise RemoteProtocolError(
                f"its share for silo {silo} holds an unusable ephemeral key", sender=sender
            ) from None
        return share_secret(
            dh,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=sender,
            recipient=silo,
            ephemeral=entry.ephemeral,
            recipient_key=keys.public_bytes,
            context=context if kind == DERIVED else b"",
            kind=kind,
            inputs=inputs,
        )

    def _entry(
        self,
        cfg: ProtocolConfig,
        recipient: int,
        round_: int,
        kind: bytes,
        context: bytes,
        ephemeral: bytes,
        payload: bytes,
    ) -> bytes:
        """An upload's entry for one share, signed when this silo holds an identity."""
        me, silo = self.policy.identity, self.silo
        signature = b""
        if me is not None and silo is not None:
            signature = me.sign(
                share_statement(
                    digest=cfg.digest,
                    run_id=cfg.run_bytes,
                    round_=round_,
                    sender=silo,
                    recipient=recipient,
                    kind=kind,
                    context=context if kind == DERIVED else b"",
                    ephemeral=ephemeral,
                    recipient_key=self.roster[recipient],
                    payload=payload,
                )
            )
        return Entry(ephemeral, payload, signature).to_bytes()

    def _check_statement(
        self,
        cfg: ProtocolConfig,
        round_: int,
        sender: int,
        kind: bytes,
        context: bytes,
        entry: Entry,
        identity: bytes,
    ) -> None:
        """With the sender's identity relayed (and checked against the trust roster, if any),
        its signature of the entry must verify: the server checked it on arrival, so an entry
        that fails was altered in relay (blamed on the server, never an accusation)."""
        if not identity:
            return
        _, silo, keys = self._identity()
        statement = share_statement(
            digest=cfg.digest,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=sender,
            recipient=silo,
            kind=kind,
            context=context if kind == DERIVED else b"",
            ephemeral=entry.ephemeral,
            recipient_key=keys.public_bytes,
            payload=entry.payload,
        )
        if not verify_signature(identity, statement, entry.signature):
            raise RemoteProtocolError(
                f"the relayed entry of silo {sender}'s share does not carry its valid signature "
                "(altered in relay)",
                sender=SERVER,
            )

    # ------------------------------------------------------------------ 1. keys
    def on_key_request(self, msg: KeyRequest) -> KeyReply:
        """Learn the configuration and answer with this run's public key.

        Everything is checked before any state changes: the sender is the server, the round
        is 0, the digest matches the configuration, the configuration meets the silo's
        :class:`~coded_fl.secagg.policy.ClientPolicy` (its maxima on n, K and d on the raw
        JSON, before the configuration is built) and the index is in range (and the pinned
        one, if the policy pins one).

        Parameters
        ----------
        msg
            The server's key request: the public configuration and this silo's index.
        """
        if msg.sender != SERVER:
            raise RemoteProtocolError(
                f"KeyRequest from silo {msg.sender}: only the server sends one", sender=SERVER
            )
        if msg.round != 0:
            raise RemoteProtocolError(
                f"KeyRequest for round {msg.round}: key requests carry round 0", sender=SERVER
            )
        self.policy.check_size(msg.config)  # before building anything proportional to n, K, d
        cfg = ProtocolConfig.from_json(msg.config)
        if cfg.digest != msg.digest:
            raise RemoteProtocolError(
                "KeyRequest digest does not match its configuration", sender=SERVER
            )
        if not 0 <= msg.recipient < cfg.n:
            raise RemoteProtocolError(
                f"silo index {msg.recipient} is not in 0..{cfg.n - 1}", sender=SERVER
            )
        self.policy.check(cfg, msg.recipient)
        same_run = self.config is not None and self.config.digest == cfg.digest
        if same_run and msg.recipient != self.silo:
            raise RemoteProtocolError(
                f"KeyRequest re-assigns this silo from {self.silo} to {msg.recipient}",
                sender=SERVER,
            )
        if not same_run:  # a new run (or the first): fresh keys, fresh counters
            self._keys = KeyPair.from_private_bytes(fresh_seed(self._entropy))
            self.config, self.silo = cfg, msg.recipient
            self.roster, self._pairwise, self.edge_keys = {}, {}, {}
            self.round = self.recovered_round = self.floor = 0
            self.trained = self.uploaded = ()
            self.fixed_weight = 0.0
            self.stage = ClientStage.KEYED
        _, silo, keys = self._identity()
        me = self.policy.identity
        return KeyReply(
            digest=cfg.digest,
            round=0,
            sender=silo,
            recipient=SERVER,
            public_key=keys.public_bytes,
            identity=b"" if me is None else me.public_bytes,
            signature=b""
            if me is None
            else me.endorse(
                digest=cfg.digest, run=cfg.run_bytes, silo=silo, public_key=keys.public_bytes
            ),
        )

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

    # ------------------------------------------------------------------ 2. train + upload
    def on_train_request(self, msg: TrainRequest) -> TrainTask:
        """Accept round ``msg.round``; return what to train.

        A silo trains a round at most once: it refuses a round it trained and any round at or
        below its *floor*, the last round whose recovery it answered (a recovery verifies a
        round: the shares of every survivor authenticate for it, so the other silos trained
        it too). A round it cannot verify yet (e.g. round 99 from a buggy server, or a replay
        from elsewhere) does not move the floor: earlier real rounds keep working. At most
        :data:`MAX_UNVERIFIED_ROUNDS` such rounds are remembered; beyond that the oldest is
        forgotten and the floor rises to it, so no round is ever trained twice.

        Parameters
        ----------
        msg
            The server's train request for one protocol round.
        """
        cfg = self._check_header(msg)
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        if msg.round <= self.floor or msg.round in self.trained:
            raise RemoteProtocolError(
                f"TrainRequest for round {msg.round} replays a round this silo trained, or is "
                f"not above round {self.floor} (its last verified or forgotten round)",
                sender=SERVER,
            )
        if msg.round >= MAX_ROUND:
            raise RemoteProtocolError(
                f"TrainRequest for round {msg.round}: rounds must be below 2**63", sender=SERVER
            )
        roster = dict(msg.roster)
        if len(roster) != len(msg.roster) or not all(0 <= s < cfg.n for s in roster):
            raise RemoteProtocolError("roster has duplicate or unknown silo ids", sender=SERVER)
        for peer, key in roster.items():  # every key now, not after training
            try:
                check_public_key(key, sender=SERVER)
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(
                    f"the roster's key of silo {peer} is unusable: {exc}", sender=SERVER
                ) from None
        _, silo, keys = self._identity()
        if roster.get(silo) != keys.public_bytes:
            raise NeedsKeysError(
                "roster does not hold this silo's current public key (rekey needed)", sender=SERVER
            )
        self._check_trust(cfg, msg.roster, msg.credentials)
        if len(roster) < cfg.min_uploads:
            raise RemoteProtocolError(
                f"roster has {len(roster)} silos, fewer than the {cfg.min_uploads} a round needs",
                sender=SERVER,
            )
        edge_keys, deal = self._edge_requests(cfg, silo, msg, roster)
        if msg.aligned:
            missing = [
                e
                for e, _ in incident(cfg.mask_edges, cfg.group_code.group_of(silo))
                if e not in edge_keys
            ]
            if missing:  # a straggler this round; the server relays its keys until confirmed
                raise RemoteProtocolError(
                    f"a group-masked round, but this silo lacks the keys of mask-graph edge(s) "
                    f"{missing}: relay them with the request (they are being dealt)",
                    sender=SERVER,
                )
        task = dataclasses.replace(
            self._task_for(msg.round, request_digest(cfg.digest, msg.round, msg.roster)),
            aligned=msg.aligned,
            deal=deal,
        )
        trained = sorted({*self.trained, msg.round})
        if len(trained) > MAX_UNVERIFIED_ROUNDS:  # forget the oldest: refuse up to it from now
            self.floor = max(self.floor, trained.pop(0))
        self.trained = tuple(trained)
        self.roster = roster
        self.edge_keys = edge_keys
        self.round = msg.round
        self.stage = ClientStage.TRAINING
        self._task = task
        return task

    def check_weight_bound(self, max_weight: float, *, auto: bool) -> None:
        """Refuse a weight bound that would tell the server more than the power of two of this
        silo's partition weights: a fixed bound (``auto`` False, the user's ``max_weight``)
        that differs from the first one of the run. (An automatic bound is a power of two,
        which :meth:`coded_fl.vocabulary.TrainSpec.from_dict` checks.) Without this, a server
        could ask round after round with another bound and, from the silo's refusals (a
        partition above the bound), bisect its ``num-examples``. Call it before the request
        changes anything; the first fixed bound is remembered by :meth:`on_train_request`'s
        caller through :meth:`pin_weight_bound`.

        Parameters
        ----------
        max_weight
            The round's weight bound W.
        auto
            Whether it is the server's automatic bound.

        Raises
        ------
        RemoteProtocolError
            A fixed bound other than the run's first (blamed on the server).
        """
        if not auto and self.fixed_weight and max_weight != self.fixed_weight:
            raise RemoteProtocolError(
                f"max-weight {max_weight:g} differs from this run's fixed weight bound "
                f"{self.fixed_weight:g}: a fixed bound does not change within a run",
                sender=SERVER,
            )

    def pin_weight_bound(self, max_weight: float, *, auto: bool) -> None:
        """Remember the run's fixed weight bound (the first one a request named).

        Parameters
        ----------
        max_weight, auto
            As for :meth:`check_weight_bound`.
        """
        if not auto and not self.fixed_weight:
            self.fixed_weight = float(max_weight)

    def _edge_requests(
        self, cfg: ProtocolConfig, silo: int, msg: TrainRequest, roster: dict[int, bytes]
    ) -> tuple[dict[tuple[int, int], bytes], tuple[tuple[int, int, int], ...]]:
        """The edge keys this silo holds once ``msg``'s relayed keys are opened, and its deal
        instructions, after checking both: an edge of the mask graph at this silo's group, a
        dealer and a recipient that are members of the edge's two groups and in the roster.
        A server cannot have a key sealed to a silo outside the edge (that silo could then
        unmask a group). Nothing changes here; the caller commits."""
        if not cfg.aligned:
            if msg.aligned or msg.edge_keys or msg.deal:
                raise RemoteProtocolError(
                    "group-mask fields in a run without masking='aligned'", sender=SERVER
                )
            return self.edge_keys, ()
        groups = cfg.group_code.groups
        edges = set(cfg.mask_edges)

        def members(e: tuple[int, int], who: int, what: str) -> None:
            if e not in edges:
                raise RemoteProtocolError(f"{what}: {e} is not a mask-graph edge", sender=SERVER)
            inside = edge_silos(groups, e)
            if silo not in inside or who not in inside or who == silo:
                raise RemoteProtocolError(
                    f"{what}: edge {e} joins silos {sorted(inside)}; silo {who} and this silo "
                    f"{silo} must be two of them",
                    sender=SERVER,
                )
            if who not in roster:
                raise RemoteProtocolError(f"{what}: silo {who} is not in the roster", sender=SERVER)

        held = dict(self.edge_keys)
        for dealer, q, h, box in msg.edge_keys:
            members((q, h), dealer, "a relayed edge key")
            held[(q, h)] = open_edge_key(
                self._key_for(dealer, roster),
                box,
                run_id=cfg.run_bytes,
                dealer=dealer,
                recipient=silo,
                edge=(q, h),
            )
        for q, h, recipient in msg.deal:
            members((q, h), recipient, "a deal instruction")
        return held, tuple(msg.deal)

    def _deal(
        self, cfg: ProtocolConfig, silo: int, task: TrainTask
    ) -> tuple[dict[tuple[int, int], bytes], tuple[tuple[int, int, int, bytes], ...]]:
        """The edge keys after dealing ``task.deal`` (a key this silo lacks is made now) and
        the sealed boxes."""
        keys = dict(self.edge_keys)
        boxes = []
        for q, h, recipient in task.deal:
            key = keys.get((q, h))
            if key is None:
                key = keys[(q, h)] = bytes(self._entropy(EDGE_KEY_BYTES))
                if len(key) != EDGE_KEY_BYTES:
                    raise InputError(f"the entropy source must return {EDGE_KEY_BYTES} bytes")
            box = seal_edge_key(
                self._key_for(recipient),
                key,
                run_id=cfg.run_bytes,
                dealer=silo,
                recipient=recipient,
                edge=(q, h),
            )
            boxes.append((recipient, q, h, box))
        return keys, tuple(boxes)

    def upload(
        self, task: TrainTask, partials: Sequence[torch.Tensor], *, model_digest: bytes = b""
    ) -> Upload:
        """Quantize, encode, mask and share: the Upload for ``task`` (partials align with
        ``task.partitions``, each a float tensor of ``vector_length`` elements).

        The mask and its shares derive from key agreement (one ephemeral key per share,
        :mod:`coded_fl.secagg.evidence`) and a context that binds the
        request, ``model_digest`` (a digest of the model the silo was sent, if the caller has
        one) and a fresh nonce, so no two uploads share a mask; a second upload for a round is
        refused with :class:`~coded_fl.errors.MaskReuseError` all the same. ``model_digest``
        (the digest of everything the silo trained on, the same at every silo of an honest
        round) also keys every share (derived or sealed: it is in the HKDF info of each
        share's ephemeral key agreement) and is in the sealed shares' associated data; the
        silo keeps it and checks every survivor's shares against it at recovery, so a round
        whose silos were sent different inputs cannot be unmasked. (A reveal needs no digest:
        the ephemeral scalar does not depend on it; the server judges a disputed share under
        the digest of the inputs it sent this silo.)

        Parameters
        ----------
        task
            What on_train_request returned for the round.
        partials
            One float tensor of vector_length elements per partition of the task, in
            task.partitions order.
        model_digest
            The digest of everything the silo trained on (the inputs digest of the train
            message); empty when the caller has none.
        """
        if isinstance(task, TrainTask) and task.round in self.uploaded:
            raise MaskReuseError(
                f"silo {self.silo} already uploaded round {task.round}: a second upload for a "
                "round is refused (two masked uploads of one round would let the server "
                "subtract them); wait for the next TrainRequest"
            )
        self._require(ClientStage.TRAINING)
        if task is not getattr(self, "_task", None) or task.round != self.round:
            raise LocalProtocolError("upload() must be given the task of the current round")
        cfg, silo, _ = self._identity()
        if len(partials) != len(task.partitions):
            raise LocalProtocolError(
                f"{len(partials)} partial updates for {len(task.partitions)} partitions"
            )
        edge_keys, dealt = self._deal(cfg, silo, task)
        confirms = tuple(
            (q, h, edge_tag(key, run_id=cfg.run_bytes, edge=(q, h)))
            for (q, h), key in sorted(edge_keys.items())
        )
        if task.aligned:
            masked = self._aligned_upload(cfg, silo, task, partials, bytes(model_digest))
            shared: dict[str, Any] = {}
        else:
            masked, shared = self._shared_upload(cfg, silo, task, partials, bytes(model_digest))
        # The recovery needs no per-round state but the inputs digest (a node that processes
        # two messages at once, as Flower's simulation engine does, could overwrite it with a
        # stale copy: the adapter keeps a copy of the uploads outside the state and gives it
        # back, recall_uploads): derived shares, this silo's own included, are recomputed from
        # keys, the relayed context and its own digest.
        self.edge_keys = edge_keys
        self.stage = ClientStage.UPLOADED
        self._keep_uploads((task.round,), {**self.inputs, task.round: bytes(model_digest)})
        return Upload(
            digest=cfg.digest,
            round=task.round,
            sender=silo,
            recipient=SERVER,
            masked=masked,
            dealt=dealt,
            confirms=confirms,
            **shared,
        )

    def _shared_upload(
        self,
        cfg: ProtocolConfig,
        silo: int,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The coded update under a secret-shared mask, and the Upload's share fields: the
        context, the derived shares' tags and the sealed shares."""
        sharing = cfg.sharing
        nonce = self._entropy(NONCE_BYTES)
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise InputError(f"the entropy source must return exactly {NONCE_BYTES} bytes")
        context = share_context(task.request, model_digest, nonce=nonce)
        members = sorted(self.roster)
        derived = sharing.derived_set(silo, members)
        # derived straight into the rows (numpy: no torch copy, whose intra-op threads stall
        # when other processes hold the cores)
        rows = np.empty((sharing.U, sharing.piece_length), dtype=np.uint32)
        tags = []
        for row, j in enumerate(derived):  # every share has its own ephemeral key (evidence)
            ephemeral, secret = self._sender_secret(
                cfg, j, task.round, context, DERIVED, self.roster, model_digest
            )
            MaskStream(secret[:SEED_BYTES], cfg.p).fill(rows[row])
            tag = secret[SEED_BYTES:]
            tags.append((j, self._entry(cfg, j, task.round, DERIVED, context, ephemeral, tag)))
        values = torch.from_numpy(rows)
        others = tuple(j for j in members if j not in derived)
        mask, shares = sharing.complete(derived, values, others)
        masked = self._encode(cfg, task, partials, mask)
        sealed = []
        for row, j in enumerate(others):
            ephemeral, secret = self._sender_secret(
                cfg, j, task.round, context, SEALED, self.roster, model_digest
            )
            box = seal(
                secret[:KEY_BYTES],
                shares[row].numpy().tobytes(),
                run_id=cfg.run_bytes,
                round_=task.round,
                sender=silo,
                recipient=j,
                purpose=share_purpose(model_digest),
            )
            sealed.append((j, self._entry(cfg, j, task.round, SEALED, context, ephemeral, box)))
        return masked, {"shares": tuple(sealed), "context": context, "tags": tuple(tags)}

    def _aligned_upload(
        self,
        cfg: ProtocolConfig,
        silo: int,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> torch.Tensor:
        """The coded update under the group mask r_i zeta_q (no shares: they cancel in the
        decode for every survivor set), bound to the request and the model."""
        streams = group_mask_streams(
            self.edge_keys,
            cfg.mask_edges,
            cfg.group_code.group_of(silo),
            field=cfg.field,
            run_id=cfg.run_bytes,
            round_=task.round,
            context=mask_context(task.request, model_digest),
            scale=task.coefficients[0],
        )
        return self._encode(cfg, task, partials, None, mask_streams=streams)

    def _encode(
        self,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        mask: torch.Tensor | None,
        *,
        mask_streams: Sequence[tuple[bytes, int]] | None = None,
    ) -> torch.Tensor:
        """Quantize, encode with the silo's code row and add ``mask`` (or the mask made of
        ``mask_streams``): one fused pass."""
        return encode_upload(
            [g.reshape(-1) for g in partials],
            list(task.coefficients),
            list(task.rounding_keys),
            cfg.quantization,
            cfg.field,
            mask=mask,
            mask_streams=mask_streams,
            stats=self.stats,
        )

    # ------------------------------------------------------------------ 3. recovery
    def on_recovery_request(self, msg: RecoveryRequest) -> RecoveryReply:
        """Check the requested weights against the public code and return the share sums.

        Parameters
        ----------
        msg
            The server's recovery request: the survivors, the weights and the shares relayed for
            this silo.

        Returns
        -------
        RecoveryReply
            This silo's weighted share sums.
        """
        cfg = self._check_header(msg)
        # any keyed stage: the round's inputs digest, kept per uploaded round, is what counts
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        if msg.round < self.floor:
            raise RemoteProtocolError(
                f"RecoveryRequest for round {msg.round} replays an earlier round (current: "
                f"{self.floor})",
                sender=SERVER,
            )
        if self.recovered_round >= msg.round:
            raise RemoteProtocolError(
                f"a second RecoveryRequest for round {msg.round}: a silo answers once per round",
                sender=SERVER,
            )
        survivors = msg.survivors
        if len(msg.keys) != len(survivors):
            raise RemoteProtocolError("one public key per survivor is required", sender=SERVER)
        for i, key in zip(survivors, msg.keys, strict=True):
            # a key the silo already has must not change within a round; one it lacks (its
            # state is a stale copy from before the TrainRequest) is taken from the request:
            # a wrong key only makes that survivor's sealed share fail authentication
            check_public_key(key, sender=SERVER)
            if self.roster.get(i, key) != key and msg.round == self.round:
                raise RemoteProtocolError(
                    f"the recovery request changes silo {i}'s public key within the round",
                    sender=SERVER,
                )
        self._check_trust(cfg, tuple(zip(survivors, msg.keys, strict=True)), msg.credentials)
        rows = check_weight_rows(cfg, survivors, msg.weights)
        _, silo, _ = self._identity()
        # this silo's own digest of the round's inputs, never one the server relays: shares
        # made from other inputs then fail authentication (issue 29, attack 1)
        inputs = self.inputs.get(msg.round)
        if inputs is None:  # a restarted node, or state written back from before its upload
            raise NeedsKeysError(
                f"{NEEDS_KEYS}: RecoveryRequest for round {msg.round}, but this silo holds no "
                "record of uploading it (the inputs it trained on bind the shares, so it "
                "cannot check them): a restarted node, or its state is older than its upload",
                sender=SERVER,
            )
        shares = []
        tokens = msg.tokens or (b"",) * len(survivors)
        if len(tokens) != len(survivors):
            raise RemoteProtocolError("one share or token per survivor is required", sender=SERVER)
        identities = [c[0] for c in msg.credentials] or [b""] * len(survivors)
        if len(identities) != len(survivors):
            raise RemoteProtocolError("one credential per survivor is required", sender=SERVER)
        for i, box, token, identity in zip(survivors, msg.shares, tokens, identities, strict=True):
            if bool(token) == bool(box):
                raise RemoteProtocolError(
                    f"silo {i}'s entry must be a sealed share or a derived-share token, not "
                    "both or neither",
                    sender=SERVER,
                )
            try:
                if token:
                    shares.append(self._rederive(cfg, msg.round, i, silo, token, identity, inputs))
                else:
                    shares.append(self._open(cfg, msg.round, i, box, identity, inputs))
            except RemoteProtocolError as exc:
                me = self.policy.identity
                if exc.sender == i and i != silo and me is not None:  # a signed accusation
                    exc.evidence = me.sign(
                        accusation_statement(
                            digest=cfg.digest,
                            run_id=cfg.run_bytes,
                            round_=msg.round,
                            accuser=silo,
                            accused=i,
                            item=token or box,
                        )
                    )
                raise
        agg = cfg.field.matmul(rows, shares, validate=False)  # each share checked above
        self.round = max(self.round, msg.round)
        self.recovered_round = msg.round
        self.floor = max(self.floor, msg.round)
        self.trained = tuple(r for r in self.trained if r > self.floor)
        self.stage = ClientStage.RECOVERED
        return RecoveryReply(
            digest=cfg.digest, round=msg.round, sender=silo, recipient=SERVER, rows=agg
        )

    def _open(
        self,
        cfg: ProtocolConfig,
        round_: int,
        sender: int,
        box: bytes,
        identity: bytes,
        inputs: bytes,
    ) -> torch.Tensor:
        """The share ``sender`` sealed for this silo, opened with its entry's ephemeral key and
        this silo's own inputs digest (in the key and the box's associated data)."""
        m = cfg.sharing.piece_length
        entry = Entry.parse(box, payload_bytes=sealed_payload_bytes(m), blame=SERVER)
        self._check_statement(cfg, round_, sender, SEALED, b"", entry, identity)
        secret = self._recipient_secret(cfg, sender, round_, entry, b"", SEALED, inputs)
        share = open_share(
            secret,
            entry,
            kind=SEALED,
            field=cfg.field,
            piece_length=m,
            run_id=cfg.run_bytes,
            round_=round_,
            sender=sender,
            recipient=self._identity()[1],
            inputs=inputs,
        )
        if share is None:  # pragma: no cover - a sealed entry always opens to a share
            raise LocalProtocolError("no share")
        return share

    def _rederive(
        self,
        cfg: ProtocolConfig,
        round_: int,
        sender: int,
        silo: int,
        token: bytes,
        identity: bytes,
        inputs: bytes,
    ) -> torch.Tensor:
        """The share ``sender`` derived for this silo, after its key-confirmation tag checks."""
        if len(token) < CONTEXT_BYTES:
            raise RemoteProtocolError(
                f"a share token has {len(token)} bytes, fewer than its {CONTEXT_BYTES}-byte "
                "context",
                sender=SERVER,
            )
        context = token[:CONTEXT_BYTES]
        entry = Entry.parse(token[CONTEXT_BYTES:], payload_bytes=CONFIRM_BYTES, blame=SERVER)
        if sender != silo:
            self._check_statement(cfg, round_, sender, DERIVED, context, entry, identity)
        secret = self._recipient_secret(cfg, sender, round_, entry, context, DERIVED, inputs)
        if not tags_match(entry.payload, secret[SEED_BYTES:]):
            if sender == silo:  # our own share: our keys changed since the upload
                raise NeedsKeysError(
                    f"{NEEDS_KEYS}: this silo's own derived share of round {round_} does not "
                    "confirm: its keys changed since its upload (a restarted node?); rekey it",
                    sender=SERVER,
                )
            raise KeyConfirmationError(
                f"its derived mask share for silo {silo} in round {round_} fails key "
                f"confirmation: silo {sender} derived it with another key than silo {silo}'s "
                f"(a stale roster, or a silo that rekeyed after the round started), or from "
                f"other training inputs than silo {silo} was sent, or its tag is wrong; the "
                f"server asks silo {sender} to reveal the share's ephemeral key and judges",
                sender=sender,
            )
        out = np.empty(cfg.sharing.piece_length, dtype=np.uint32)
        MaskStream(secret[:SEED_BYTES], cfg.p).fill(out)
        return torch.from_numpy(out)

    # ------------------------------------------------------------------ 4. evidence
    def on_reveal_request(self, msg: RevealRequest) -> Reveal:
        """Reveal the ephemeral scalar of the one share this silo left for ``msg.accuser``.

        Only that share's scalar: it opens that share and nothing else (the accuser holds the
        share already). Checked before anything is revealed: the accuser is another roster
        silo; with a trust roster its key is trusted and it signed the accusation (a silo
        with an identity reveals only for an accusation its accuser signed); the relayed item
        is this silo's entry for the accuser (its ephemeral key is the one this silo derives
        again from the context). Nothing changes in the machine.

        Parameters
        ----------
        msg
            The server's request to reveal the key of the share this silo left for msg.accuser.

        Raises
        ------
        RemoteProtocolError
            Blaming the server, for anything that does not check.
        """
        cfg = self._check_header(msg)
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        _, silo, keys = self._identity()
        if not 0 < msg.round < MAX_ROUND:
            raise RemoteProtocolError(
                f"a reveal request for round {msg.round}: rounds are in [1, 2**63)", sender=SERVER
            )
        accuser = msg.accuser
        if accuser == silo or not 0 <= accuser < cfg.n:
            raise RemoteProtocolError(
                f"a reveal request names accuser {accuser} (this is silo {silo})", sender=SERVER
            )
        check_public_key(msg.accuser_key, sender=SERVER)
        self._check_trust(cfg, ((accuser, msg.accuser_key),), (msg.accuser_credential,))
        identity = msg.accuser_credential[0]
        if self.policy.trusted is not None or identity:
            statement = accusation_statement(
                digest=cfg.digest,
                run_id=cfg.run_bytes,
                round_=msg.round,
                accuser=accuser,
                accused=silo,
                item=msg.item,
            )
            if not identity or not verify_signature(identity, statement, msg.accusation):
                raise RemoteProtocolError(
                    f"a reveal request without silo {accuser}'s signed accusation: this silo "
                    "reveals a share's key only when its recipient accuses",
                    sender=SERVER,
                )
        if len(msg.context) != CONTEXT_BYTES:
            raise RemoteProtocolError(
                "a reveal request's context has the wrong size", sender=SERVER
            )
        if msg.derived:
            if msg.item[:CONTEXT_BYTES] != msg.context:
                raise RemoteProtocolError(
                    "a reveal request's token holds another context", sender=SERVER
                )
            entry = Entry.parse(msg.item[CONTEXT_BYTES:], payload_bytes=CONFIRM_BYTES, blame=SERVER)
        else:
            payload = sealed_payload_bytes(cfg.sharing.piece_length)
            entry = Entry.parse(msg.item, payload_bytes=payload, blame=SERVER)
        e = ephemeral_secret(
            keys.private_bytes,
            run_id=cfg.run_bytes,
            round_=msg.round,
            sender=silo,
            recipient=accuser,
            context=msg.context,
        )
        if public_of(e) != entry.ephemeral:
            raise RemoteProtocolError(
                f"the disputed entry of round {msg.round} for silo {accuser} holds an ephemeral "
                "key this silo did not make for it: nothing is revealed",
                sender=SERVER,
            )
        return Reveal(
            digest=cfg.digest,
            round=msg.round,
            sender=silo,
            recipient=SERVER,
            accuser=accuser,
            secret=e,
        )

    # ------------------------------------------------------------------ persistence
    @property
    def key_id(self) -> str | None:
        """A public name of this silo's current key-agreement key (hex of the first 16 bytes
        of its SHA-256; None before keys): new with every key exchange."""
        if self._keys is None:
            return None
        return hashlib.sha256(self._keys.public_bytes).hexdigest()[:32]

    def recall_uploads(self, uploads: Mapping[int, bytes]) -> None:
        """Merge a record of this silo's own uploads of the current session (round -> the
        digest of the inputs it trained on) kept outside its state: a state written back
        from before an upload (a node that ran two messages at once and saved the older last)
        then still refuses that round a second time and can answer its recovery. Only the
        adapter's own record of what this silo sent may come here, never a server's word.

        Parameters
        ----------
        uploads
            Round -> inputs digest, as :attr:`inputs` holds them.
        """
        if not uploads:
            return
        merged = {**{int(r): bytes(d) for r, d in uploads.items()}, **self.inputs}
        self._keep_uploads(merged, merged)

    def _keep_uploads(self, rounds: Iterable[int], inputs: dict[int, bytes]) -> None:
        """Add ``rounds`` to the rounds uploaded (the last MAX_UNVERIFIED_ROUNDS kept) and
        keep the inputs digests of those rounds from ``inputs``."""
        self.uploaded = tuple(sorted({*self.uploaded, *rounds}))[-MAX_UNVERIFIED_ROUNDS:]
        self.inputs = {r: inputs[r] for r in self.uploaded if r in inputs}

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

    def _task_for(self, round_: int, request: bytes) -> TrainTask:
        """What this silo trains in ``round_``: its partitions, code row and rounding keys."""
        cfg, silo, _ = self._identity()
        code = cfg.gradient_code
        support = tuple(int(k) for k in code.support(silo))
        return TrainTask(
            round=round_,
            silo=silo,
            partitions=support,
            coefficients=tuple(int(c) for c in code.coefficients(silo)),
            rounding_keys=tuple(RoundingKey.for_partition(cfg.seed_id, round_, k) for k in support),
            request=request,
        )
