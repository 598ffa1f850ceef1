"""The protocol's messages as frozen dataclasses, the refusal codes, and the :class:`Limits` a
receiver that knows its configuration checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar

import torch

from coded_fl.codes.repetition import GroupCode
from coded_fl.crypto import KEY_BYTES
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES
from coded_fl.secagg.evidence import EPHEMERAL_BYTES, sealed_payload_bytes
from coded_fl.secagg.messages.extensions import MessageExtension

if TYPE_CHECKING:
    from coded_fl.secagg.config import ProtocolConfig


MAGIC = b"CFL"
VERSION = 9  # 2: seed-derived mask shares (context, tags, tokens); 3: group-aligned masks;
# 4: group masks bound to a BLAKE3 digest of the model (was SHA-256); 5: the digest covers the
# train spec and the user's config record too (clients.mod._model_digest); 6: signed keys (an
# identity key and an endorsement with every KeyReply and relayed roster entry); 7: verifiable
# accusations (every share entry carries its ephemeral key and, with an identity, its sender's
# signature; a refusal carries its accusation's signature; RevealRequest and Reveal), every
# share's key and sealed box bound to the digest of the round's training inputs; 8: survivor
# views (ViewRequest, ViewReply; a RecoveryRequest carries every survivor's signed view);
# 9: scheme-owned message extensions (a TrainRequest's and an Upload's masking fields follow
# the shared ones as an extension id byte and body: the aligned scheme's edge keys)
SERVER = -1


@dataclass(frozen=True)
class Message:
    """Common header. ``digest`` is the public configuration's digest (both ends must agree)."""

    TYPE: ClassVar[int] = 0
    digest: bytes
    round: int
    sender: int
    recipient: int


@dataclass(frozen=True)
class KeyRequest(Message):
    """Server -> silo: the public configuration (JSON bytes); asks for the silo's public key."""

    TYPE: ClassVar[int] = 1
    config: bytes = b""


@dataclass(frozen=True)
class KeyReply(Message):
    """Silo -> server: its X25519 public key for this run; with an identity
    (:mod:`coded_fl.secagg.identity`), its identity public key and its endorsement of the key
    (both empty without one)."""

    TYPE: ClassVar[int] = 2
    public_key: bytes = b""
    identity: bytes = b""
    signature: bytes = b""


@dataclass(frozen=True)
class TrainRequest(Message):
    """Server -> silo: start round ``round``; ``roster`` is (silo, public key) of every member.

    ``aligned`` says whether this round's masks cancel in the decode (one round trip, no
    recovery stage: with ``masking="aligned"``, the group masks) or not; ``extension`` holds the
    masking scheme's own fields, if it has any (:class:`MessageExtension`; the aligned scheme's
    relayed edge keys and deal instructions:
    :class:`~coded_fl.secagg.masking.aligned_wire.EdgeKeyRequest`).

    ``credentials``: per roster entry, in order, the (identity key, endorsement) its silo sent
    with its key (``(b"", b"")`` for an unsigned one); empty when no entry is signed.
    """

    TYPE: ClassVar[int] = 3
    roster: tuple[tuple[int, bytes], ...] = ()
    credentials: tuple[tuple[bytes, bytes], ...] = ()
    aligned: bool = False
    extension: MessageExtension | None = None


@dataclass(frozen=True, eq=False)
class Upload(Message):
    """Silo -> server: the masked coded vector; the context its derived shares are bound to,
    one key-confirmation tag per member of its derived set (its own included), and one sealed
    mask share per other member (see :mod:`coded_fl.secagg.derive`). Each tag and each sealed
    share is an *entry* (:class:`coded_fl.secagg.evidence.Entry`): the share's ephemeral
    public key, the tag or box, and with an identity the sender's signature. ``extension``
    holds the masking scheme's own fields, if it has any (the aligned scheme's dealt edge keys
    and confirmations: :class:`~coded_fl.secagg.masking.aligned_wire.EdgeKeyUpload`)."""

    TYPE: ClassVar[int] = 4
    masked: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.uint32))
    shares: tuple[tuple[int, bytes], ...] = ()
    context: bytes = b""
    tags: tuple[tuple[int, bytes], ...] = ()
    extension: MessageExtension | None = None


