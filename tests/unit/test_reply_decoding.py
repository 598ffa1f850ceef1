"""Both adapters decode a peer's message within its configuration's limits.

The server reads the type of a silo's reply from its header and refuses a type the stage does
not expect before decoding the body; it decodes with the limits of the run's configuration, so
a reply with counts beyond n, d, m is refused before anything is built from it. The client mod
does the same once its machine has a configuration (for a message of that configuration: a
message of another session is decoded without them and answered with ``NEEDS_KEYS``).
"""

from __future__ import annotations

import io
import struct
import tracemalloc

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

import coded_fl_flower.records
from clients import coded_secagg_mod
from coded_fl.errors import RemoteProtocolError
from coded_fl.layout import UpdateLayout
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.messages import (
    SERVER,
    Limits,
    RecoveryReply,
    Refusal,
    RefusalCode,
    TrainRequest,
    Upload,
    decode,
    encode,
)
from coded_fl.vocabulary import FRAME_ARRAY, MSG_KEY, STATE_KEY, TRAIN_KEY, TrainSpec, read_frame
from simulations.runtime.secagg_harness import Harness
from strategies.run import RunState
from tests.fuzz.stages import feed

CFG = ProtocolConfig(
    num_silos=4,
    num_stragglers=1,
    privacy_threshold=1,
    vector_length=6,
    run_id="replies",
    masking="shares",
)


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's Message() reads the process's task identity (set by its runtime)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def _collecting() -> tuple[RunState, Harness, list[Upload]]:
    """A run whose server collects the uploads of round 1 (none taken yet)."""
    h = Harness(CFG, seed=4)
    h.setup()
    trains = h.server.start_round(1)
    uploads = []
    for req in trains:
        c = h.clients[req.recipient]
        task = c.on_train_request(req)
        uploads.append(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    state = RunState(
        config=CFG,
        layout=UpdateLayout(model_size=5),
        run_id="replies",
        machine=h.server,
        node_of={i: 100 + i for i in range(CFG.n)},
        limit=10.0,
    )
    return state, h, uploads


def _reply(raw: bytes) -> Message:
    content = RecordDict({MSG_KEY: ArrayRecord({FRAME_ARRAY: Array(np.frombuffer(raw, np.uint8))})})
    return Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)


def _empty_items(msg: Upload | TrainRequest, count: int) -> bytes:
    """``msg`` re-encoded with ``count`` (silo, empty byte string) items in place of its list:
    well formed, 8 bytes an item, far more items than any configuration has silos."""
    raw = encode(
        type(msg)(**{**msg.__dict__, ("shares" if isinstance(msg, Upload) else "roster"): ()})
    )
    # what follows the list without a scheme extension: an upload's extension id byte (0),
    # a request's aligned flag and extension id byte (0)
    assert msg.extension is None
    tail = 1 if isinstance(msg, Upload) else 2
    head, rest = raw[: -4 - tail], raw[-tail:]
    return head + struct.pack("<I", count) + struct.pack("<iI", 0, 0) * count + rest


def _peak(fn) -> int:  # type: ignore[no-untyped-def]
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_server_refuses_an_unexpected_type_from_its_header_before_decoding(monkeypatch):
    state, _, uploads = _collecting()
    decoded: list[bytes] = []
    real = coded_fl_flower.records.decode
    monkeypatch.setattr(
        coded_fl_flower.records, "decode", lambda raw, **kw: decoded.append(raw) or real(raw, **kw)
    )
    errors: dict[int, str] = {}
    feed(state, 0, _reply(encode(uploads[0])), RecoveryReply, errors)
    assert "expected RecoveryReply" in errors[0] and decoded == []
    # a refusal is always read; the expected type is read (and taken)
    refusal = Refusal(digest=CFG.digest, round=1, sender=1, recipient=SERVER)
    feed(state, 1, _reply(encode(refusal)), Upload, errors)
    feed(state, 2, _reply(encode(uploads[2])), Upload, errors)
    assert len(decoded) == 2 and 2 not in errors and 1 in state.needs_keys


def test_server_decodes_with_the_limits_of_the_run(monkeypatch):
    state, _, uploads = _collecting()
    seen: list[object] = []
    real = coded_fl_flower.records.decode
    monkeypatch.setattr(
        coded_fl_flower.records,
        "decode",
        lambda raw, **kw: seen.append(kw.get("limits")) or real(raw, **kw),
    )
    feed(state, 0, _reply(encode(uploads[0])), Upload, {})
    assert seen == [Limits.for_config(CFG)]


def test_server_refuses_a_reply_with_more_items_than_silos_without_building_them():
    state, _, uploads = _collecting()
    before = len(state.machine._round.uploads)  # type: ignore[union-attr]
    reply = _reply(_empty_items(uploads[0], 1 << 18))  # 2 MiB of empty shares
    errors: dict[int, str] = {}
    peak = _peak(lambda: feed(state, 0, reply, Upload, errors))
    assert "shares" in errors[0] and len(state.machine._round.uploads) == before  # type: ignore[union-attr]
    assert peak < 12 << 20, f"{peak / 2**20:.1f} MiB to refuse a 2 MiB reply"


