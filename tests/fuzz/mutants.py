"""Mutants of encoded messages, as Hypothesis strategies.

:func:`fields` walks an encoded coded-fl message independently of the decoder and names every
count, length and silo id in it (with its offset), so that the mutations can aim at them:
a count or length set to 0, 1, n - 1, n, n + 1, 2^31 - 1, 2^31, 2^32 - 1, one more or one less,
or anything; an id set to -2, -1, n, n + 1, 2^31 - 1, -2^31. The other mutations are blind:
bit flips, byte writes, truncations, extensions, deleted, duplicated or overwritten slices, and
a header rewritten to another type, version, digest or round. A recovery request can also have
its weight rows forged (a unit vector, a scaled or perturbed decoding vector, a zero, repeated
or extra row), re-encoded so that only the weights are wrong.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from hypothesis import strategies as st

from coded_fl.secagg.messages import HEADER_BYTES, RecoveryRequest, decode, encode

P = 2**31 - 1
U32 = (0, 1, 2**31 - 1, 2**31, 2**32 - 1)
I32 = (-(2**31), -2, -1, 2**31 - 1)


@dataclass(frozen=True)
class Field:
    """A count (u32), a length (u32) or a silo id (i32) at ``offset`` of an encoded message."""

    offset: int
    kind: str  # "count", "length" or "id"
    name: str


def fields(raw: bytes) -> list[Field]:
    """Every count, length and id of a well-formed encoded message (see the layout in
    :mod:`coded_fl.secagg.messages`), found by walking it."""
    kind = raw[4]
    out = [Field(21, "id", "sender"), Field(25, "id", "recipient")]
    pos = HEADER_BYTES

    def u32(at: int) -> int:
        return struct.unpack_from("<I", raw, at)[0]

    def blob(name: str) -> None:
        nonlocal pos
        out.append(Field(pos, "length", name))
        pos += 4 + u32(pos)

    if kind == 1:  # KeyRequest config
        blob("config")
    elif kind == 2:  # KeyReply public key, identity key, signature
        for name in ("public_key", "identity", "signature"):
            blob(name)
    elif kind in (3, 4):  # TrainRequest roster / Upload masked, context, tags, shares
        lists: list[tuple[str, tuple[str, ...]]] = [("roster", ("key", "identity", "signature"))]
        if kind == 4:
            blob("masked")
            blob("context")
            lists = [("tags", ("tag",)), ("shares", ("share",))]
        for name, items in lists:
            count = u32(pos)
            out.append(Field(pos, "count", name))
            pos += 4
            for _ in range(count):
                out.append(Field(pos, "id", "silo"))
                pos += 4
                for item in items:
                    blob(item)
        # the aligned flag and the scheme's extension id byte (0: none; 1 EdgeKeyRequest,
        # 2 EdgeKeyUpload): one byte each, aimed at as ids where four bytes follow
        for name in ("aligned flag", "extension id") if kind == 3 else ("extension id",):
            if pos + 4 <= len(raw):
                out.append(Field(pos, "id", name))
            pos += 1
        ext = raw[pos - 1] if pos <= len(raw) else 0
        # (EdgeKeyRequest) edge keys: dealer, q, h, box; deal: q, h, recipient
        # (EdgeKeyUpload) dealt: recipient, q, h, box; confirms: q, h, tag
        groups: list[tuple[str, bool | None]] = (
            [("edge_keys", True), ("deal", False)]
            if ext == 1
            else [("dealt", True), ("confirms", None)]
            if ext == 2
            else []
        )
        for name, boxed in groups:
            count = u32(pos)
            out.append(Field(pos, "count", name))
            pos += 4
            for _ in range(count):
                width = 3 if boxed is not None else 2
                out += [Field(pos + 4 * i, "id", f"{name} id") for i in range(width)]
                pos += 4 * width
                if boxed is not False:
                    blob("edge box" if boxed else "edge tag")
    elif kind == 5:  # RecoveryRequest
        n, rows = struct.unpack_from("<II", raw, pos)
        out += [Field(pos, "count", "survivors"), Field(pos + 4, "count", "rows")]
        pos += 8
        out += [Field(pos + 4 * i, "id", "survivor") for i in range(n)]
        pos += 4 * n + 4 * n * rows
        for i in range(2 * n):
            blob(("share", "token")[i // n])
        for _ in range(n):  # per survivor: its key, identity key and signature
            for name in ("key", "identity", "signature"):
                blob(name)
        views = u32(pos)  # the survivors' view signatures (0 or n of them)
        out.append(Field(pos, "count", "views"))
        pos += 4
        for _ in range(views):
            blob("view")
    elif kind == 6:  # RecoveryReply
        out += [Field(pos, "count", "rows"), Field(pos + 4, "count", "cols")]
    elif kind == 7:  # Refusal
        out += [
            Field(pos + 1, "id", "accused"),
            Field(pos + 5, "count", "bound"),  # the low half of the 8-byte bound
            Field(pos + 13, "length", "detail"),
        ]
        pos += 17 + u32(pos + 13)
        blob("evidence")
    elif kind == 8:  # RevealRequest: accuser, derived flag, the item and the accusation
        out.append(Field(pos, "id", "accuser"))
        pos += 5
        for name in ("context", "item", "accuser key", "identity", "endorsement", "accusation"):
            blob(name)
    elif kind == 9:  # Reveal: accuser, scalar
        out.append(Field(pos, "id", "accuser"))
        pos += 4
        blob("secret")
    elif kind == 10:  # ViewRequest: the survivors
        n = u32(pos)
        out.append(Field(pos, "count", "survivors"))
        pos += 4
        out += [Field(pos + 4 * i, "id", "survivor") for i in range(n)]
    elif kind == 11:  # ViewReply: the signature
        blob("view signature")
    return out


@st.composite
def _value(draw: st.DrawFn, f: Field, n: int, current: int) -> int:
    if f.kind == "id":
        return draw(st.sampled_from((*I32, n, n + 1, n - 1, 0)) | st.integers(-(2**31), 2**31 - 1))
    pick = st.sampled_from(
        (*U32, n - 1, n, n + 1, max(current - 1, 0), min(current + 1, 2**32 - 1))
    )
    return draw(pick | st.integers(0, 2**32 - 1))


@st.composite
def _one(draw: st.DrawFn, raw: bytearray, spots: list[Field], n: int, header: bool = True) -> str:
    """Apply one mutation to ``raw`` in place; returns its label. ``header``: the mutations
    may rewrite the coded-fl header's type, version, digest or round."""
    ops = ["flip", "byte", "truncate", "extend", "delete", "duplicate", "overwrite"]
    if header:
        ops.append("header")
    if spots:
        ops += ["field", "field"]  # aim at counts and ids more often
    op = draw(st.sampled_from(ops))
    size = len(raw)
    if op == "extend" or size == 0:
        raw += draw(st.binary(min_size=1, max_size=64))
        return "extend"
    if op == "flip":
        i = draw(st.integers(0, size - 1))
        raw[i] ^= 1 << draw(st.integers(0, 7))
        return "flip"
    if op == "byte":
        raw[draw(st.integers(0, size - 1))] = draw(st.integers(0, 255))
        return "byte"
    if op == "truncate":
        del raw[draw(st.integers(0, size - 1)) :]
        return "truncate"
    if op in ("delete", "duplicate", "overwrite"):
        i = draw(st.integers(0, size - 1))
        j = draw(st.integers(i + 1, min(size, i + 64)))
        if op == "delete":
            del raw[i:j]
        elif op == "duplicate":
            raw[j:j] = raw[i:j]
        else:
            raw[i:j] = draw(st.binary(min_size=j - i, max_size=j - i))
        return op
    if op == "header" and size >= HEADER_BYTES:
        what = draw(st.sampled_from(["type", "version", "digest", "round"]))
        if what == "type":
            raw[4] = draw(st.integers(0, 8))
        elif what == "version":
            raw[3] = draw(st.integers(0, 255))
        elif what == "digest":
            raw[5:13] = draw(st.binary(min_size=8, max_size=8))
        else:
            r = struct.unpack_from("<Q", raw, 13)[0]
            new = draw(st.sampled_from([0, max(r - 1, 0), min(r + 1, 2**64 - 1), 2**63, 2**64 - 1]))
            struct.pack_into("<Q", raw, 13, new)
        return f"header:{what}"
    if op == "header":
        raw += draw(st.binary(min_size=1, max_size=8))
        return "extend"
    f = draw(st.sampled_from(spots))
    if f.offset + 4 > len(raw):
        raw += bytes(f.offset + 4 - len(raw))
    fmt = "<i" if f.kind == "id" else "<I"
    struct.pack_into(
        fmt, raw, f.offset, draw(_value(f, n, struct.unpack_from(fmt, raw, f.offset)[0]))
    )
    return f"{f.kind}:{f.name}"


