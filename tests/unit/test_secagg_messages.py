"""The binary codec: exact round trips; anything malformed is refused, never half-read."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.messages import (
    KeyReply,
    KeyRequest,
    RecoveryReply,
    RecoveryRequest,
    TrainRequest,
    Upload,
    decode,
    encode,
)

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
            digest=D, round=5, sender=2, recipient=-1, masked=v, shares=((0, b"xy"), (2, b"zz"))
        ),
        RecoveryRequest(
            digest=D,
            round=5,
            sender=-1,
            recipient=0,
            survivors=(0, 2),
            weights=((1, 2), (3, 4)),
            shares=(b"s0", b"s2"),
            keys=(b"a" * 32, b"b" * 32),
        ),
        RecoveryReply(digest=D, round=5, sender=0, recipient=-1, rows=v[:6].reshape(2, 3)),
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
        len(encode(up))
        - len(encode(Upload(digest=D, round=5, sender=2, recipient=-1, shares=up.shares)))
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
