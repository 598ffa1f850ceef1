"""The shuffle packet decoder bounds what it builds by the bytes it was given: every blob is
referenced exactly once (a blob referenced many times used to be copied once per reference), a
JSON header nested past the parser's depth is a protocol error, never an untyped one; the
silo count K of a job costs nothing to hold (its members are a range, not a tuple)."""

from __future__ import annotations

import json
import struct
import tracemalloc

import pytest

from coded_fl.errors import RemoteProtocolError
from coded_fl.shuffling import ShuffleMember, UnitStore
from coded_fl.shuffling.storage.session import ShuffleMessage
from coded_fl.shuffling.transport import wire

DIGEST = "ab" * 16


def _packet(kind: type[wire.Packet], fields: dict, blobs: list[bytes]) -> bytes:
    raw = json.dumps({"digest": DIGEST, "member": 1, **fields}).encode()
    out = [wire._HEAD.pack(wire.MAGIC, wire.VERSION, kind.KIND, len(raw)), raw]
    out.append(struct.pack("<I", len(blobs)))
    for b in blobs:
        out += [struct.pack("<Q", len(b)), b]
    return b"".join(out)


def _message(size: int) -> bytes:
    return wire.encode_message(ShuffleMessage(b"p" * 16, 1, 0, 0, b"n" * 12, b"x" * size))


def test_a_blob_referenced_many_times_is_refused_without_copying_it():
    raw = _packet(wire.DeliverRequest, {"messages": [0] * 4096}, [_message(4096)])
    assert len(raw) < 20_000  # 16 MiB of messages if every reference were built
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError, match="once"):
            wire.decode(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak / 2**20:.1f} MiB"


_HELLO_REPLY = {
    "public_key": "",
    "tag": "",
    "store_epoch": None,
    "resume": "",
    "resume_members": [],
}


@pytest.mark.parametrize(
    ("kind", "fields", "blobs"),
    [
        (wire.GroupKeyReply, {"boxes": [[0, 0], [2, 0]], "share": 1}, [b"a", b"b"]),
        (wire.GroupKeyReply, {"boxes": [[0, 0]], "share": 0}, [b"a"]),
        (wire.PlanRequest, {"shares": [[0, 0], [1, 0]], "roster": None}, [b"a"]),
        (wire.JoinReply, {"share": 0}, [b"a", b"unreferenced"]),
        (wire.HelloReply, {**_HELLO_REPLY, "resume_share": 0}, [b"", b"stray"]),
    ],
)
def test_every_blob_is_referenced_exactly_once(kind, fields, blobs):
    with pytest.raises(RemoteProtocolError, match="once"):
        wire.decode(_packet(kind, fields, blobs))


@pytest.mark.parametrize("nested", [b"[" * 100_000, b'{"a":' * 50_000])
def test_a_json_header_nested_past_the_parsers_depth_is_a_protocol_error(nested):
    raw = wire._HEAD.pack(wire.MAGIC, wire.VERSION, 1, len(nested)) + nested + bytes(4)
    with pytest.raises(RemoteProtocolError, match="JSON"):
        wire.decode(raw)


def test_packets_with_blobs_still_round_trip():
    msgs = tuple(ShuffleMessage(b"p" * 16, 1, i, 0, b"n" * 12, b"x" * 40) for i in range(3))
    for p in (
        wire.DeliverRequest(b"d" * 16, 2, messages=msgs),
        wire.PlanReply(b"d" * 16, 2, plan_id=b"q" * 16, messages=msgs),
        wire.GroupKeyReply(b"d" * 16, 0, boxes=((1, b"a"), (2, b"a")), share=b"a"),
        wire.PlanRequest(b"d" * 16, 0, shares=((0, b"s"), (1, b"s"))),
    ):
        assert wire.decode(wire.encode(p)) == p


def test_a_job_with_a_huge_silo_count_costs_nothing_to_say_hello_to(tmp_path):
    # K is read from the relay's Hello: a member must not build anything K long to answer it
    job = wire.ShuffleJob.make(run_id="r", epoch=1, current={0: {0}}, nxt={0: {1}}, K=2**40, t=1)
    hello = wire.decode(wire.encode(wire.Hello(job.digest(), -1, job)))
    tracemalloc.start()
    try:
        reply = ShuffleMember(3).receive(hello, UnitStore(tmp_path / "store"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(reply, wire.HelloReply) and reply.public_key
    assert 3 in job.members and 2**40 in job.members and 2**40 + 1 not in job.members
    assert len(job.members) == 2**40 + 1
    assert peak < 1 << 20, f"{peak / 2**20:.1f} MiB"
