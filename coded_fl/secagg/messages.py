"""Protocol messages: frozen dataclasses with a compact, versioned binary encoding.

Layout of every message (little endian)::

    magic "CFL" | version u8 | type u8 | config digest 8 B | round u64 | sender i32 | recipient i32
    | body

``sender``/``recipient`` are silo indices, ``-1`` for the server. Field vectors are packed
``uint32`` (4 bytes per element, no pickles, no text); byte strings and lists carry explicit
lengths, and :func:`decode` checks every length against the buffer, so truncated, padded or
garbled input raises :class:`RemoteProtocolError` instead of producing a half-read message.

Every count and length is checked before anything is built from it: against the bytes left
(a count of empty items must be backed by bytes too), and, when the receiver passes the
:class:`Limits` of its configuration, against what that configuration allows (n silos, d and
m elements, s + 1 weight rows, fixed key and sealed-share sizes). A receiver that knows its
configuration reads the type first (:func:`peek_header`) and decodes with its limits.

Length: one wire format: every message type's layout, its limits and its bounds checks in one
place (about 400 lines of code).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import torch

from coded_fl.codes.repetition import GroupCode
from coded_fl.crypto import KEY_BYTES, SEAL_OVERHEAD
from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.secagg.aligned import EDGE_KEY_BYTES
from coded_fl.secagg.derive import CONFIRM_BYTES, CONTEXT_BYTES
from coded_fl.secagg.evidence import EPHEMERAL_BYTES, SIGNATURE_SIZES, sealed_payload_bytes
from coded_fl.secagg.identity import check_credential_sizes

if TYPE_CHECKING:
    from coded_fl.secagg.config import ProtocolConfig

__all__ = [
    "HEADER_BYTES",
    "MAX_CONFIG_BYTES",
    "SERVER",
    "TAG_ENTRY_BYTES",
    "TOKEN_BYTES",
    "VERSION",
    "Header",
    "KeyReply",
    "KeyRequest",
    "Limits",
    "Message",
    "RecoveryReply",
    "RecoveryRequest",
    "Refusal",
    "RefusalCode",
    "Reveal",
    "RevealRequest",
    "TrainRequest",
    "Upload",
    "decode",
    "encode",
    "encode_parts",
    "peek_header",
    "peek_type",
]

MAGIC = b"CFL"
VERSION = 7  # 2: seed-derived mask shares (context, tags, tokens); 3: group-aligned masks;
# 4: group masks bound to a BLAKE3 digest of the model (was SHA-256); 5: the digest covers the
# train spec and the user's config record too (clients.mod._model_digest); 6: signed keys (an
# identity key and an endorsement with every KeyReply and relayed roster entry); 7: verifiable
# accusations (every share entry carries its ephemeral key and, with an identity, its sender's
# signature; a refusal carries its accusation's signature; RevealRequest and Reveal), every
# share's key and sealed box bound to the digest of the round's training inputs
SERVER = -1
_HEADER = struct.Struct("<3sBB8sQii")


def _vector_bytes(v: torch.Tensor) -> memoryview:
    """The vector's little-endian uint32 bytes, a view where no conversion is needed (the
    caller joins it into the message: one copy in all)."""
    if v.dtype != torch.uint32:
        raise InputError(f"field vectors travel as uint32, got {v.dtype}")
    a = v.detach().cpu().contiguous().numpy().astype("<u4", copy=False)
    return np.ascontiguousarray(a).data.cast("B")


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

    With ``masking="aligned"`` (:mod:`coded_fl.secagg.aligned`): ``aligned`` says whether this
    round uses the group masks (one round trip) or the shared masks; ``edge_keys`` relays the
    edge keys other silos sealed for this one, as (dealer, q, h, box); ``deal`` asks this silo
    to seal its key of edge (q, h) for ``recipient`` in its upload, as (q, h, recipient) (a
    dealer without the key makes it first).

    ``credentials``: per roster entry, in order, the (identity key, endorsement) its silo sent
    with its key (``(b"", b"")`` for an unsigned one); empty when no entry is signed.
    """

    TYPE: ClassVar[int] = 3
    roster: tuple[tuple[int, bytes], ...] = ()
    credentials: tuple[tuple[bytes, bytes], ...] = ()
    aligned: bool = False
    edge_keys: tuple[tuple[int, int, int, bytes], ...] = ()
    deal: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, eq=False)
