"""Scheme-owned message extensions (issue 28, item 3): the aligned scheme's edge keys travel as
its :class:`EdgeKeyRequest` and :class:`EdgeKeyUpload`; round trips, an unknown or misplaced
extension refused with a typed error, the receiver's limits enforced, the registry's checks, and
a run whose scheme did not define an extension refusing a message that carries it."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.masking import SharedMasks, register
from coded_fl.secagg.masking.aligned_wire import (
    BOX_BYTES,
    EDGE_KEY_REQUEST,
    EdgeKeyRequest,
    EdgeKeyUpload,
)
from coded_fl.secagg.messages import Limits, Message, TrainRequest, Upload, decode, encode
from coded_fl.secagg.messages.extensions import (
    ExtensionCodec,
    MessageExtension,
    register_extension,
)
from simulations.runtime.secagg_harness import Harness

D = b"12345678"
CFG = ProtocolConfig(
    num_silos=9,
    num_stragglers=2,
    privacy_threshold=1,
    vector_length=12,
    run_id="extensions",
    masking="aligned",
)
LIM = Limits.for_config(CFG)  # 3 groups: a triangle, 3 edges
TAG = 8  # an edge tag's bytes (CONFIRM_BYTES)

i32 = st.integers(-(2**31), 2**31 - 1)
u32 = st.integers(0, 2**32 - 1)
relayed = st.tuples(i32, u32, u32, st.binary(max_size=80))
deals = st.tuples(u32, u32, i32)
tags = st.tuples(u32, u32, st.binary(max_size=16))


def _request(ext: MessageExtension | None, *, aligned: bool = False) -> TrainRequest:
    roster = ((0, b"a" * 32), (4, b"b" * 32))
    return TrainRequest(
        digest=D, round=3, sender=-1, recipient=0, roster=roster, aligned=aligned, extension=ext
    )


def _upload(ext: MessageExtension | None) -> Upload:
    masked = torch.arange(12, dtype=torch.int64).to(torch.uint32)
    return Upload(digest=D, round=3, sender=4, recipient=-1, masked=masked, extension=ext)


@given(
    edge_keys=st.lists(relayed, max_size=5).map(tuple),
    deal=st.lists(deals, max_size=5).map(tuple),
    aligned=st.booleans(),
)
def test_an_edge_key_request_round_trips(edge_keys, deal, aligned):
    msg = _request(EdgeKeyRequest(edge_keys=edge_keys, deal=deal), aligned=aligned)
    assert decode(encode(msg)) == msg


@given(dealt=st.lists(relayed, max_size=5).map(tuple), confirms=st.lists(tags, max_size=5))
def test_an_edge_key_upload_round_trips(dealt, confirms):
    msg = _upload(EdgeKeyUpload(dealt=dealt, confirms=tuple(confirms)))
    out = decode(encode(msg))
    assert isinstance(out, Upload) and out.extension == msg.extension
    assert torch.equal(out.masked, msg.masked)


def test_without_an_extension_one_zero_byte_follows_the_shared_fields():
    bare, empty = encode(_request(None)), encode(_request(EdgeKeyRequest()))
    assert bare[-1] == 0 and len(empty) == len(bare) + 8  # id 1 in place of 0, two counts
    assert decode(bare).extension is None  # type: ignore[attr-defined]
    assert decode(empty).extension == EdgeKeyRequest()  # type: ignore[attr-defined]


def test_an_unknown_extension_id_is_a_typed_error():
    raw = bytearray(encode(_upload(None)))
    for wire_id in (3, 99, 255):
        raw[-1] = wire_id
        with pytest.raises(RemoteProtocolError, match=f"unknown message extension {wire_id}"):
            decode(bytes(raw))


def test_an_extension_on_the_wrong_message_is_refused_at_both_ends():
    # the bytes of an EdgeKeyUpload (id 2, two empty lists) after a TrainRequest's flag
    raw = encode(_request(None))[:-1] + struct.pack("<BII", EdgeKeyUpload.WIRE_ID, 0, 0)
    with pytest.raises(RemoteProtocolError, match="EdgeKeyUpload does not travel on TrainRequest"):
        decode(raw)
    raw = encode(_upload(None))[:-1] + struct.pack("<BII", EdgeKeyRequest.WIRE_ID, 0, 0)
    with pytest.raises(RemoteProtocolError, match="EdgeKeyRequest does not travel on Upload"):
        decode(raw)
    with pytest.raises(InputError, match="does not travel"):
        encode(_request(EdgeKeyUpload()))  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Unregistered(MessageExtension):
    WIRE_ID: ClassVar[int] = 251
    MESSAGE: ClassVar[type[Message] | None] = Upload


def test_an_unregistered_extension_cannot_be_encoded_and_the_registry_checks_ids():
    with pytest.raises(InputError, match="not registered"):
        encode(_upload(_Unregistered()))
    taken = type("Taken", (_Unregistered,), {"WIRE_ID": EdgeKeyRequest.WIRE_ID})
    with pytest.raises(ConfigurationError, match="EdgeKeyRequest's already"):
        register_extension(taken, EDGE_KEY_REQUEST.write, EDGE_KEY_REQUEST.read)
    for bad in ({"WIRE_ID": 0}, {"WIRE_ID": 256}, {"MESSAGE": None}):
        cls = type("Bad", (_Unregistered,), bad)
        with pytest.raises(ConfigurationError, match="WIRE_ID"):
            register_extension(cls, EDGE_KEY_REQUEST.write, EDGE_KEY_REQUEST.read)
    # a scheme whose request extension travels on the Upload is not registered
    misplaced = ExtensionCodec(EdgeKeyUpload, EDGE_KEY_REQUEST.write, EDGE_KEY_REQUEST.read)
    wrong = type("Wrong", (SharedMasks,), {"name": "test-wrong", "request_extension": misplaced})
    with pytest.raises(ConfigurationError, match="must travel on TrainRequest"):
        register(wrong())


def _over(n: int, box: int = BOX_BYTES) -> tuple[tuple[int, int, int, bytes], ...]:
    return tuple((4, 0, 1, b"x" * box) for _ in range(n))


@pytest.mark.parametrize(
    ("name", "msg"),
    [
        ("relayed edge keys", _request(EdgeKeyRequest(edge_keys=_over(LIM.edges + 1)))),
        ("sealed edge key", _request(EdgeKeyRequest(edge_keys=_over(1, BOX_BYTES - 1)))),
        ("deal", _request(EdgeKeyRequest(deal=((0, 1, 4),) * (LIM.edges * LIM.silos + 1)))),
        ("dealt edge keys", _upload(EdgeKeyUpload(dealt=_over(LIM.edges * LIM.silos + 1)))),
        ("sealed edge key", _upload(EdgeKeyUpload(dealt=_over(1, BOX_BYTES + 1)))),
        ("edge confirmations", _upload(EdgeKeyUpload(confirms=((0, 1, b"t" * TAG),) * 4))),
        ("edge tag", _upload(EdgeKeyUpload(confirms=((0, 1, b"t" * (TAG + 1)),)))),
    ],
)
def test_the_extensions_are_read_within_the_receivers_limits(name, msg):
    raw = encode(msg)
    decode(raw)  # well formed: without limits the bytes alone cannot tell
    with pytest.raises(RemoteProtocolError, match=name):
        decode(raw, limits=LIM)


def test_what_the_limits_allow_is_taken():
    full = EdgeKeyRequest(edge_keys=_over(LIM.edges), deal=((0, 1, 4),) * LIM.edges * LIM.silos)
    assert decode(encode(_request(full)), limits=LIM) == _request(full)
    up = _upload(EdgeKeyUpload(dealt=_over(2), confirms=((0, 1, b"t" * TAG),) * LIM.edges))
    assert decode(encode(up), limits=LIM).extension == up.extension  # type: ignore[attr-defined]


@pytest.mark.parametrize("masking", ["shares", "test-unmasked"])
def test_a_silo_refuses_an_extension_its_scheme_did_not_define(masking):
    import tests.unit.test_masking_registry  # noqa: F401  (registers "test-unmasked")

    cfg = ProtocolConfig(
        num_silos=6,
        num_stragglers=2,
        privacy_threshold=1,
        vector_length=20,
        code="repetition",
        masking=masking,
    )
    h = Harness(cfg, seed=2)
    h.setup()
    (request, *_) = h.server.start_round(1)
    c = h.clients[request.recipient]
    before = c.to_bytes()
    forged = decode(encode(dataclasses.replace(request, extension=EdgeKeyRequest())))
    with pytest.raises(RemoteProtocolError, match="EdgeKeyRequest extension") as err:
        c.receive(forged)
    assert err.value.sender == -1 and c.to_bytes() == before
    c.receive(request)  # the real request is taken


def test_a_shares_server_refuses_an_upload_with_edge_keys():
    cfg = ProtocolConfig(
        num_silos=6, num_stragglers=1, privacy_threshold=1, vector_length=12, masking="shares"
    )
    h = Harness(cfg, seed=3)
    h.setup()
    (request, *_) = h.server.start_round(1)
    c = h.clients[request.recipient]
    task = c.on_train_request(request)
    real = c.upload(task, [h.partials(1, k) for k in task.partitions])
    forged = dataclasses.replace(real, extension=EdgeKeyUpload(confirms=((0, 1, b"t" * TAG),)))
    with pytest.raises(RemoteProtocolError, match="EdgeKeyUpload extension") as err:
        h.server.receive(decode(encode(forged)))
    assert err.value.sender == request.recipient
    h.server.receive(real)


def test_the_codecs_are_registered_wherever_the_messages_can_be_decoded():
    # a fresh interpreter that imports the messages package alone decodes an aligned upload
    raw = encode(_upload(EdgeKeyUpload(confirms=((0, 1, b"t" * TAG),))))
    code = (
        "import sys; from coded_fl.secagg.messages import decode; "
        "m = decode(sys.stdin.buffer.read()); print(type(m.extension).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=raw, capture_output=True, check=True, timeout=120
    )
    assert out.stdout.decode().strip() == "EdgeKeyUpload"