@dataclass(frozen=True)
class RecoveryRequest(Message):
    """Server -> silo: the survivor set, the weight rows to apply, and per survivor (in the
    order of ``survivors``) either the sealed share it addressed to this silo (``shares``; its
    ``tokens`` entry empty) or, for a share it derived, its context and key-confirmation tag
    (``tokens``, :data:`TOKEN_BYTES`; its ``shares`` entry empty)."""

    TYPE: ClassVar[int] = 5
    survivors: tuple[int, ...] = ()
    weights: tuple[tuple[int, ...], ...] = ()
    shares: tuple[bytes, ...] = ()
    #: the survivors' public keys (the roster a silo needs even if it missed the TrainRequest)
    keys: tuple[bytes, ...] = ()
    tokens: tuple[bytes, ...] = ()
    #: per survivor, the (identity key, endorsement) relayed with its key (as TrainRequest's)
    credentials: tuple[tuple[bytes, bytes], ...] = ()
    #: per survivor, its signature of the survivor set (:mod:`coded_fl.secagg.views`; empty:
    #: a run without identity keys)
    views: tuple[bytes, ...] = ()


@dataclass(frozen=True, eq=False)
class RecoveryReply(Message):
    """Silo -> server: for each weight row, the weighted sum of the survivors' shares."""

    TYPE: ClassVar[int] = 6
    rows: torch.Tensor = field(default_factory=lambda: torch.empty((0, 0), dtype=torch.uint32))


class RefusalCode(IntEnum):
    """Why a silo refuses a server message in a way the server acts on.

    ``NEEDS_KEYS``: the silo holds no keys for the server's session; the server reruns the key
    exchange with it before the next round. ``ACCUSES``: a share sealed for this silo by silo
    ``accused`` failed authentication (altered in transit or by its sender); the server asks
    the accused silo to reveal that share's ephemeral key and judges which of the two lied
    (:mod:`coded_fl.secagg.evidence`); ``evidence`` carries the accuser's signature of the
    accusation when it holds an identity key.
    ``MISCONFIGURED``: the silo cannot take part because of a setting (e.g. a partition larger
    than ``max_weight``, a model that does not match the configuration); the detail names it.
    When more silos refuse so than a round can spare, no round can complete and the server
    stops the run with that message. ``WEIGHT_BOUND``: a partition reported more examples than
    the round's automatic weight bound W (the strategy's ``max_weight=None``); ``bound`` is the
    smallest power of two that holds the silo's largest partition weight, and the server reruns
    the round with W raised to it (a fixed ``max_weight`` gives ``MISCONFIGURED`` instead).
    ``UNTRUSTED_KEY``: a relayed key-agreement key that the silo's trusted keys do not vouch
    for (unsigned, an unknown identity, or signed for another silo index or session); nothing
    was derived from it. It cannot succeed later: the server counts it as a setting, like
    ``MISCONFIGURED``, and the detail names ``codedfl.trusted-keys`` and
    ``codedfl.identity-key``.
    """

    NEEDS_KEYS = 1
    ACCUSES = 2
    MISCONFIGURED = 3
    WEIGHT_BOUND = 4
    UNTRUSTED_KEY = 5

    @property
    def label(self) -> str:
        """The code as text, e.g. ``codedfl-needs-keys`` (stable: it appears in reports)."""
        return "codedfl-" + self.name.lower().replace("_", "-")


#: Longest human-readable detail a refusal carries (bytes of UTF-8).
MAX_DETAIL_BYTES = 512


#: Largest weight bound a refusal may ask for (far beyond any dataset, exact in a float64).
MAX_WEIGHT_BOUND = 1 << 62


@dataclass(frozen=True)
class Refusal(Message):
    """Silo -> server: a typed refusal of the server's message (see :class:`RefusalCode`).

    The server acts on ``code``, ``accused`` and ``bound`` only; ``detail`` is for people (no
    secret ever goes into it) and is cut to :data:`MAX_DETAIL_BYTES`.
    """

    TYPE: ClassVar[int] = 7
    code: RefusalCode = RefusalCode.NEEDS_KEYS
    accused: int | None = None
    detail: str = ""
    bound: int = 0  # WEIGHT_BOUND: the weight bound the silo needs (a power of two), else 0
    #: ACCUSES from a silo with an identity: its signature of the accusation
    #: (:func:`coded_fl.secagg.evidence.accusation_statement`); empty otherwise
    evidence: bytes = b""


