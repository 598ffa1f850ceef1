"""The binary codec: exact round trips; anything malformed is refused, never half-read."""

from __future__ import annotations

import contextlib
import struct
import time
import tracemalloc
from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.masking.aligned_wire import EdgeKeyRequest, EdgeKeyUpload
from coded_fl.secagg.messages import (
    HEADER_BYTES,
    MAX_CONFIG_BYTES,
    KeyReply,
    KeyRequest,
    Limits,
    Message,
    RecoveryReply,
    RecoveryRequest,
    TrainRequest,
    Upload,
    decode,
    encode,
    peek_header,
    peek_type,
)
from simulations.runtime.secagg_harness import Harness

D = b"12345678"


def samples():
    v = torch.arange(7, dtype=torch.int64).to(torch.uint32)
    return [
        KeyRequest(digest=D, round=0, sender=-1, recipient=3, config=b'{"a":1}'),
        KeyReply(digest=D, round=0, sender=3, recipient=-1, public_key=b"k" * 32),
        TrainRequest(
            digest=D, round=5, sender=-1, recipient=2, roster=((0, b"a" * 32), (2, b"b" * 32))
        ),
        Upload(
            digest=D,
            round=5,
            sender=2,
            recipient=-1,
            masked=v,
            shares=((0, b"xy"), (2, b"zz")),
            context=b"c" * 16,
            tags=((1, b"t" * 8),),
        ),
        RecoveryRequest(
            digest=D,
            round=5,
            sender=-1,
            recipient=0,
            survivors=(0, 2),
            weights=((1, 2), (3, 4)),
            shares=(b"s0", b""),
            keys=(b"a" * 32, b"b" * 32),
            tokens=(b"", b"t" * 24),
        ),
        RecoveryReply(digest=D, round=5, sender=0, recipient=-1, rows=v[:6].reshape(2, 3)),
        # masking="aligned": relayed and dealt edge keys, deal instructions, confirmations
        TrainRequest(
            digest=D,
            round=6,
            sender=-1,
            recipient=2,
            roster=((0, b"a" * 32), (2, b"b" * 32)),
            aligned=True,
            extension=EdgeKeyRequest(
                edge_keys=((0, 0, 1, b"e" * 60), (4, 1, 2, b"f" * 60)),
                deal=((1, 2, 0), (1, 2, 5)),
            ),
        ),
        Upload(
            digest=D,
            round=6,
            sender=2,
            recipient=-1,
            masked=v,
            extension=EdgeKeyUpload(
                dealt=((0, 1, 2, b"g" * 60),), confirms=((0, 1, b"c" * 8), (1, 2, b"d" * 8))
            ),
        ),
    ]


def same(a, b):
    assert type(a) is type(b)
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y)
        else:
            assert x == y, name