class Upload(Message):
    """Silo -> server: the masked coded vector; the context its derived shares are bound to,
    one key-confirmation tag per member of its derived set (its own included), and one sealed
    mask share per other member (see :mod:`coded_fl.secagg.derive`). Each tag and each sealed
    share is an *entry* (:class:`coded_fl.secagg.evidence.Entry`): the share's ephemeral
    public key, the tag or box, and with an identity the sender's signature."""

    TYPE: ClassVar[int] = 4
    masked: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.uint32))
    shares: tuple[tuple[int, bytes], ...] = ()
    context: bytes = b""
    tags: tuple[tuple[int, bytes], ...] = ()
    #: edge keys sealed as the request's ``deal`` asked: (recipient, q, h, box)
    dealt: tuple[tuple[int, int, int, bytes], ...] = ()
    #: one key-confirmation tag per edge key the silo holds: (q, h, tag)
    confirms: tuple[tuple[int, int, bytes], ...] = ()


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


_NO_SILO = -2  # the encoding of Refusal.accused = None

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
        The mask graph's edges (``masking="aligned"``; 0 otherwise): a request relays and an
        upload confirms at most that many edge keys, and a ``deal`` or ``dealt`` list has at
        most that many times n entries.
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


_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        KeyRequest,
        KeyReply,
        TrainRequest,
        Upload,
        RecoveryRequest,
        RecoveryReply,
        Refusal,
        RevealRequest,
        Reveal,
    )
}


# ----------------------------------------------------------------------------- encoding