# ----------------------------------------------------------------------------- client mod


def _keyed_context(h: Harness, silo: int) -> Context:
    state = RecordDict({STATE_KEY: ConfigRecord({"state": h.clients[silo].to_bytes()})})
    return Context(run_id=7, node_id=1, node_config={}, state=state, run_config={})


def _request(raw: bytes) -> Message:
    content = RecordDict({MSG_KEY: ArrayRecord({FRAME_ARRAY: Array(np.frombuffer(raw, np.uint8))})})
    return Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)


def _never(msg: Message, context: Context) -> Message:  # pragma: no cover - never called
    raise AssertionError("the train function must not be called")


def test_mod_refuses_a_roster_longer_than_the_configuration_without_building_it():
    h = Harness(CFG, seed=4)
    h.setup()
    train = h.server.start_round(1)[1]
    ctx = _keyed_context(h, 1)
    before = ctx.state[STATE_KEY]["state"]  # type: ignore[index]
    req = _request(_empty_items(train, 1 << 18))

    def deliver() -> None:
        with pytest.raises(RemoteProtocolError, match="roster"):
            coded_secagg_mod(req, ctx, _never)

    peak = _peak(deliver)
    assert ctx.state[STATE_KEY]["state"] == before  # type: ignore[index]
    assert peak < 12 << 20, f"{peak / 2**20:.1f} MiB to refuse a 2 MiB request"


def test_mod_reads_a_message_of_another_session_without_its_limits_and_asks_for_keys():
    # the server restarted with one more silo: its roster does not fit this silo's limits,
    # but it is a message of another session, so the silo answers NEEDS_KEYS (a rekey)
    h = Harness(CFG, seed=4)
    h.setup()
    other = ProtocolConfig(
        num_silos=5,
        num_stragglers=1,
        privacy_threshold=1,
        vector_length=6,
        run_id="replies",
        session="new",
        masking="shares",
    )
    train = TrainRequest(
        digest=other.digest,
        round=1,
        sender=SERVER,
        recipient=1,
        roster=tuple((i, bytes([i + 1]) * 32) for i in range(5)),
    )
    out = coded_secagg_mod(_request(encode(train)), _keyed_context(h, 1), _never)
    raw = out.content[MSG_KEY][FRAME_ARRAY].numpy().tobytes()  # type: ignore[index,union-attr]
    refusal = decode(raw)
    assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.NEEDS_KEYS


# ----------------------------------------------------------------------------- framed records