@pytest.mark.parametrize("msg", samples(), ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    raw = encode(msg)
    same(decode(raw), msg)
    with pytest.raises(RemoteProtocolError, match=r"truncated|bad length"):
        decode(raw[:-1])
    with pytest.raises(RemoteProtocolError, match="trailing"):
        decode(raw + b"\0")


def test_vectors_travel_as_four_bytes_per_element():
    up = samples()[3]
    assert (
        len(encode(up)) - len(encode(replace(up, masked=torch.empty(0, dtype=torch.uint32))))
        == 4 * 7
    )


def test_wrong_magic_version_and_type():
    raw = bytearray(encode(samples()[0]))
    bad = bytearray(raw)
    bad[0:3] = b"XYZ"
    with pytest.raises(RemoteProtocolError, match="magic"):
        decode(bytes(bad))
    bad = bytearray(raw)
    bad[3] = 99
    with pytest.raises(RemoteProtocolError, match="version 99"):
        decode(bytes(bad))
    bad = bytearray(raw)
    bad[4] = 42
    with pytest.raises(RemoteProtocolError, match="unknown message type"):
        decode(bytes(bad))


@given(data=st.data())
def test_mutated_bytes_give_a_valid_message_or_a_protocol_error(data):
    msg = data.draw(st.sampled_from(samples()))
    raw = bytearray(encode(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    with contextlib.suppress(RemoteProtocolError):
        decode(bytes(raw[:cut]))


def test_huge_length_fields_do_not_allocate():
    raw = bytearray(encode(samples()[2]))
    raw[29:33] = (2**31).to_bytes(4, "little")  # roster length, right after the 29-byte header
    with pytest.raises(RemoteProtocolError):
        decode(bytes(raw))


# ----------------------------------------------------------------------------- bounded decoding


def _recovery_request_head() -> bytes:
    """The 29-byte header of a RecoveryRequest (what precedes its survivor and row counts)."""
    return encode(samples()[4])[:HEADER_BYTES]


@pytest.mark.parametrize("rows", [2**20, 2**31, 2**32 - 1])
def test_a_row_count_without_survivors_is_refused_before_anything_is_built(rows):
    # 37 bytes: no survivors, a huge row count; every row is empty, so no byte count can catch
    # it: decoding must refuse it from the counts alone (2^23 rows used to take 6.4 s)
    raw = _recovery_request_head() + struct.pack("<II", 0, rows)
    assert len(raw) == 37
    tracemalloc.start()
    t0 = time.thread_time()
    try:
        with pytest.raises(RemoteProtocolError, match="rows"):
            decode(raw)
        seconds = time.thread_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < 0.05 and peak < 1 << 20


CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    recovery_threshold=3,
    vector_length=12,
    run_id="limits",
)


def _round_messages() -> dict[str, Message]:
    """One message of each type from a real round of ``CFG`` (every upload in: 4 weight rows)."""
    h = Harness(CFG, seed=3)
    reqs = h.server.start_key_exchange()
    keys = [h.clients[r.recipient].receive(r) for r in reqs]
    for k in keys:
        h.server.receive(k)
    h.server.close_key_exchange()
    trains = h.server.start_round(1)
    ups = []
    for req in trains:
        c = h.clients[req.recipient]
        task = c.on_train_request(req)
        ups.append(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    for up in ups:
        h.server.receive(up)
    recs = h.server.close_collection()
    assert isinstance(recs, list)
    reply = h.clients[recs[0].recipient].receive(recs[0])
    return {
        "key_request": reqs[0],
        "key_reply": keys[0],
        "train": trains[0],
        "upload": ups[0],
        "recovery_request": recs[0],
        "recovery_reply": reply,
    }


def test_limits_follow_the_configuration():
    lim = Limits.for_config(CFG)
    m = CFG.sharing.piece_length
    assert (lim.silos, lim.vector_length, lim.piece_length) == (5, 12, m)
    # the repetition code (groups {0, 1, 2} and {3, 4}): row 0 and up to n - g = 3 comparisons
    assert lim.min_survivors == 4 and lim.max_rows == 4 and lim.comparisons == 3
    # an unsigned sealed entry: the ephemeral key (32), the box (4 m + 12 nonce + 16 tag)
    assert lim.sealed_share_bytes == 32 + 4 * m + 28 and lim.public_key_bytes == 32
    msgs = _round_messages()
    for msg in msgs.values():  # what the protocol sends passes its own limits
        same(decode(encode(msg), limits=lim), msg)


def _over_limit_variants() -> list[tuple[str, Message]]:
    msgs = _round_messages()
    up, rq, rr = msgs["upload"], msgs["recovery_request"], msgs["recovery_reply"]
    tr, kr = msgs["train"], msgs["key_reply"]
    assert isinstance(up, Upload) and isinstance(rq, RecoveryRequest)
    assert isinstance(rr, RecoveryReply) and isinstance(tr, TrainRequest)
    assert isinstance(kr, KeyReply)
    pad = torch.zeros(1, dtype=torch.uint32)
    n1 = CFG.n + 1
    return [
        ("key longer than 32 bytes", replace(kr, public_key=kr.public_key + b"\0")),
        ("roster of n + 1", replace(tr, roster=tuple((i, b"k" * 32) for i in range(n1)))),
        ("roster key of 31 bytes", replace(tr, roster=((0, b"k" * 31),))),
        ("upload of d + 1", replace(up, masked=torch.cat([up.masked, pad]))),
        ("upload of d - 1", replace(up, masked=up.masked[:-1])),
        ("n + 1 shares", replace(up, shares=tuple((i, up.shares[0][1]) for i in range(n1)))),
        ("share one byte short", replace(up, shares=((0, up.shares[0][1][:-1]),))),
        (
            "n + 1 survivors",
            replace(
                rq,
                survivors=tuple(range(n1)),
                weights=((1,) * n1,),
                shares=(rq.shares[0],) * n1,
                keys=(rq.keys[0],) * n1,
                tokens=(rq.tokens[0],) * n1,
            ),
        ),
        (
            "max_rows + 1 weight rows",
            replace(rq, weights=rq.weights + rq.weights[:1] * (5 - len(rq.weights))),
        ),
        ("share of 3 bytes", replace(rq, shares=(b"abc", *rq.shares[1:]))),
        ("token of 23 bytes", replace(rq, tokens=tuple(t[:-1] for t in rq.tokens))),
        ("share and token", replace(rq, tokens=tuple(t or b"t" * 24 for t in rq.tokens))),
        ("context of 15 bytes", replace(up, context=up.context[:-1])),
        ("tag of 9 bytes", replace(up, tags=tuple((j, t + b"!") for j, t in up.tags))),
        ("key of 33 bytes", replace(rq, keys=(rq.keys[0] + b"!", *rq.keys[1:]))),
        ("max_rows + 1 reply rows", replace(rr, rows=rr.rows[:1].repeat(5, 1))),
        ("reply rows of m + 1", replace(rr, rows=torch.cat([rr.rows, rr.rows[:, :1]], 1))),
        ("reply rows of m - 1", replace(rr, rows=rr.rows[:, :-1])),
    ]


@pytest.mark.parametrize("case", range(18))
def test_counts_beyond_the_configuration_are_refused_by_the_decoder(case):
    name, msg = _over_limit_variants()[case]
    raw = encode(msg)
    decode(raw)  # well formed: without limits the bytes alone cannot tell
    try:
        decode(raw, limits=Limits.for_config(CFG))
    except RemoteProtocolError:
        return
    pytest.fail(f"{name}: accepted")


def test_a_config_longer_than_any_configuration_is_refused():
    msg = replace(_round_messages()["key_request"], config=b" " * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(RemoteProtocolError, match="configuration"):
        decode(encode(msg))


def test_peek_header_reads_the_header_alone():
    msg = _round_messages()["upload"]
    raw = encode(msg)
    head = peek_header(raw[:HEADER_BYTES])
    assert head == (Upload, msg.digest, msg.round, msg.sender, msg.recipient)
    assert peek_type(raw) is Upload


def test_every_message_type_has_one_codec_and_a_distinct_wire_type():
    from coded_fl.secagg.messages import Message
    from coded_fl.secagg.messages.codecs import CODECS, TYPES

    concrete = {c for c in Message.__subclasses__()}
    assert set(CODECS) == set(TYPES.values()) == concrete
    assert len(TYPES) == len(concrete)  # no two classes share a type byte
