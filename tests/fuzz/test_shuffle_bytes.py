"""Mutated shuffle packets (see ``tests/fuzz/__init__.py``): every packet kind of the shuffle
transport, recorded from a centralized and a decentralized epoch, then mutated as bytes (flips,
truncations, extensions, splices, the JSON length, blob count and blob lengths set to
extremes) or as JSON (a value replaced by a huge or negative integer, a deep list, a long
string, another type; a blob reference repeated). :func:`coded_fl.shuffling.transport.wire.decode`
raises only :class:`~coded_fl.errors.CodedFLError` subclasses, in bounded time and memory.

``test_epoch_with_a_mutated_packet`` runs whole epochs with one request or reply mutated on
its way: neither the relay nor a member raises anything untyped, and every store ends exact or
as it was (plus verified units).
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import CodedFLError
from coded_fl.shuffling import ShuffleMember
from coded_fl.shuffling.transport import wire
from coded_fl.shuffling.transport.coordinator import RelayCoordinator
from tests.fuzz import examples, tally
from tests.fuzz.ends import DECODE_S, PEAK, measured
from tests.fuzz.mutants import _one
from tests.unit.test_shuffling_transport import K, _batches, _data, _job, _world

KINDS = [cls.__name__ for cls in wire._KINDS.values()]
_TMP: list[str] = []


@pytest.fixture(autouse=True, scope="module")
def _cleanup() -> Iterator[None]:
    yield
    for d in _TMP:
        shutil.rmtree(d, ignore_errors=True)


@functools.cache
def packets() -> dict[str, list[bytes]]:
    """Every packet of a centralized and a decentralized epoch, by kind."""
    out: dict[str, list[bytes]] = {k: [] for k in KINDS}
    for mode in ("centralized", "decentralized"):
        root = tempfile.mkdtemp(prefix="codedfl-fuzz-")
        _TMP.append(root)
        data = _data()
        now, nxt = _batches()
        stores, members = _world(Path(root), data, now, t=2)
        seen: list[bytes] = []
        res = wire_run(_job(now, nxt, mode, t=2), members, stores, tap=seen.append)
        assert res.ok, res.lines()
        # and a reshuffle that continues the group key (offers in the hello, a roster in the
        # plan request)
        res = wire_run(_job(nxt, _again(nxt), mode, t=2, epoch=2), members, stores, tap=seen.append)
        assert res.ok and res.keys_reused, res.lines()
        for raw in seen:
            out[type(wire.decode(raw)).__name__].append(raw)
    assert all(out.values()), {k: len(v) for k, v in out.items()}
    return out


def _again(assignment):  # type: ignore[no-untyped-def]
    """The next reshuffle's assignment: every unit one silo on."""
    return {u: frozenset((k + 1) % K for k in h) for u, h in assignment.items()}


def wire_run(job, members, stores, *, tap=None, fault=None):  # type: ignore[no-untyped-def]
    """:func:`coded_fl.shuffling.run_loopback` with a byte-level hook: ``fault(direction,
    stage, member, raw)`` may rewrite a request (``"request"``) or a reply (``"reply"``)."""
    relay = RelayCoordinator(job)
    hook = fault or (lambda direction, stage, m, raw: raw)

    def ask(stage: str, m: int, packet: wire.Packet) -> wire.Packet:
        machine = ShuffleMember.from_bytes(members[m].to_bytes(), org_key=members[m].org_key)
        raw = hook("request", stage, m, wire.encode(packet))
        if tap is not None:
            tap(raw)
        reply = hook("reply", stage, m, wire.encode(machine.receive(wire.decode(raw), stores[m])))
        members[m] = machine  # kept only when the request was accepted
        if tap is not None:
            tap(reply)
        return wire.decode(reply)

    hello = relay.hello()
    for node, m in enumerate(sorted(members)):
        try:
            relay.receive(node, ask("hello", m, hello))
        except CodedFLError as exc:
            relay.note(f"node {node}: {exc}")
    if relay.close_hello():
        for name, requests, on_reply, close in relay.steps():
            for m, packet in requests():
                try:
                    on_reply(m, ask(name, m, packet))
                except CodedFLError as exc:
                    relay.fail(m, str(exc))
            if not close():
                break
    return relay.finish()


# ----------------------------------------------------------------------------- mutations


def _blob_fields(raw: bytes) -> list[int]:
    """Offsets of the JSON length, the blob count and every blob length of a packet."""
    (n,) = struct.unpack_from("<I", raw, 6)
    pos = wire._HEAD.size + n
    out = [6, pos]
    (count,) = struct.unpack_from("<I", raw, pos)
    pos += 4
    for _ in range(count):
        out.append(pos)
        pos += 8 + struct.unpack_from("<Q", raw, pos)[0]
    return out