@dataclass(frozen=True)
class RevealRequest(Message):
    """Server -> accused silo: reveal the ephemeral scalar of the share it left for
    ``accuser`` in round ``round`` (:mod:`coded_fl.secagg.evidence`).

    ``item`` is what the server relayed to the accuser (the sealed entry, or the derived
    share's token: context and entry), ``derived`` says which; ``context`` is the accused's
    upload context (from which it recomputes the scalar). ``accuser_key`` and
    ``accuser_credential`` are the accuser's key-agreement key and (identity, endorsement);
    ``accusation`` the accuser's signature of the accusation (empty without an identity).
    """

    TYPE: ClassVar[int] = 8
    accuser: int = 0
    derived: bool = False
    context: bytes = b""
    item: bytes = b""
    accuser_key: bytes = b""
    accuser_credential: tuple[bytes, bytes] = (b"", b"")
    accusation: bytes = b""


@dataclass(frozen=True)
class Reveal(Message):
    """Accused silo -> server: the ephemeral scalar of the one disputed share (32 bytes)."""

    TYPE: ClassVar[int] = 9
    accuser: int = 0
    secret: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class ViewRequest(Message):
    """Server -> survivor: sign the survivor set of round ``round``
    (:mod:`coded_fl.secagg.views`)."""

    TYPE: ClassVar[int] = 10
    survivors: tuple[int, ...] = ()


@dataclass(frozen=True)
class ViewReply(Message):
    """Survivor -> server: its identity's signature of the survivor set it was sent."""

    TYPE: ClassVar[int] = 11
    signature: bytes = b""


#: The encoding of ``Refusal.accused = None``.
NO_SILO = -2  # the encoding of Refusal.accused = None

#: Bytes of a derived share's token in a recovery request, unsigned: the context and the entry
#: (ephemeral key and tag); a signed one has a signature more (:data:`SIGNATURE_SIZES`).
TOKEN_BYTES = CONTEXT_BYTES + EPHEMERAL_BYTES + CONFIRM_BYTES
#: Bytes of a derived share's entry in an upload, unsigned: the ephemeral key and the tag.
TAG_ENTRY_BYTES = EPHEMERAL_BYTES + CONFIRM_BYTES

#: Longest configuration a KeyRequest may carry (bytes of JSON; a real one is under 1 KiB).
MAX_CONFIG_BYTES = 1 << 16


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What a receiver that knows the configuration accepts, checked by :func:`decode` before
    it builds anything (:meth:`for_config` derives them from a :class:`ProtocolConfig`).

    Parameters
    ----------
    silos
        n: a roster, a survivor set and an upload's shares have at most n entries.
    min_survivors
        n - s: a recovery request has at most |S| - (n - s) + 1 weight rows.
    max_rows
        max(s, comparisons) + 1: the most weight rows a request, and rows a recovery reply,
        may have.
    vector_length
        d: an upload's masked vector has exactly d elements.
    piece_length
        m: a recovery reply's rows have exactly m elements.
    sealed_share_bytes
        32 + 4 m + 28: the size of every unsigned sealed share entry (ephemeral key and box);
        a signed one has 64 or 96 bytes more.
    public_key_bytes
        32: the size of every X25519 public key.
    edges
        The mask graph's edges (``masking="aligned"``; 0 otherwise): the aligned scheme's
        extensions relay and confirm at most that many edge keys, and deal at most that many
        times n (:mod:`coded_fl.secagg.masking.aligned_wire`).
    comparisons
        With a group code (the repetition code): n - g, the most group comparisons a request
        with more than n - s survivors asks for besides row 0 (0 for other codes).
    """

    silos: int
    min_survivors: int
    max_rows: int
    vector_length: int
    piece_length: int
    sealed_share_bytes: int
    public_key_bytes: int = KEY_BYTES
    edges: int = 0
    comparisons: int = 0

    @classmethod
    def for_config(cls, cfg: ProtocolConfig) -> Limits:
        """The limits of the messages of a run of ``cfg``.

        Parameters
        ----------
        cfg
            The run's public configuration.

        Returns
        -------
        Limits
        """
        m = cfg.sharing.piece_length
        code = cfg.gradient_code  # a group code compares every member with its reference
        comparisons = cfg.n - len(code.groups) if isinstance(code, GroupCode) else 0
        return cls(
            silos=cfg.n,
            min_survivors=cfg.n - cfg.s,
            max_rows=max(cfg.s, comparisons) + 1,
            comparisons=comparisons,
            vector_length=cfg.vector_length,
            piece_length=m,
            sealed_share_bytes=EPHEMERAL_BYTES + sealed_payload_bytes(m),
            edges=len(cfg.mask_edges),
        )