def _blob(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def _credentials(
    creds: tuple[tuple[bytes, bytes], ...], n: int, what: str
) -> tuple[tuple[bytes, bytes], ...]:
    """One (identity, signature) pair per entry: ``creds``, or unsigned pairs if empty."""
    if not creds:
        return ((b"", b""),) * n
    if len(creds) != n:
        raise InputError(f"credentials: {len(creds)} pairs for {n} {what} entries")
    return creds


def encode(msg: Message) -> bytes:
    """Serialise a message (see the module docstring for the layout).

    :func:`encode_parts` gives the same bytes in pieces, for a caller that joins them with
    a header of its own (one copy of a large vector instead of two).

    Parameters
    ----------
    msg
        Any protocol message.

    Returns
    -------
    bytes

    Raises
    ------
    InputError
        If a field does not fit the layout (a digest not 8 bytes, a vector not uint32,
        mismatched list lengths, an integer out of its wire type's range).
    """
    return b"".join(encode_parts(msg))


def encode_parts(msg: Message) -> list[bytes | memoryview]:
    """:func:`encode`'s bytes as a list of pieces (``b"".join`` of them is the encoding).

    Parameters
    ----------
    msg
        Any protocol message.

    Returns
    -------
    list[bytes | memoryview]
        Pieces to join; a large vector is a view of the message's tensor, so join them before
        the tensor changes.

    Raises
    ------
    InputError
        As :func:`encode`.
    """
    try:
        return _encode(msg)
    except InputError:
        raise
    except (struct.error, OverflowError, ValueError, TypeError) as exc:
        raise InputError(
            f"cannot encode {type(msg).__name__}: a field does not fit its wire type ({exc})"
        ) from None


def _encode(msg: Message) -> list[bytes | memoryview]:
    if len(msg.digest) != 8:
        raise InputError("config digest must be 8 bytes")
    head = _HEADER.pack(MAGIC, VERSION, msg.TYPE, msg.digest, msg.round, msg.sender, msg.recipient)
    parts: list[bytes | memoryview] = [head]
    if isinstance(msg, KeyRequest):
        parts.append(_blob(msg.config))
    elif isinstance(msg, KeyReply):
        parts += [_blob(msg.public_key), _blob(msg.identity), _blob(msg.signature)]
    elif isinstance(msg, TrainRequest):
        creds = _credentials(msg.credentials, len(msg.roster), "roster")
        parts.append(struct.pack("<I", len(msg.roster)))
        parts += [
            struct.pack("<i", s) + _blob(k) + _blob(i) + _blob(g)
            for (s, k), (i, g) in zip(msg.roster, creds, strict=True)
        ]
        parts.append(struct.pack("<BI", int(bool(msg.aligned)), len(msg.edge_keys)))
        parts += [struct.pack("<iII", d, q, h) + _blob(b) for d, q, h, b in msg.edge_keys]
        parts.append(struct.pack("<I", len(msg.deal)))
        parts += [struct.pack("<IIi", q, h, r) for q, h, r in msg.deal]
    elif isinstance(msg, Upload):
        masked = _vector_bytes(msg.masked)
        parts += [struct.pack("<I", masked.nbytes), masked]
        parts.append(_blob(msg.context))
        parts.append(struct.pack("<I", len(msg.tags)))
        parts += [struct.pack("<i", r) + _blob(c) for r, c in msg.tags]
        parts.append(struct.pack("<I", len(msg.shares)))
        parts += [struct.pack("<i", r) + _blob(c) for r, c in msg.shares]
        parts.append(struct.pack("<I", len(msg.dealt)))
        parts += [struct.pack("<iII", r, q, h) + _blob(b) for r, q, h, b in msg.dealt]
        parts.append(struct.pack("<I", len(msg.confirms)))
        parts += [struct.pack("<II", q, h) + _blob(t) for q, h, t in msg.confirms]
    elif isinstance(msg, RecoveryRequest):
        n = len(msg.survivors)
        tokens = msg.tokens or (b"",) * n
        if (
            any(len(w) != n for w in msg.weights)
            or len(msg.shares) != n
            or len(msg.keys) != n
            or len(tokens) != n
        ):
            raise InputError(
                "RecoveryRequest: weights, shares, tokens, keys must match the survivors"
            )
        parts.append(struct.pack("<II", n, len(msg.weights)))
        parts.append(np.asarray(msg.survivors, dtype="<i4").tobytes())
        parts.append(np.asarray(msg.weights, dtype="<u4").reshape(-1).tobytes())
        parts += [_blob(c) for c in msg.shares]
        parts += [_blob(t) for t in tokens]
        creds = _credentials(msg.credentials, n, "survivors")
        parts += [_blob(k) + _blob(i) + _blob(g) for k, (i, g) in zip(msg.keys, creds, strict=True)]
    elif isinstance(msg, RecoveryReply):
        rows = msg.rows
        if rows.dim() != 2:
            raise InputError("RecoveryReply rows must be a 2-D tensor")
        parts.append(struct.pack("<II", rows.shape[0], rows.shape[1]))
        parts.append(_vector_bytes(rows.reshape(-1)))
    elif isinstance(msg, Refusal):
        accused = _NO_SILO if msg.accused is None else int(msg.accused)
        detail = msg.detail.encode("utf-8")[:MAX_DETAIL_BYTES]
        if not 0 <= int(msg.bound) <= MAX_WEIGHT_BOUND:
            raise InputError(f"refusal bound must be in [0, 2^62], got {msg.bound}")
        parts.append(struct.pack("<BiQ", int(msg.code), accused, int(msg.bound)))
        parts.append(_blob(detail.decode("utf-8", "ignore").encode("utf-8")))
        parts.append(_blob(msg.evidence))
    elif isinstance(msg, RevealRequest):
        identity, endorsement = msg.accuser_credential
        parts.append(struct.pack("<iB", msg.accuser, int(bool(msg.derived))))
        parts += [_blob(b) for b in (msg.context, msg.item, msg.accuser_key)]
        parts += [_blob(identity), _blob(endorsement), _blob(msg.accusation)]
    elif isinstance(msg, Reveal):
        parts.append(struct.pack("<i", msg.accuser) + _blob(msg.secret))
    else:  # pragma: no cover - every subclass is handled above
        raise InputError(f"cannot encode {type(msg).__name__}")
    return parts


class _Reader:
    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise RemoteProtocolError("message is truncated or has a bad length field")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[int, ...]:
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))

    def blob(self, size: int | None = None, what: str = "byte string") -> bytes:
        """A length-prefixed byte string; ``size``: the only length allowed."""
        (n,) = self.unpack("<I")
        if size is not None and n != size:
            raise RemoteProtocolError(f"{what} has {n} bytes, expected {size}")
        return bytes(self.take(n))

    def vector(self, count: int) -> torch.Tensor:
        raw = self.take(4 * count)
        return torch.from_numpy(np.frombuffer(raw, dtype="<u4").astype(np.uint32))

    def left(self) -> int:
        return len(self.buf) - self.pos

    def blob_in(self, sizes: tuple[int, ...] | None, what: str) -> bytes:
        """A length-prefixed byte string whose length is one of ``sizes`` (any if None)."""
        (n,) = self.unpack("<I")
        if sizes is not None and n not in sizes:
            raise RemoteProtocolError(f"{what} has {n} bytes, expected one of {list(sizes)}")
        return bytes(self.take(n))

    def credential(self) -> tuple[bytes, bytes]:
        """An (identity key, signature) pair: both empty or of one supported curve's sizes."""
        identity = self.blob(None, "identity key")
        signature = self.blob(None, "signature")
        try:
            check_credential_sizes(identity, signature, sender=SERVER)
        except RemoteProtocolError as exc:
            raise RemoteProtocolError(str(exc)) from None
        return identity, signature

    def count(self, item_bytes: int, most: int | None = None, what: str = "list") -> int:
        """A list length, checked against ``most`` and against what is left (every item takes
        at least ``item_bytes``), so a huge length cannot allocate."""
        (n,) = self.unpack("<I")
        if most is not None and n > most:
            raise RemoteProtocolError(f"{what} has {n} entries; the configuration allows {most}")
        if n * item_bytes > self.left():
            raise RemoteProtocolError("message is truncated or has a bad length field")
        return int(n)


