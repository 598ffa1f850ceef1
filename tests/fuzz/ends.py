"""Both ends of the protocol as the fuzz tests drive them, and the properties they check.

:func:`at_server`: a silo's reply goes through the server's reply handling
(:func:`strategies.replies.feed`, then :func:`strategies.replies.late_reply`) as the driver
hands it over, with the server machine at a given stage. :func:`at_client`: a server message
goes the client mod's way (decoded within the silo's limits, handed to its machine).
Both check that nothing untyped escapes, that a refusal changes nothing, that an acceptance
changes only the sender's entry, and the cost; and count the outcome in :mod:`tests.fuzz.tally`.
"""

from __future__ import annotations

import gc
import logging
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MessageType, RecordDict

from clients.mod import _limits
from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg.client import TrainTask, refusal_for
from coded_fl.secagg.messages import (
    KeyRequest,
    Limits,
    RecoveryRequest,
    Refusal,
    TrainRequest,
    decode,
    encode,
    peek_header,
)
from coded_fl.vocabulary import FRAME_ARRAY, MSG_KEY, read_frame
from strategies.exchange import LateReply
from strategies.replies import late_reply
from tests.fuzz import tally
from tests.fuzz.stages import (
    CFG,
    SERVER_STAGES,
    client_machine,
    deliver_to_client,
    differing_fields,
    feed,
    run_state,
    server_machine,
    server_snapshot,
    silos_taken,
)

#: CPU seconds to decode one message, and to decode and handle it; traced bytes to handle it
DECODE_S, HANDLE_S, PEAK = 0.05, 0.25, 4 << 20
LIMITS = Limits.for_config(CFG)
CLIENT_BOUND = (KeyRequest, TrainRequest, RecoveryRequest)


@contextmanager
def flower_runtime() -> Iterator[None]:
    """Flower's Message() reads the process's task identity (set by its runtime); the server's
    warning for each refused reply is silenced (thousands of them)."""
    from flwr.supercore.task_identity import TaskIdentity

    with pytest.MonkeyPatch.context() as mp:
        for name, value in (("_run_id", 7), ("_node_id", 1), ("_task_id", 1)):
            mp.setattr(TaskIdentity, name, value)
        mp.setattr(logging.getLogger("flwr"), "disabled", True)
        yield


def flower_reply(raw: bytes) -> Message:
    """Bytes as a silo's Flower reply carries them."""
    array = Array(np.frombuffer(raw, dtype=np.uint8))
    content = RecordDict({MSG_KEY: ArrayRecord({FRAME_ARRAY: array})})
    return Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)


def carries(reply: Message, raw: bytes) -> bool:
    """True if ``reply`` is a well-formed record of exactly ``raw``."""
    if reply.has_error():
        return False
    try:
        return read_frame(reply.content, MSG_KEY) == raw
    except CodedFLError:
        return False


def timed_decode(raw: bytes, limits: Limits | None) -> tuple[float, object]:
    """CPU seconds to decode ``raw`` and the message (or the CodedFLError it raised); the
    garbage collector is held off, as in :func:`measured` (a collection of the test process's
    heap once took 0.4 s inside a decode of a few hundred bytes)."""
    gc.disable()
    t0 = time.thread_time()
    try:
        out: object = decode(raw, limits=limits)
    except CodedFLError as exc:
        out = exc
    finally:
        seconds = time.thread_time() - t0
        gc.enable()
    return seconds, out


@contextmanager
def measured(into: list[float]) -> Iterator[None]:
    """CPU seconds and traced peak bytes of the block, appended to ``into`` (the garbage
    collector is held off meanwhile: a collection of the test process's heap is not the
    message's cost, and what the message allocates is bounded by the traced peak)."""
    gc.disable()
    tracemalloc.start()
    t0 = time.thread_time()
    try:
        yield
    finally:
        into += [time.thread_time() - t0, tracemalloc.get_traced_memory()[1]]
        tracemalloc.stop()
        gc.enable()


def check_cost(end: str, kind: str, decode_s: float, cost: list[float], labels: object) -> None:
    tally.worst(end, kind, decode_s, cost[0], int(cost[1]))
    assert decode_s < DECODE_S, f"decoding took {decode_s * 1e3:.1f} ms: {labels}"
    assert cost[0] < HANDLE_S, f"handling took {cost[0] * 1e3:.1f} ms: {labels}"
    assert cost[1] < PEAK, f"handling peaked at {cost[1] / 2**20:.1f} MiB: {labels}"