def forge_weights(msg: RecoveryRequest, how: str, which: int) -> RecoveryRequest:
    """``msg`` with forged weight rows (``how``), re-encoded so only the weights are wrong."""
    w = [list(r) for r in msg.weights]
    n = len(msg.survivors)
    i = which % n
    if how == "unit":  # unmask one silo
        w[0] = [int(j == i) for j in range(n)]
    elif how == "scaled":
        w[0] = [v * 2 % P for v in w[0]]
    elif how == "perturbed":
        w[0][i] = (w[0][i] + 1) % P
    elif how == "zero-row":
        w[-1] = [0] * n
    elif how == "repeated":
        w[-1] = list(w[0])
    elif how == "extra-row":
        w.append(list(w[-1]))
    elif how == "swapped":
        w.reverse()
    elif how == "parity-as-decoding":
        w = [w[-1]]
    elif how == "out-of-field":
        w[0][i] = P + w[0][i] % 7
    return dataclasses.replace(msg, weights=tuple(tuple(r) for r in w))


FORGERIES = (
    "unit",
    "scaled",
    "perturbed",
    "zero-row",
    "repeated",
    "extra-row",
    "swapped",
    "parity-as-decoding",
    "out-of-field",
)


@st.composite
def mutant(draw: st.DrawFn, pool: list, n: int) -> tuple[object, bytes, tuple[str, ...]]:
    """A base message from ``pool`` (fresh, a replay, for another silo or session: whatever
    the stage makes of it) and its encoding after 0 to 3 mutations (mostly 1 or more).

    Returns (base, bytes, labels of the mutations; "as-is" for none).
    """
    base = pool[draw(st.integers(0, len(pool) - 1))]
    labels: list[str] = []
    if isinstance(base, RecoveryRequest) and draw(st.integers(0, 3)) == 0:
        how = draw(st.sampled_from(FORGERIES))
        base = forge_weights(base, how, draw(st.integers(0, 10)))
        labels.append(f"weights:{how}")
    raw = bytearray(encode(base))
    spots = fields(bytes(raw))
    count = draw(st.sampled_from((0, 1, 1, 1, 2, 2, 3)))
    for _ in range(count):
        labels.append(draw(_one(raw, spots, n)))
    return base, bytes(raw), tuple(labels) or ("as-is",)


def decoded_or_none(raw: bytes) -> object:
    """The message the bytes decode to without limits, or None."""
    try:
        return decode(raw)
    except Exception:
        return None