def _header_type(header: tuple[Any, ...]) -> type[Message]:
    magic, version, kind = header[:3]
    if magic != MAGIC:
        raise RemoteProtocolError("not a coded-fl message (bad magic)")
    if version != VERSION:
        raise RemoteProtocolError(
            f"message version {version} is not supported (this side speaks {VERSION}); "
            "run the same coded-fl version on the server and the silos"
        )
    cls = _TYPES.get(kind)
    if cls is None:
        raise RemoteProtocolError(f"unknown message type {kind}")
    return cls


class Header(NamedTuple):
    """The common header of an encoded message (what :func:`peek_header` reads).

    Parameters
    ----------
    type
        The message class the header names.
    digest, round, sender, recipient
        The header fields (see the module docstring).
    """

    type: type[Message]
    digest: bytes
    round: int
    sender: int
    recipient: int


def peek_header(buf: bytes | bytearray | memoryview) -> Header:
    """The header of an encoded message, read without parsing its body.

    Parameters
    ----------
    buf
        The encoded message, or at least its first ``HEADER_BYTES`` bytes.

    Returns
    -------
    Header
        The message class, the configuration digest, the round, the sender and the recipient.

    Raises
    ------
    RemoteProtocolError
        If the header is short, not coded-fl's, of another version or of an unknown type.
    """
    if len(buf) < _HEADER.size:
        raise RemoteProtocolError("message is shorter than its header")
    header = _HEADER.unpack(bytes(buf[: _HEADER.size]))
    _, _, _, digest, round_, sender, recipient = header
    return Header(_header_type(header), bytes(digest), round_, sender, recipient)


def peek_type(buf: bytes | bytearray | memoryview) -> type[Message]:
    """The type of an encoded message, read from its header alone (the body is not parsed).

    Parameters
    ----------
    buf
        The encoded message, or at least its first ``HEADER_BYTES`` bytes.

    Returns
    -------
    type[Message]
        The message class named by the header.

    Raises
    ------
    RemoteProtocolError
        If the header is short, not coded-fl's, of another version or of an unknown type.
    """
    return peek_header(buf).type


#: Bytes of the common header (what :func:`peek_type` reads).
HEADER_BYTES = _HEADER.size


def _signed_sizes(unsigned: int) -> tuple[int, ...]:
    """The sizes of an entry of ``unsigned`` bytes, unsigned or with a signature."""
    return tuple(unsigned + s for s in SIGNATURE_SIZES)


def _signed(creds: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[bytes, bytes], ...]:
    """The decoded credentials: empty when no entry is signed (as a sender that signs none
    builds them)."""
    return creds if any(i or g for i, g in creds) else ()