def where_refused(raw: bytes, accept: tuple[type, ...], limits: Limits | None) -> str:
    """Which layer refuses ``raw``: its header, the stage (type), the decoder or the machine."""
    try:
        head = peek_header(raw)
    except CodedFLError:
        return "refused:header"
    if head.type not in accept:
        return "refused:stage-type"
    try:
        decode(raw, limits=limits)
    except CodedFLError:
        return "refused:decoder"
    return "refused:machine"


def untyped(fn: Callable[[], object], labels: object, *, strict: bool = False) -> object:
    """``fn()``; a CodedFLError is returned (``strict``: fails the test too), anything else
    fails the test."""
    try:
        return fn()
    except CodedFLError as exc:
        if strict:
            pytest.fail(f"raised {type(exc).__name__}: {exc} from mutant {labels}")
        return exc
    except Exception as exc:  # the property under test: nothing untyped escapes
        pytest.fail(f"untyped {type(exc).__name__}: {exc} from mutant {labels}")


def at_server(
    kind: str,
    stage: str,
    silo: int,
    base: object,
    raw: bytes,
    labels: object,
    reply: Message | None = None,
) -> str:
    """Hand ``raw`` (or the Flower ``reply`` carrying it) from ``silo`` to the server at
    ``stage``; check the properties; returns the outcome."""
    expect = SERVER_STAGES[stage]
    state = run_state(server_machine(stage))
    before = server_snapshot(state)
    decode_s, decoded = timed_decode(raw, LIMITS)
    errors: dict[int, str] = {}
    accused: dict[int, str] = {}
    reply = flower_reply(raw) if reply is None else reply
    cost: list[float] = []
    with measured(cost):
        untyped(lambda: feed(state, silo, reply, expect, errors, accused), labels, strict=True)
    after = server_snapshot(state)
    untyped(  # a late reply is read too
        lambda: late_reply(state, LateReply(100 + silo, "train", 2, 0.5, False), reply),
        labels,
        strict=True,
    )
    check_cost("server", kind, decode_s, cost, labels)
    if silo in errors:
        assert after[:6] == before[:6], f"refused but the machine changed: {labels}"
        acted = (
            isinstance(decoded, Refusal) and decoded.digest == CFG.digest and carries(reply, raw)
        )
        if acted and decoded.sender == silo:  # type: ignore[union-attr]
            outcome, what = "signal", ",".join(differing_fields(base, decoded))  # type: ignore[arg-type]
        else:
            outcome, what = where_refused(raw, (expect, Refusal), LIMITS), ""
            if not carries(reply, raw):
                outcome = "refused:record"
            assert after == before, f"refused but the run changed: {labels}"
    else:
        assert silos_taken(before, after) == {silo}, f"took another silo's entry: {labels}"
        assert not isinstance(decoded, Exception)
        outcome, what = "accepted", ",".join(differing_fields(base, decoded))  # type: ignore[arg-type]
        what = "as-is" if labels == ("as-is",) else what
    tally.record("server", kind, outcome, what)
    return outcome


def at_client(kind: str, stage: str, base: object, raw: bytes, labels: object) -> str:
    """Hand ``raw`` to silo 1's machine at ``stage`` the client mod's way; check the
    properties; returns the outcome."""
    machine = client_machine(stage)
    before = machine.to_bytes()
    limits = untyped(lambda: _limits(machine, raw), labels)
    limits = limits if isinstance(limits, Limits) else None
    decode_s, decoded = timed_decode(raw, limits)
    cost: list[float] = []
    with measured(cost):
        out = untyped(lambda: deliver_to_client(machine, raw), labels)
    check_cost("client", kind, decode_s, cost, labels)
    if isinstance(out, CodedFLError):
        assert machine.to_bytes() == before, f"refused but the state changed: {labels}"
        if isinstance(out, RemoteProtocolError) and not isinstance(decoded, Exception):
            signal = untyped(lambda: refusal_for(out, decoded), labels)  # type: ignore[arg-type]
            if isinstance(signal, Refusal):
                encode(signal)  # the mod sends it
        outcome, what = where_refused(raw, CLIENT_BOUND, limits), ""
    else:
        if not isinstance(out, TrainTask):
            encode(out)  # type: ignore[arg-type]  # the mod sends it
        outcome, what = "accepted", ",".join(differing_fields(base, decoded))  # type: ignore[arg-type]
        what = "as-is" if labels == ("as-is",) else what
    tally.record("client", kind, outcome, what)
    return outcome
