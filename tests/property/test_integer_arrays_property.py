"""Integer model arrays through the protocol's sum (quantize, add in GF(p), dequantize, unpack)
against Python integers and Flower's FedAvg, over values, dtypes, shapes, weights and K
(issue 32, item 7); and the train spec's ``integer-arrays`` entry against any text."""

from __future__ import annotations

import math

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords
from hypothesis import given
from hypothesis import strategies as st

from coded_fl.errors import RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.layout import (
    MAX_INTEGER_WEIGHT,
    UpdateLayout,
    flatten,
    integer_digits,
    integer_names,
    integers_from_digits,
)
from coded_fl.quantize import QuantizationConfig, RoundingKey, dequantize, quantize
from coded_fl.vocabulary import TrainSpec

F = PrimeField()
DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.bool_]


def _values(dtype: type, size: int) -> st.SearchStrategy[np.ndarray]:
    if dtype is np.bool_:
        return st.lists(st.booleans(), min_size=size, max_size=size).map(
            lambda v: np.array(v, dtype=bool)
        )
    info = np.iinfo(dtype)
    edge = st.sampled_from([int(info.min), int(info.max), 0, 1, -1 if info.min < 0 else 2])
    one = st.one_of(edge, st.integers(int(info.min), int(info.max)))
    return st.lists(one, min_size=size, max_size=size).map(lambda v: np.array(v, dtype=dtype))


@st.composite
def rounds(draw):  # type: ignore[no-untyped-def]
    """K partitions' models: a float array and 1-3 integer arrays of random dtype and shape."""
    K = draw(st.integers(1, 6))
    specs = [
        (draw(st.sampled_from(DTYPES)), tuple(draw(st.lists(st.integers(1, 3), max_size=2))))
        for _ in range(draw(st.integers(1, 3)))
    ]
    weight = st.one_of(st.integers(1, 2000), st.integers(1, MAX_INTEGER_WEIGHT - 1))
    weights = draw(st.lists(weight, min_size=K, max_size=K))
    models = []
    for _ in range(K):
        model = {"w": np.zeros(2, np.float32)}
        for j, (dtype, shape) in enumerate(specs):
            size = math.prod(shape)
            model[f"b{j}"] = draw(_values(dtype, size)).reshape(shape)
        models.append(model)
    return models, weights


def _exact(models: list[dict[str, np.ndarray]], weights: list[int], name: str) -> list[float]:
    flat = [m[name].reshape(-1) for m in models]
    total = sum(weights)
    return [
        sum(int(f[j]) * w for f, w in zip(flat, weights, strict=True)) / total
        for j in range(flat[0].size)
    ]


@given(case=rounds())
def test_integer_means_through_the_field_are_exact_and_flowers_fedavg(case) -> None:  # type: ignore[no-untyped-def]
    models, weights = case
    K = len(models)
    ints = integer_names(models[0])
    size = sum(models[0][n].size for n in ints)
    cfg = QuantizationConfig.for_summands(K, clip_range=1.0, headroom_bits=8)
    lay = UpdateLayout(model_size=2, scale=cfg.scale, integer_names=ints, integer_size=size)
    theta = flatten(models[0], integers=ints)
    bound = float(2 ** math.ceil(math.log2(max(weights))))
    total = None
    for k, (model, w) in enumerate(zip(models, weights, strict=True)):
        v = lay.pack_arrays(model, theta, rho=w / bound, clip_range=1.0, examples=w)
        q = quantize(v, cfg, RoundingKey.for_partition("prop", 1, k))
        total = q if total is None else F.add(total, q)
    assert total is not None
    out = lay.unpack(dequantize(total, cfg, F), clip_range=1.0)
    assert out.total_examples == sum(weights)
    want = [x for n in ints for x in _exact(models, weights, n)]
    assert out.integer_mean.tolist() == want  # the exact rational, correctly rounded
    # Flower's FedAvg on the same records: float64, within its own float rounding
    plain = aggregate_arrayrecords(
        [
            RecordDict(
                {
                    "a": ArrayRecord({n: Array(np.asarray(a)) for n, a in m.items()}),
                    "m": MetricRecord({"num-examples": w}),
                }
            )
            for m, w in zip(models, weights, strict=True)
        ],
        "num-examples",
    )
    at = 0
    for n in ints:
        got = plain[n].numpy().reshape(-1)
        assert plain[n].dtype == "float64"
        ours = out.integer_mean[at : at + got.size]
        largest = max(float(np.abs(m[n].astype(np.float64)).max()) for m in models)
        assert np.all(np.abs(ours - got) <= 4 * K * np.finfo(np.float64).eps * largest)
        at += got.size


@given(value=st.integers(-(2**102), 2**102), extra=st.integers(-3, 3))
def test_digits_round_trip_and_stay_balanced(value: int, extra: int) -> None:
    digits = integer_digits(np.array([value, extra], dtype=object))
    assert digits.min() >= -128 and digits.max() <= 127
    assert integers_from_digits(digits).tolist() == [value, extra]
    # sums of digits (the decoded sum over partitions) give the sum of the values
    assert integers_from_digits(digits.sum(axis=0, keepdims=True)).tolist() == [value + extra]


@given(raw=st.one_of(st.text(max_size=30), st.binary(max_size=20).map(repr)))
def test_any_integer_arrays_entry_parses_or_is_refused_as_the_peers_fault(raw: str) -> None:
    entries = {**TrainSpec().to_dict(), "integer-arrays": raw}
    try:
        spec = TrainSpec.from_dict(entries)
    except RemoteProtocolError:
        return
    assert all(isinstance(n, str) for n in spec.integer_arrays)
    assert len(set(spec.integer_arrays)) == len(spec.integer_arrays)


def test_packed_integer_coordinates_are_integers_times_the_unit() -> None:
    lay = UpdateLayout(model_size=1, integer_names=("n",), integer_size=1, scale=2.0**16)
    v = lay.pack_arrays(
        {"w": np.zeros(1, np.float32), "n": np.array(-(2**63), np.int64)},
        torch.zeros(1),
        rho=1.0,
        clip_range=1.0,
        examples=MAX_INTEGER_WEIGHT - 1,
    )
    scaled = v[lay.integer_index :].double() * 2.0**16
    assert torch.equal(scaled, scaled.round()) and scaled.abs().max() <= 128
