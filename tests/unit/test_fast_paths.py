"""The silo's fast paths against the plain expressions they replace.

- ``UpdateLayout.pack_arrays`` (one kernel per array, arrays read in place) against
  ``pack((flatten(arrays) - theta) * rho)``, bit for bit, for float16/32/64 and big-endian
  arrays, several arrays, any power-of-two delta scale; NaN/Inf refused the same way;
- the in-place read of a Flower ``Array`` against ``Array.numpy()``;
- ``frame_npy`` against ``np.save`` of the framed bytes, and ``encode_parts`` against
  ``encode``;
- the mod's cheap seeding against ``torch.manual_seed``.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.layout import UpdateLayout, flatten
from coded_fl.layout.arrays import _numpy
from coded_fl.vocabulary import (
    FRAME_ARRAY,
    MSG_KEY,
    frame,
    frame_npy,
    read_frame,
    read_npy_header,
    unframe,
)

DTYPES = (np.float32, np.float64, np.float16, np.dtype(">f4"))


def _records(seed: int, shapes: list[tuple[int, ...]], dtype: object, spread: float):
    rng = np.random.default_rng(seed)
    model = {f"a{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    new = {
        k: (v + rng.standard_normal(v.shape) * spread).astype(dtype if k == "a0" else np.float32)
        for k, v in model.items()
    }
    as_record = lambda d: ArrayRecord({k: Array(v) for k, v in d.items()})  # noqa: E731
    return as_record(model), as_record(new)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    shapes=st.lists(
        st.lists(st.integers(1, 40), min_size=1, max_size=2).map(tuple), min_size=1, max_size=4
    ),
    dtype=st.sampled_from(DTYPES),
    spread=st.sampled_from([1e-7, 1e-3, 0.3, 5.0]),
    rho=st.floats(1e-4, 1.0),
    log_g=st.integers(0, 16),
    clip=st.floats(0.01, 4.0),
)
def test_pack_arrays_is_pack_of_the_torch_expression_bit_for_bit(
    seed, shapes, dtype, spread, rho, log_g, clip
) -> None:
    model, new = _records(seed, shapes, dtype, spread)
    theta = flatten(model)
    lay = UpdateLayout(model_size=theta.numel(), metric_keys=("acc", "loss"))
    kw = dict(rho=rho, clip_range=clip, metrics={"acc": 0.25}, delta_scale=float(2**log_g))
    want = lay.pack((flatten(new) - theta) * rho, **kw)  # type: ignore[arg-type]
    got = lay.pack_arrays(new, theta, **kw)  # type: ignore[arg-type]
    assert torch.equal(want.view(torch.int32), got.view(torch.int32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pack_arrays_refuses_nan_and_inf_as_pack_does(bad: float) -> None:
    model, new = _records(1, [(5,), (3, 2)], np.float32, 0.1)
    values = new["a1"].numpy().copy()
    values[1, 1] = bad
    new["a1"] = Array(values)
    theta = flatten(model)
    lay = UpdateLayout(model_size=theta.numel())
    with pytest.raises(InputError, match="NaN/Inf"):
        lay.pack_arrays(new, theta, rho=0.5, clip_range=1.0)
    with pytest.raises(InputError, match="NaN/Inf"):
        lay.pack((flatten(new) - theta) * 0.5, rho=0.5, clip_range=1.0)


def test_pack_arrays_refuses_a_wrong_size_an_integer_array_and_a_bad_rho() -> None:
    model, new = _records(2, [(4,)], np.float32, 0.1)
    theta = flatten(model)
    with pytest.raises(InputError, match="values"):
        UpdateLayout(model_size=5).pack_arrays(new, torch.zeros(5), rho=0.5, clip_range=1.0)
    with pytest.raises(InputError, match="values"):
        UpdateLayout(model_size=3).pack_arrays(new, theta, rho=0.5, clip_range=1.0)
    ints = ArrayRecord({"a0": Array(np.arange(4, dtype=np.int64))})
    with pytest.raises(InputError, match="floating point"):
        UpdateLayout(model_size=4).pack_arrays(ints, theta, rho=0.5, clip_range=1.0)
    with pytest.raises(InputError, match="rho"):
        UpdateLayout(model_size=4).pack_arrays(new, theta, rho=1.5, clip_range=1.0)


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(6, dtype=">f8"),
        np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        np.zeros((0,), dtype=np.float32),
        np.float16(3.5) * np.ones((2, 2), dtype=np.float16),
    ],
)
def test_arrays_are_read_in_place_with_the_values_numpy_reads(value: np.ndarray) -> None:
    array = Array(value)
    got = _numpy(array)
    assert got.dtype == array.numpy().dtype and np.array_equal(got, array.numpy())


def test_a_truncated_or_foreign_array_falls_back_to_numpy() -> None:
    array = Array(np.arange(8, dtype=np.float32))
    short = Array(array.dtype, array.shape, array.stype, array.data[:-4])
    with pytest.raises(ValueError):
        _numpy(short)  # numpy's own reader refuses it; the view is not taken
    assert _numpy(np.arange(3)).tolist() == [0, 1, 2]


def _npy(value: np.ndarray, version: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, value, version=version)
    return buf.getvalue()


def test_one_npy_header_reader_serves_the_arrays_and_the_frames() -> None:
    value = np.arange(6, dtype="<f4").reshape(2, 3)
    for version in ((1, 0), (2, 0)):
        data = _npy(value, version)
        shape, fortran, dtype, offset = read_npy_header(data)
        assert (shape, fortran, dtype) == ((2, 3), False, np.dtype("<f4"))
        assert data[offset:] == value.tobytes()
    v3 = _npy(value, (3, 0))
    for bad in (v3, b"", b"\x93NUMPY", b"not npy at all", _npy(value, (1, 0))[:20]):
        with pytest.raises(ValueError):
            read_npy_header(bad)
    # an array stored as npy 3.0 is read by numpy's own reader (a copy), with the same values
    array = Array(value)
    v3_array = Array(array.dtype, array.shape, array.stype, v3)
    assert np.array_equal(_numpy(v3_array), value)
    # a frame whose header cannot be read is refused as the peer's fault, never a crash
    payload = np.frombuffer(b"framed bytes", dtype=np.uint8)
    for version, ok in (((1, 0), True), ((2, 0), True), ((3, 0), False)):
        raw = _npy(payload, version)
        array = Array(dtype="uint8", shape=(payload.size,), stype="numpy.ndarray", data=raw)
        content = {MSG_KEY: {FRAME_ARRAY: array}}
        if ok:
            assert read_frame(content, MSG_KEY) == b"framed bytes"
        else:
            with pytest.raises(RemoteProtocolError, match="npy header"):
                read_frame(content, MSG_KEY)


@pytest.mark.parametrize("sizes", [[0], [1], [3, 0, 5], [100_000, 7]])
def test_frame_npy_is_what_np_save_of_the_frame_writes(sizes: list[int]) -> None:
    rng = np.random.default_rng(sum(sizes))
    parts = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    parts[0] = memoryview(parts[0])  # type: ignore[call-overload]
    n, data = frame_npy(parts)
    buf = io.BytesIO()
    np.save(buf, frame(b"".join(parts)), allow_pickle=False)
    assert n == sum(sizes) and data == buf.getvalue()
    assert unframe(Array("uint8", (n,), "numpy.ndarray", data).numpy()) == b"".join(parts)


def test_encode_parts_joins_to_encode_for_every_message_type() -> None:
    from coded_fl.secagg.messages import (
        Refusal,
        RefusalCode,
        ViewReply,
        ViewRequest,
        encode,
        encode_parts,
    )
    from tests.fuzz.stages import recording  # messages of every type, from real rounds

    rec = recording()
    pools = [*rec.to_server.values(), *rec.to_client.values()]
    messages = [m for pool in pools for m in pool]
    messages += [
        Refusal(digest=bytes(8), round=1, sender=2, recipient=-1, code=RefusalCode.ACCUSES),
        ViewRequest(digest=bytes(8), round=1, sender=-1, recipient=2, survivors=(0, 2, 3)),
        ViewReply(digest=bytes(8), round=1, sender=2, recipient=-1, signature=bytes(64)),
    ]
    kinds = {type(m).__name__ for m in messages}
    assert {"KeyRequest", "KeyReply", "TrainRequest", "Upload", "RecoveryRequest"} <= kinds
    assert {"RecoveryReply", "Refusal"} <= kinds
    for msg in messages:
        assert b"".join(encode_parts(msg)) == encode(msg)


def test_the_mods_seeding_matches_torch_manual_seed() -> None:
    from coded_fl.secagg.silo import seed_everything

    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    want = (torch.rand(5), np.random.rand(3), random.random())
    seed_everything(1234)
    got = (torch.rand(5), np.random.rand(3), random.random())
    assert torch.equal(want[0], got[0]) and np.array_equal(want[1], got[1]) and want[2] == got[2]


def test_the_inputs_digest_is_blake3_of_the_arrays_the_spec_and_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)  # a Message needs a run, as in a ServerApp
    # the digest a group mask is bound to: BLAKE3 (key-derivation mode) of each array's length-
    # framed name and npy bytes in name order, then of the train spec's and the user's config
    # records (each entry's name, type and repr, length-framed, in name order), recomputed
    # here from its definition
    import blake3
    from flwr.app import ConfigRecord, Message, RecordDict

    from clients.mod import _model_digest
    from coded_fl.vocabulary import MODEL_DIGEST_CONTEXT, TRAIN_KEY, TrainSpec

    spec = TrainSpec().to_dict()
    user = {"lr": 0.1, "epochs": 2, "name": "cnn"}

    def message(
        arrays: dict[str, np.ndarray], train: dict | None = None, config: dict | None = user
    ) -> Message:
        records: dict = {
            "arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
            TRAIN_KEY: ConfigRecord(train or spec),  # type: ignore[arg-type]
        }
        if config is not None:
            records["config"] = ConfigRecord(config)
        return Message(RecordDict(records), dst_node_id=1, message_type="train")

    def framed(*parts: bytes) -> bytes:
        return b"".join(len(p).to_bytes(4, "little") + p for p in parts)

    def config_bytes(key: str, record: dict | None) -> bytes:
        entries = [
            x
            for k in sorted(record or {})
            for x in (k.encode(), type(record[k]).__name__.encode(), repr(record[k]).encode())  # type: ignore[index]
        ]
        return framed(key.encode(), b"-" if record is None else b"+", *entries)

    model = {"w": np.arange(6, dtype=np.float32), "b": np.ones(2, dtype=np.float32)}
    h = blake3.blake3(derive_key_context=MODEL_DIGEST_CONTEXT)
    for name in sorted(model):
        data = Array(model[name]).data
        raw = name.encode()
        h.update(len(raw).to_bytes(4, "little") + raw + len(data).to_bytes(8, "little") + data)
    h.update(config_bytes(TRAIN_KEY, dict(ConfigRecord(spec).items())))  # type: ignore[arg-type]
    h.update(config_bytes("config", user))
    digest = _model_digest(message(model))
    assert digest == h.digest() and len(digest) == 32
    assert _model_digest(message(dict(reversed(list(model.items()))))) == digest  # name order
    assert _model_digest(message(model, config=dict(reversed(list(user.items()))))) == digest
    changed = {**model, "w": model["w"] + np.float32(1e-6)}
    renamed = {"v": model["w"], "b": model["b"]}
    assert _model_digest(message(changed)) != digest
    assert _model_digest(message(renamed)) != digest
    # every other input of the training tells the digest apart too (issue 29, attack 1: one
    # member sent max-weight 1e30 or another delta scale, learning rate or epoch count)
    for train in ({**spec, "max-weight": 1e30}, {**spec, "delta-scale": 2.0**16}):
        assert _model_digest(message(model, train=train)) != digest
    for config in ({**user, "lr": 0.2}, {**user, "epochs": 3}, {**user, "epochs": 2.0}, {}, None):
        assert _model_digest(message(model, config=config)) != digest