def decode(buf: bytes | bytearray | memoryview, *, limits: Limits | None = None) -> Message:
    """Parse bytes into a message; anything malformed raises :class:`RemoteProtocolError`.

    Parameters
    ----------
    buf
        The encoded message.
    limits
        The receiver's :class:`Limits` (from its configuration), if it knows them: every count
        and size is checked against them before anything is built. Without them counts are
        checked against the bytes left only.

    Returns
    -------
    Message

    Raises
    ------
    RemoteProtocolError
        If the bytes are not a well-formed message, or a count exceeds ``limits``.
    """
    r = _Reader(buf)
    header = r.unpack(_HEADER.format)
    _, _, _, digest, round_, sender, recipient = header
    cls = _header_type(header)
    head: dict[str, Any] = {
        "digest": bytes(digest),
        "round": round_,
        "sender": sender,
        "recipient": recipient,
    }
    lim = limits
    key_size = None if lim is None else lim.public_key_bytes
    share_sizes = None if lim is None else _signed_sizes(lim.sealed_share_bytes)
    tag_sizes = None if lim is None else _signed_sizes(TAG_ENTRY_BYTES)
    tag_size = None if lim is None else CONFIRM_BYTES
    silos = None if lim is None else lim.silos
    edges = None if lim is None else lim.edges
    box_size = None if lim is None else EDGE_KEY_BYTES + SEAL_OVERHEAD
    msg: Message
    if cls is KeyRequest:
        (size,) = r.unpack("<I")
        if size > MAX_CONFIG_BYTES:
            raise RemoteProtocolError(
                f"configuration of {size} bytes exceeds {MAX_CONFIG_BYTES} bytes"
            )
        msg = KeyRequest(**head, config=bytes(r.take(size)))
    elif cls is KeyReply:
        public_key = r.blob(key_size, "public key")
        identity, signature = r.credential()
        msg = KeyReply(**head, public_key=public_key, identity=identity, signature=signature)
    elif cls is TrainRequest:
        n = r.count(16, silos, "roster")
        entries = [
            (r.unpack("<i")[0], r.blob(key_size, "public key"), r.credential()) for _ in range(n)
        ]
        roster = tuple((s, k) for s, k, _ in entries)
        creds = _signed(tuple(c for _, _, c in entries))
        (flag,) = r.unpack("<B")
        if flag > 1:
            raise RemoteProtocolError(f"aligned flag {flag} is not 0 or 1")
        n = r.count(16, edges, "relayed edge keys")
        edge_keys = tuple(
            (*r.unpack("<iII"), r.blob(box_size, "sealed edge key")) for _ in range(n)
        )
        n = r.count(12, None if edges is None else edges * lim.silos, "deal")  # type: ignore[union-attr]
        deal = tuple(r.unpack("<IIi") for _ in range(n))
        msg = TrainRequest(
            **head,
            roster=roster,
            credentials=creds,
            aligned=bool(flag),
            edge_keys=edge_keys,  # type: ignore[arg-type]
            deal=deal,  # type: ignore[arg-type]
        )
    elif cls is Upload:
        (nbytes,) = r.unpack("<I")
        if nbytes % 4:
            raise RemoteProtocolError("masked vector length is not a multiple of 4 bytes")
        if lim is not None and nbytes != 4 * lim.vector_length:
            raise RemoteProtocolError(
                f"masked vector has {nbytes // 4} elements, expected {lim.vector_length}"
            )
        masked = r.vector(nbytes // 4)
        context = r.blob(None, "share context")
        if lim is not None and len(context) not in (0, CONTEXT_BYTES):  # 0: a group-masked round
            raise RemoteProtocolError(
                f"share context has {len(context)} bytes, expected {CONTEXT_BYTES} (or none)"
            )
        n = r.count(8, silos, "tags")
        tags = tuple((r.unpack("<i")[0], r.blob_in(tag_sizes, "tag entry")) for _ in range(n))
        n = r.count(8, silos, "shares")
        shares = tuple(
            (r.unpack("<i")[0], r.blob_in(share_sizes, "sealed share")) for _ in range(n)
        )
        n = r.count(16, None if edges is None else edges * lim.silos, "dealt edge keys")  # type: ignore[union-attr]
        dealt = tuple((*r.unpack("<iII"), r.blob(box_size, "sealed edge key")) for _ in range(n))
        n = r.count(12, edges, "edge confirmations")
        confirms = tuple((*r.unpack("<II"), r.blob(tag_size, "edge tag")) for _ in range(n))
        msg = Upload(
            **head,
            masked=masked,
            shares=shares,
            context=context,
            tags=tags,
            dealt=dealt,  # type: ignore[arg-type]
            confirms=confirms,  # type: ignore[arg-type]
        )
    elif cls is RecoveryRequest:
        n, rows = r.unpack("<II")
        # every weight row has one entry per survivor and n - s >= 1, so rows <= |S|
        most = n if lim is None else min(lim.max_rows, n - lim.min_survivors + 1)
        if lim is not None and lim.comparisons and n > lim.min_survivors:
            most = min(lim.max_rows, 1 + lim.comparisons)
        if lim is not None and not lim.min_survivors <= n <= lim.silos:
            raise RemoteProtocolError(
                f"{n} survivors; the configuration needs {lim.min_survivors}..{lim.silos}"
            )
        if rows > most:
            raise RemoteProtocolError(f"{rows} weight rows for {n} survivors (at most {most})")
        if 4 * n * (6 + rows) > r.left():  # survivors, weights, five length fields each
            raise RemoteProtocolError("message is truncated or has a bad length field")
        survivors = tuple(int(v) for v in np.frombuffer(r.take(4 * n), dtype="<i4"))
        w = np.frombuffer(r.take(4 * n * rows), dtype="<u4").reshape(rows, n)
        weights = tuple(tuple(int(v) for v in row) for row in w)
        boxes = tuple(r.blob(None, "sealed share") for _ in range(n))
        tokens = tuple(r.blob(None, "share token") for _ in range(n))
        signed = [(r.blob(key_size, "public key"), r.credential()) for _ in range(n)]
        keys = tuple(k for k, _ in signed)
        for box, token in zip(boxes, tokens, strict=True):  # exactly one of the two
            if lim is not None and not (
                (len(box) in (share_sizes or ()) and not token)
                or (not box and len(token) in _signed_sizes(TOKEN_BYTES))
            ):
                raise RemoteProtocolError(
                    f"a survivor's entry has a sealed share of {len(box)} bytes and a token of "
                    f"{len(token)} bytes; expected exactly one ({list(share_sizes or ())} or "
                    f"{list(_signed_sizes(TOKEN_BYTES))})"
                )
        msg = RecoveryRequest(
            **head,
            survivors=survivors,
            weights=weights,
            shares=boxes,
            keys=keys,
            tokens=tokens,
            credentials=_signed(tuple(c for _, c in signed)),
        )
    elif cls is Refusal:
        code, accused, bound = r.unpack("<BiQ")
        try:
            reason = RefusalCode(code)
        except ValueError:
            raise RemoteProtocolError(f"unknown refusal code {code}") from None
        if bound > MAX_WEIGHT_BOUND or (bound != 0) != (reason == RefusalCode.WEIGHT_BOUND):
            raise RemoteProtocolError(
                f"refusal bound {bound} does not fit code {reason.label} (a power of two "
                "<= 2^62 for a weight-bound refusal, 0 otherwise)"
            )
        if bound and bound & (bound - 1):
            raise RemoteProtocolError(f"refusal bound {bound} is not a power of two")
        (size,) = r.unpack("<I")
        if size > MAX_DETAIL_BYTES:
            raise RemoteProtocolError(f"refusal detail exceeds {MAX_DETAIL_BYTES} bytes")
        detail = bytes(r.take(size)).decode("utf-8", "replace")
        evidence = r.blob_in(SIGNATURE_SIZES, "accusation signature")
        if evidence and reason != RefusalCode.ACCUSES:
            raise RemoteProtocolError(f"a {reason.label} refusal carries an accusation signature")
        msg = Refusal(
            **head,
            code=reason,
            accused=None if accused == _NO_SILO else accused,
            detail=detail,
            bound=bound,
            evidence=evidence,
        )
    elif cls is RevealRequest:
        accuser, flag = r.unpack("<iB")
        if flag > 1:
            raise RemoteProtocolError(f"derived flag {flag} is not 0 or 1")
        context = r.blob(CONTEXT_BYTES, "share context")
        if lim is None:
            item = r.blob(None, "disputed item")
        elif flag:
            item = r.blob_in(_signed_sizes(TOKEN_BYTES), "disputed token")
        else:
            item = r.blob_in(share_sizes, "disputed sealed share")
        accuser_key = r.blob(key_size, "public key")
        credential = r.credential()
        accusation = r.blob_in(SIGNATURE_SIZES, "accusation signature")
        msg = RevealRequest(
            **head,
            accuser=accuser,
            derived=bool(flag),
            context=context,
            item=item,
            accuser_key=accuser_key,
            accuser_credential=credential,
            accusation=accusation,
        )
    elif cls is Reveal:
        (accuser,) = r.unpack("<i")
        msg = Reveal(**head, accuser=accuser, secret=r.blob(EPHEMERAL_BYTES, "revealed scalar"))
    else:
        rows, cols = r.unpack("<II")
        if lim is not None and (rows > lim.max_rows or cols != lim.piece_length):
            raise RemoteProtocolError(
                f"recovery reply of {rows} x {cols}; the configuration allows at most "
                f"{lim.max_rows} rows of {lim.piece_length}"
            )
        if rows * cols * 4 > r.left():
            raise RemoteProtocolError("message is truncated or has a bad length field")
        msg = RecoveryReply(**head, rows=r.vector(rows * cols).reshape(rows, cols))
    if r.pos != len(r.buf):
        raise RemoteProtocolError(f"{len(r.buf) - r.pos} unexpected trailing bytes in message")
    return msg