def _paths(value: object, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


REPLACEMENTS = (
    10**30,
    -1,
    2**63,
    2**64,
    0,
    None,
    True,
    1.5,
    float("inf"),
    "",
    "x" * 5000,
    "zz",
    {},
    [],
    [0] * 100,
    "deep",
)


@st.composite
def json_mutant(draw: st.DrawFn, raw: bytes) -> tuple[bytes, str]:
    """``raw`` with one value of its JSON header replaced."""
    (n,) = struct.unpack_from("<I", raw, 6)
    head = json.loads(raw[wire._HEAD.size : wire._HEAD.size + n])
    paths = [p for p in _paths(head) if p]
    path = draw(st.sampled_from(paths))
    new = draw(st.sampled_from(REPLACEMENTS))
    node = head
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = new
    body = json.dumps(head, separators=(",", ":")).encode()  # inf is written as Infinity
    # a list nested past the parser's depth, written as text (Python could not build it)
    body = body.replace(b'"deep"', b"[" * 100_000 + b"]" * 100_000)
    rest = raw[wire._HEAD.size + n :]
    return wire._HEAD.pack(wire.MAGIC, wire.VERSION, raw[5], len(body)) + body + rest, (
        f"json:{'.'.join(str(p) for p in path[-2:])}"
    )


@st.composite
def shuffle_mutant(draw: st.DrawFn, raw: bytes) -> tuple[bytes, tuple[str, ...]]:
    labels: list[str] = []
    if draw(st.integers(0, 2)) == 0:
        raw, label = draw(json_mutant(raw))
        labels.append(label)
    out = bytearray(raw)
    if draw(st.integers(0, 2)) == 0:
        spot = draw(st.sampled_from(_blob_fields(raw)))
        width = 8 if spot > 6 and spot != _blob_fields(raw)[1] else 4
        value = draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1][: 4 + width // 4]))
        struct.pack_into("<Q" if width == 8 else "<I", out, spot, value % 2 ** (8 * width))
        labels.append("count")
    for _ in range(draw(st.sampled_from((0, 1, 1, 2)) if labels else st.sampled_from((1, 2)))):
        labels.append(draw(_one(out, [], K, header=False)))
    return bytes(out), tuple(labels)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=examples(30))
@given(data=st.data())
def test_shuffle_decode(kind: str, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(packets()[kind]), label="packet")
    raw, labels = data.draw(shuffle_mutant(base), label="mutant")
    cost: list[float] = []
    outcome = "accepted"
    with measured(cost):
        try:
            wire.decode(raw)
        except CodedFLError:
            outcome = "refused"
        except Exception as exc:  # the property under test: nothing untyped escapes
            pytest.fail(f"untyped {type(exc).__name__}: {exc} from {labels}")
    tally.worst("shuffle", kind, cost[0], cost[0], int(cost[1]))
    assert cost[0] < DECODE_S, f"decoding took {cost[0] * 1e3:.1f} ms: {labels}"
    assert cost[1] < PEAK + 2 * len(raw), f"decoding peaked at {cost[1] / 2**20:.1f} MiB"
    tally.record(
        "shuffle", kind, outcome, ",".join(sorted(set(labels))) if outcome == "accepted" else ""
    )


def _check_stores_after_a_fault(res, stores, data, current, nxt) -> None:  # type: ignore[no-untyped-def]
    """Every store holds correct units and is either at the new epoch with exactly the new
    units, or at the old one with the old units and verified new ones. (Unlike a clean epoch,
    the relay's report may call a silo incomplete that committed: its reply was mutated on the
    way back, a lost acknowledgement; the next Hello tells the relay its store's epoch.)"""
    for s in res.silos:
        st = stores[s.silo]
        held = set(st.units())
        for u in held:
            assert st.read_unit(u) == data[u]
        old = {u for u in data if s.silo in current[u]}
        new = {u for u in data if s.silo in nxt[u]}
        if st.epoch == res.job.epoch:
            assert held == new
        else:
            assert st.epoch == res.job.epoch - 1 and s.status != "complete"
            assert old <= held <= old | new


@settings(max_examples=examples(8, long=500))
@given(
    mode=st.sampled_from(["centralized", "decentralized"]),
    direction=st.sampled_from(["request", "reply"]),
    stage=st.sampled_from(["hello", "key", "join", "plan", "deliver"]),
    member=st.integers(0, K),
    seed=st.integers(0, 2**32),
    continued=st.booleans(),
    data=st.data(),
)
def test_epoch_with_a_mutated_packet(mode, direction, stage, member, seed, continued, data) -> None:  # type: ignore[no-untyped-def]
    """``continued``: the mutated epoch is a reshuffle that continues the group key of a clean
    first epoch (no key stages: a mutation aimed at them hits nothing)."""
    root = tempfile.mkdtemp(prefix="codedfl-fuzz-")
    try:
        content = _data(seed=seed % 7)
        now, nxt = _batches()
        stores, members = _world(Path(root), content, now, t=2)
        epoch = 1
        if continued:
            assert wire_run(_job(now, nxt, mode, t=2), members, stores).ok
            now, nxt, epoch = nxt, _again(nxt), 2
        done: list[str] = []

        def fault(way: str, at: str, m: int, raw: bytes) -> bytes:
            if (way, m) != (direction, member) or not at.startswith(stage) or done:
                return raw
            new, labels = data.draw(shuffle_mutant(raw), label="mutant")
            done.append(",".join(labels))
            return new

        try:
            res = wire_run(_job(now, nxt, mode, t=2, epoch=epoch), members, stores, fault=fault)
        except CodedFLError as exc:  # only a refused mutant may end it, and typed
            pytest.fail(f"the epoch raised {type(exc).__name__}: {exc} ({done})")
        _check_stores_after_a_fault(res, stores, content, now, nxt)
        tally.record(
            "shuffle", "epoch", "round:" + ("complete" if res.ok else "incomplete"), ";".join(done)
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