def _npy(header: dict, payload: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + payload


def _content(array: Array, **extra: Array) -> RecordDict:
    return RecordDict({MSG_KEY: ArrayRecord({FRAME_ARRAY: array, **extra})})


FORGED = {
    # an npy header that claims 2 GiB over 10 bytes: numpy allocates the whole array first
    "2 GiB claimed": Array(
        dtype="uint8",
        shape=(10,),
        stype="numpy.ndarray",
        data=_npy({"descr": "|u1", "fortran_order": False, "shape": (2**31,)}, b"x" * 10),
    ),
    "2-D payload": Array(np.zeros((4, 4), dtype=np.uint8)),
    "float payload": Array(np.zeros(4, dtype=np.float32)),
    "metadata says float32": Array(
        dtype="float32", shape=(4,), stype="numpy.ndarray", data=Array(np.zeros(4, np.uint8)).data
    ),
    "metadata says 5 bytes": Array(
        dtype="uint8", shape=(5,), stype="numpy.ndarray", data=Array(np.zeros(4, np.uint8)).data
    ),
    "pickled object array": Array(
        dtype="object", shape=(1,), stype="numpy.ndarray", data=b"\x93NUMPY" + b"\0" * 40
    ),
    "unknown stype": Array(dtype="uint8", shape=(3,), stype="torch.Tensor", data=b"abc"),
    "not npy": Array(dtype="uint8", shape=(3,), stype="numpy.ndarray", data=b"abc"),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_frame_is_refused_from_its_metadata_and_header(name):
    content = _content(FORGED[name])
    why: list[str] = []

    def read() -> None:
        try:
            read_frame(content, MSG_KEY)
        except RemoteProtocolError as exc:
            why.append(str(exc))

    peak = _peak(read)
    assert why and "uint8" in why[0], "accepted"
    assert peak < 1 << 20, f"{peak / 2**20:.1f} MiB to refuse a frame of a few bytes"


def test_a_frame_with_arrays_beside_it_is_refused_and_a_real_one_read():
    real = Array(np.frombuffer(b"hello", np.uint8))
    assert read_frame(_content(real), MSG_KEY) == b"hello"
    with pytest.raises(RemoteProtocolError, match="one"):
        read_frame(_content(real, extra=real), MSG_KEY)
    with pytest.raises(RemoteProtocolError):
        read_frame(RecordDict({MSG_KEY: ConfigRecord({FRAME_ARRAY: b"hello"})}), MSG_KEY)


# ----------------------------------------------------------------------------- train spec


@pytest.mark.parametrize("max_weight", [0.0, -1.0, float("nan"), float("inf"), "x"])
def test_a_train_spec_with_an_unusable_max_weight_is_refused(max_weight):
    entries = {**TrainSpec().to_dict(), "max-weight": max_weight}
    with pytest.raises(RemoteProtocolError, match=r"max-weight|could not convert"):
        TrainSpec.from_dict(entries)


def test_the_mod_refuses_a_train_request_whose_max_weight_is_zero_with_a_typed_error():
    # a partition's weight is divided by max_weight: 0 raised ZeroDivisionError out of the mod
    h = Harness(CFG, seed=4)
    h.setup()
    train = h.server.start_round(1)[1]
    msg = _request(encode(train))
    msg.content["arrays"] = ArrayRecord({"w": Array(np.zeros(CFG.vector_length - 2, np.float32))})
    msg.content[TRAIN_KEY] = ConfigRecord({**TrainSpec().to_dict(), "max-weight": 0.0})

    def train_fn(m: Message, context: Context) -> Message:
        w = m.content["arrays"]["w"].numpy()
        content = RecordDict(
            {"arrays": ArrayRecord({"w": Array(w + 1)}), "m": MetricRecord({"num-examples": 1})}
        )
        return Message(content, reply_to=m)

    ctx = _keyed_context(h, 1)
    with pytest.raises(RemoteProtocolError, match="max-weight"):
        coded_secagg_mod(msg, ctx, train_fn)


def _error_reply(reason: str) -> Message:
    from flwr.app import Error

    request = Message(content=RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)
    return Message(Error(code=0, reason=reason), reply_to=request)


def test_an_error_that_comes_after_its_stage_closed_still_reaches_its_rounds_report():
    from strategies.exchange import LateReply
    from strategies.replies import late_reply
    from strategies.report import RoundReport

    state, _, _ = _collecting()
    # during the round (its report not made yet): kept until the driver makes the report
    late_reply(state, LateReply(101, "train", 1, 2.0, True, "disk full"), _error_reply("disk full"))
    assert state.late_errors == {1: {1: "after the train stage closed: disk full"}}
    report = RoundReport(round=1, ok=True)
    report.errors.update(state.late_errors.pop(1, {}))  # what the driver does at the round's end
    state.reports.append(report)
    # after the round (e.g. while CodedSecAgg.settle drains lingering replies): into the report
    late_reply(state, LateReply(102, "train", 1, 9.0, True, "OOM"), _error_reply("OOM"))
    assert report.errors == {
        1: "after the train stage closed: disk full",
        2: "after the train stage closed: OOM",
    }
    assert state.late_errors == {} and state.late_train == {1: [2.0, 9.0]}
    # a node that is no silo of the run changes nothing
    late_reply(state, LateReply(999, "train", 1, 9.5, True, "x"), _error_reply("x"))
    assert 999 not in report.errors and state.late_errors == {}


def test_a_weight_bound_refusal_carries_a_power_of_two_and_nothing_else_does():
    base = Refusal(
        digest=CFG.digest,
        round=1,
        sender=2,
        recipient=SERVER,
        code=RefusalCode.WEIGHT_BOUND,
        detail="partition 3 holds 5,000 examples",
        bound=8192,
    )
    assert decode(encode(base)) == base
    for code, bound in (
        (RefusalCode.WEIGHT_BOUND, 0),
        (RefusalCode.WEIGHT_BOUND, 3000),
        (RefusalCode.MISCONFIGURED, 8192),
    ):
        raw = encode(Refusal(**{**base.__dict__, "code": code, "bound": 0}))
        forged = raw[: -4 - len(base.detail)]  # cut the detail blob off, patch the bound
        head = len(forged) - 8
        forged = forged[:head] + struct.pack("<Q", bound) + struct.pack("<I", 0)
        with pytest.raises(RemoteProtocolError, match="bound"):
            decode(forged)


def test_the_train_spec_says_whether_the_weight_bound_is_automatic():
    spec = TrainSpec(max_weight=1024.0, auto_weight=True)
    assert TrainSpec.from_dict(spec.to_dict()) == spec
    # a record without the entry (an older server) is a fixed bound
    old = {k: v for k, v in spec.to_dict().items() if k != "auto-weight"}
    assert TrainSpec.from_dict(old).auto_weight is False


@pytest.mark.parametrize("g", [0.5, 3.0, 2.0**17, float("nan"), float("inf"), -2.0, "x"])
def test_a_train_spec_whose_delta_scale_is_not_a_power_of_two_in_range_is_refused(g):
    # g divides every model entry on the silo: a power of two keeps replicas bit-identical
    entries = {**TrainSpec().to_dict(), "delta-scale": g}
    with pytest.raises(RemoteProtocolError, match=r"delta-scale|could not convert"):
        TrainSpec.from_dict(entries)


def test_the_train_spec_carries_the_delta_scale_and_an_older_record_reads_as_one():
    spec = TrainSpec(max_weight=1024.0, auto_weight=True, delta_scale=64.0)
    assert TrainSpec.from_dict(spec.to_dict()) == spec
    old = {k: v for k, v in spec.to_dict().items() if k != "delta-scale"}
    assert TrainSpec.from_dict(old).delta_scale == 1.0
