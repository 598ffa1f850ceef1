"""Mutated Flower records at both ends (see ``tests/fuzz/__init__.py``).

A message's bytes travel as a one-array ``ArrayRecord`` under ``codedfl.msg``. Here the record
around them is what goes wrong: the Array's dtype, shape or stype, an npy payload of another
dtype or shape or with a garbled header, another record type, the array under another name or
beside another one, no coded-fl record at all, a Flower error reply; the bytes inside may be
mutated too. At the server the reply goes through :func:`tests.fuzz.ends.at_server`; at a silo
the request goes through ``coded_secagg_mod`` itself (with the silo's state in its Flower
context and a train function behind it), where the train request's model and train spec can
be wrong as well: only a :class:`coded_fl.errors.CodedFLError` may escape the mod, and when
one does, or the mod answers with a refusal, the silo's stored state is unchanged.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import coded_secagg_mod
from coded_fl.errors import CodedFLError
from coded_fl.kernels import warm_up
from coded_fl.secagg.messages import Refusal, decode
from coded_fl.vocabulary import FRAME_ARRAY, MSG_KEY, STATE_KEY, TRAIN_KEY, TrainSpec
from tests.fuzz import examples, tally
from tests.fuzz.ends import at_server, check_cost, flower_runtime, measured, untyped
from tests.fuzz.mutants import mutant
from tests.fuzz.stages import (
    CFG,
    CLIENT_STAGES,
    CLIENT_TYPES,
    SERVER_STAGES,
    SERVER_TYPES,
    client_machine,
    recording,
)

MODEL = 8  # model coordinates: d = 12 with the weight and the three clip counts


@pytest.fixture(autouse=True, scope="module")
def _flower() -> Iterator[None]:
    warm_up()  # the mod warms its kernels up on a key request: not a message's cost
    with flower_runtime():
        yield


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


@st.composite
def framed(draw: st.DrawFn, raw: bytes) -> tuple[RecordDict | None, str]:
    """A content carrying ``raw`` in a mutated record (None: a Flower error reply)."""
    good = np.frombuffer(raw, dtype=np.uint8)
    what = draw(
        st.sampled_from(
            [
                "as-is",
                "dtype",
                "shape",
                "stype",
                "npy-dtype",
                "npy-shape",
                "npy-header",
                "record-type",
                "array-name",
                "extra-array",
                "empty-record",
                "no-record",
                "error",
                "extra-record",
            ]
        )
    )
    array = Array(good)
    if what == "dtype":
        dtype = draw(st.sampled_from(["float32", "int8", "uint16", "<u1", "|u1", "object", ""]))
        array = Array(dtype=dtype, shape=array.shape, stype=array.stype, data=array.data)
    elif what == "shape":
        n = len(raw)
        shape = draw(st.sampled_from([(n + 1,), (max(n - 1, 0),), (1, n), (), (0,), (2**40,)]))
        array = Array(dtype=array.dtype, shape=shape, stype=array.stype, data=array.data)
    elif what == "stype":
        stype = draw(st.sampled_from(["torch.Tensor", "", "numpy.ndarray ", "pickle"]))
        array = Array(dtype=array.dtype, shape=array.shape, stype=stype, data=array.data)
    elif what == "npy-dtype":
        other = draw(st.sampled_from(["float32", "int8", "uint16", "float64", "bool", "<U1"]))
        width = np.dtype(other).itemsize
        data = _npy(np.frombuffer(raw[: len(raw) // width * width], dtype=other))
        array = Array(dtype="uint8", shape=(len(raw),), stype="numpy.ndarray", data=data)
    elif what == "npy-shape":
        shaped = good[: len(raw) // 4 * 4].reshape(-1, 4) if len(raw) >= 4 else good[None]
        array = Array(dtype="uint8", shape=(len(raw),), stype="numpy.ndarray", data=_npy(shaped))
    elif what == "npy-header":
        data = bytearray(array.data)
        head = data.index(b"\n") + 1 if b"\n" in data else len(data)
        i = draw(st.integers(0, max(head - 1, 0)))
        data[i] = draw(st.integers(0, 255))
        array = Array(dtype="uint8", shape=(len(raw),), stype="numpy.ndarray", data=bytes(data))
    if what == "error":
        return None, what
    if what == "no-record":
        return RecordDict({"arrays": ArrayRecord({"w": Array(good)})}), what
    if what == "record-type":
        other = draw(st.sampled_from(["config", "metric"]))
        rec = ConfigRecord({FRAME_ARRAY: raw}) if other == "config" else MetricRecord({"x": 1.0})
        return RecordDict({MSG_KEY: rec}), what
    arrays = {FRAME_ARRAY: array}
    if what == "array-name":
        arrays = {"message": array}
    elif what == "extra-array":
        arrays[draw(st.sampled_from(["extra", "a"]))] = Array(good)
    elif what == "empty-record":
        arrays = {}
    content = RecordDict({MSG_KEY: ArrayRecord(arrays)})  # type: ignore[arg-type]
    if what == "extra-record":
        content["other"] = ConfigRecord({"x": 1})
    return content, what


# ----------------------------------------------------------------------------- server end


@pytest.mark.parametrize("kind", SERVER_TYPES)
@settings(max_examples=examples(30))
@given(data=st.data())
def test_server_end_records(kind: str, data: st.DataObject) -> None:
    takes = [s for s, t in SERVER_STAGES.items() if t.__name__ == kind] or ["collecting"]
    stage = data.draw(st.sampled_from(takes), label="stage")
    base, raw, labels = data.draw(mutant(recording().to_server[kind], CFG.n), label="mutant")
    content, what = data.draw(framed(raw), label="record")
    if content is None:
        request = Message(content=RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)
        reply = Message(Error(code=0, reason="fuzz"), reply_to=request)
    else:
        reply = Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)
    sender = base.sender if 0 <= base.sender < CFG.n else 0  # type: ignore[attr-defined]
    outcome = at_server(f"{kind}@record", stage, sender, base, raw, (what, *labels), reply=reply)
    if what not in ("as-is", "extra-record", "npy-header", "dtype", "shape"):
        assert outcome.startswith("refused"), f"a reply in a {what} record was taken: {labels}"


# ----------------------------------------------------------------------------- client end


def _train(msg: Message, context: Context) -> Message:
    """A deterministic train function: partition k moves every weight by (k + 1) / 64."""
    k = int(context.node_config["partition-id"])
    w = msg.content["arrays"]["w"].numpy()
    return Message(
        RecordDict(
            {
                "arrays": ArrayRecord({"w": Array((w + (k + 1) / 64).astype(w.dtype))}),
                "metrics": MetricRecord({"num-examples": 10}),
            }
        ),
        reply_to=msg,
    )


@st.composite
def train_records(draw: st.DrawFn) -> tuple[dict, str]:
    """The model and train spec of a train request, sometimes wrong."""
    model = np.zeros(MODEL, dtype=np.float32)
    spec = TrainSpec().to_dict()
    what = draw(
        st.sampled_from(
            ["as-is"] * 4
            + ["model-size", "model-dtype", "model-nan", "no-model", "no-spec", "spec-value"]
        )
    )
    arrays = ArrayRecord({"w": Array(model)})
    if what == "model-size":
        arrays = ArrayRecord({"w": Array(np.zeros(draw(st.sampled_from([1, 9, 11])), np.float32))})
    elif what == "model-dtype":
        dtype = draw(st.sampled_from(["float64", "float16", "int32", "uint8", "bool"]))
        arrays = ArrayRecord({"w": Array(model.astype(dtype))})
    elif what == "model-nan":
        bad = model.copy()
        bad[draw(st.integers(0, MODEL - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        arrays = ArrayRecord({"w": Array(bad)})
    elif what == "spec-value":
        key = draw(st.sampled_from(sorted(spec)))
        spec[key] = draw(
            st.sampled_from([0.0, -1.0, float("nan"), float("inf"), "", "x", "arrays", 1e300])
        )
    records: dict = {"config": ConfigRecord({"lr": 0.1})}
    if what != "no-model":
        records["arrays"] = arrays
    if what != "no-spec":
        records[TRAIN_KEY] = ConfigRecord(spec)
    return records, what


@pytest.mark.parametrize("kind", CLIENT_TYPES)
@settings(max_examples=examples(30))
@given(data=st.data())
def test_client_end_mod(kind: str, data: st.DataObject) -> None:
    stage = data.draw(st.sampled_from(CLIENT_STAGES), label="stage")
    _, raw, labels = data.draw(mutant(recording().to_client[kind], CFG.n), label="mutant")
    content, what = data.draw(framed(raw), label="record")
    extra, train_what = data.draw(train_records(), label="train records")
    labels = (what, train_what, *labels)
    machine = client_machine(stage)
    state = RecordDict()
    if stage != "new":
        state[STATE_KEY] = ConfigRecord({"state": machine.to_bytes()})
    before = machine.to_bytes() if stage != "new" else None
    ctx = Context(
        run_id=7,
        node_id=1,
        node_config={"partition-id": 1, "num-partitions": CFG.n},
        state=state,
        run_config={},
    )
    if content is None:
        content = RecordDict()  # a request cannot be an error: an empty train message instead
    for name, record in extra.items():
        content[name] = record
    msg = Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN)
    cost: list[float] = []
    with measured(cost):
        out = untyped(lambda: coded_secagg_mod(msg, ctx, _train), labels)
    check_cost("client", f"{kind}@mod", 0.0, cost, labels)
    after = ctx.state[STATE_KEY]["state"] if STATE_KEY in ctx.state else None  # type: ignore[index]
    if isinstance(out, CodedFLError):
        assert after == before, f"refused but the stored state changed: {labels}"
        outcome = f"refused:{type(out).__name__}"
    else:
        assert isinstance(out, Message)
        reply = decode(out.content[MSG_KEY][FRAME_ARRAY].numpy().tobytes())  # type: ignore[index,union-attr]
        if isinstance(reply, Refusal):
            assert after == before, f"answered with a refusal but the state changed: {labels}"
            outcome = f"signal:{reply.code.name}"
        else:
            outcome = "accepted"
    tally.record(
        "client", f"{kind}@mod", outcome, ",".join(labels) if outcome == "accepted" else ""
    )
