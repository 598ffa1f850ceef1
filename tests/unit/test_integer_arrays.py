"""Integer model arrays (BatchNorm's ``num_batches_tracked``, other integer buffers) need no
user edit (issue 32, item 7): they are summed exactly through the secure sum and come back as
Flower's FedAvg gives them, a float64 weighted mean.

Oracles: Flower's own ``aggregate_arrayrecords`` (the Message API FedAvg) and legacy
``aggregate`` (``FedAvg(inplace=False)``) on the same records, and Python's exact
``int / int`` (the correctly rounded weighted mean).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common import ndarrays_to_parameters
from flwr.server import LegacyContext, ServerConfig
from flwr.server import strategy as legacy
from flwr.server.strategy.aggregate import aggregate, aggregate_inplace
from flwr.server.workflow import DefaultWorkflow
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from clients import coded_secagg_mod
from coded_fl.errors import ConfigurationError, InputError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.layout import (
    INTEGER_DIGITS,
    MAX_INTEGER_WEIGHT,
    DecodedUpdate,
    UpdateLayout,
    check_same_layout,
    flatten,
    integer_digits,
    integer_names,
    integers_from_digits,
)
from coded_fl.quantize import QuantizationConfig, RoundingKey, dequantize, quantize
from coded_fl.vocabulary import TrainSpec
from strategies import CodedSecAggWorkflow
from tests.unit.test_legacy import FAST
from tests.unit.test_strategy_faults import FakeGrid, _strategy, _task_identity  # noqa: F401

F = PrimeField()
N = 4


# ----------------------------------------------------------------------------- the oracle
def exact_mean(values: Sequence[int], weights: Sequence[int]) -> float:
    """The weighted mean as Python's int / int gives it: the exact rational, correctly rounded."""
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


def flower_fedavg(records: Sequence[RecordDict]) -> ArrayRecord:
    return aggregate_arrayrecords(list(records), "num-examples")


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in float64 steps between two arrays."""
    a64, b64 = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    return int(np.max(np.abs(a64 - b64) / np.spacing(np.maximum(abs(a64), abs(b64)))))


def _decode(
    lay: UpdateLayout, packed: Sequence[torch.Tensor], cfg: QuantizationConfig
) -> DecodedUpdate:
    """Quantize each partition's vector, add in GF(p), dequantize, unpack (the protocol's sum)."""
    total = None
    for k, v in enumerate(packed):
        q = quantize(v, cfg, RoundingKey.for_partition("ints", 1, k))
        total = q if total is None else F.add(total, q)
    assert total is not None
    return lay.unpack(dequantize(total, cfg, F), clip_range=cfg.clip_range)


# ----------------------------------------------------------------------------- digits
@pytest.mark.parametrize(
    "value",
    [
        0,
        1,
        -1,
        127,
        128,
        -128,
        -129,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        (2**38 - 1) * (2**64 - 1),
        -(2**38 - 1) * (2**64 - 1),
    ],
)
def test_digits_are_balanced_and_give_the_value_back(value: int) -> None:
    digits = integer_digits(np.array([value], dtype=object))
    assert digits.shape == (1, INTEGER_DIGITS)
    assert digits.min() >= -128 and digits.max() < 128
    assert integers_from_digits(digits).tolist() == [value]


def test_a_value_beyond_the_digits_is_refused() -> None:
    with pytest.raises(InputError, match="more than 13"):
        integer_digits(np.array([256**13], dtype=object))


# ----------------------------------------------------------------------------- layout
def test_integer_names_and_refused_kinds() -> None:
    arrays = {
        "w": np.zeros(3, np.float32),
        "bn.num_batches_tracked": np.array(5, np.int64),
        "mask": np.zeros(2, bool),
        "u": np.zeros(2, np.uint8),
    }
    assert integer_names(arrays) == ("bn.num_batches_tracked", "mask", "u")
    assert flatten(arrays, integers=integer_names(arrays)).numel() == 3
    with pytest.raises(InputError, match="complex"):
        integer_names({"z": np.zeros(2, np.complex64)})


def _model(k: int) -> dict[str, np.ndarray]:
    return {
        "w": np.full(3, 0.01 * (k + 1), np.float32),
        "n": np.array(1000 + 37 * k, np.int64),
        "m": np.array([[k, -3 * k], [7, 2**40 + k]], np.int64),
    }


def _records(weights: Sequence[int]) -> list[RecordDict]:
    return [
        RecordDict(
            {
                "arrays": ArrayRecord({n: Array(a) for n, a in _model(k).items()}),
                "metrics": MetricRecord({"num-examples": w}),
            }
        )
        for k, w in enumerate(weights)
    ]


@pytest.mark.parametrize("weights", [[10, 11, 12, 13], [1, 1, 1], [3, 997, 1, 65536]])
def test_the_decoded_integer_mean_is_flowers_fedavg(weights: list[int]) -> None:
    cfg = QuantizationConfig.for_summands(len(weights), clip_range=1.0, headroom_bits=8)
    start = {n: np.zeros_like(a) for n, a in _model(0).items()}
    ints = integer_names(start)
    lay = UpdateLayout(model_size=3, scale=cfg.scale, integer_names=ints, integer_size=5)
    theta = flatten(start, integers=ints)
    bound = float(2 ** int(np.ceil(np.log2(max(weights)))))
    packed = [
        lay.pack_arrays(_model(k), theta, rho=w / bound, clip_range=1.0, examples=w)
        for k, w in enumerate(weights)
    ]
    out = _decode(lay, packed, cfg)
    assert out.total_examples == sum(weights)
    assert out.integer_mean.dtype == np.float64 and not out.integer_erased.any()
    # the exact oracle: Python integers, correctly rounded
    values = [
        np.concatenate([_model(k)["n"].reshape(-1), _model(k)["m"].reshape(-1)])
        for k in range(len(weights))
    ]
    want = [exact_mean([int(v[j]) for v in values], weights) for j in range(5)]
    assert out.integer_mean.tolist() == want
    # Flower's FedAvg on the same records: float64, equal within its own rounding
    plain = flower_fedavg(_records(weights))
    got = np.concatenate([plain["n"].numpy().reshape(-1), plain["m"].numpy().reshape(-1)])
    assert plain["n"].dtype == plain["m"].dtype == "float64"
    assert ulps(got, out.integer_mean) <= len(weights)


def test_no_integer_arrays_keeps_the_layout_of_before() -> None:
    lay = UpdateLayout(model_size=3)
    assert lay.length == 3 + 4 and lay.integer_index == lay.length
    packed = lay.pack(torch.zeros(3), rho=0.5, clip_range=1.0)
    assert (
        packed.numel() == 7 and lay.unpack(packed.double(), clip_range=1.0).total_examples is None
    )


def test_refusals_name_the_fix() -> None:
    lay = UpdateLayout(model_size=1, integer_names=("n",), integer_size=1, scale=2.0**16)
    theta = torch.zeros(1)
    arrays = {"w": np.zeros(1, np.float32), "n": np.array(3, np.int64)}
    with pytest.raises(InputError, match="whole number"):
        lay.pack_arrays(arrays, theta, rho=0.5, clip_range=1.0, examples=2.5)
    with pytest.raises(InputError, match="whole number"):
        lay.pack_arrays(arrays, theta, rho=0.5, clip_range=1.0, examples=MAX_INTEGER_WEIGHT)
    floated = {"w": np.zeros(1, np.float32), "n": np.array(3.0)}
    with pytest.raises(InputError, match="integer dtype"):
        lay.pack_arrays(floated, theta, rho=0.5, clip_range=1.0, examples=2)
    coarse = UpdateLayout(model_size=1, integer_names=("n",), integer_size=1, scale=2.0**8)
    with pytest.raises(ConfigurationError, match="raise clip_range or the quantization scale"):
        coarse.pack_arrays(arrays, theta, rho=0.5, clip_range=0.25, examples=2)


def test_an_erased_digit_keeps_the_element_unknown_and_an_erased_weight_refuses() -> None:
    lay = UpdateLayout(model_size=1, integer_names=("n",), integer_size=2)
    v = lay.pack_arrays(
        {"w": np.zeros(1, np.float32), "n": np.array([5, 6])},
        torch.zeros(1),
        rho=1.0,
        clip_range=1.0,
        examples=3,
    )
    out = lay.unpack(v.double(), clip_range=1.0, erased=[lay.integer_index + INTEGER_DIGITS])
    assert out.integer_erased.tolist() == [False, True]
    assert out.integer_mean[0] == 5.0 and np.isnan(out.integer_mean[1])
    from coded_fl.errors import DecodingError

    with pytest.raises(DecodingError, match="exact total weight"):
        lay.unpack(v.double(), clip_range=1.0, erased=[lay.integer_index + 2 * INTEGER_DIGITS])


def test_layout_check_lets_an_averaged_integer_array_come_back_as_an_integer() -> None:
    received = {"w": np.zeros(2, np.float32), "n": np.array(3.5)}  # after a FedAvg round
    returned = {"w": np.zeros(2, np.float32), "n": np.array(4, np.int64)}
    check_same_layout(returned, received, who="t", integers=("n",))
    with pytest.raises(InputError, match="differ"):
        check_same_layout(returned, received, who="t")
    with pytest.raises(InputError, match="differ"):
        check_same_layout(
            {**returned, "n": np.zeros(2, np.int64)}, received, who="t", integers=("n",)
        )


def test_train_spec_carries_the_integer_arrays_and_refuses_a_malformed_list() -> None:
    spec = TrainSpec(integer_arrays=("a.num_batches_tracked", "b,c"))
    assert TrainSpec.from_dict(spec.to_dict()) == spec
    old = {k: v for k, v in spec.to_dict().items() if k != "integer-arrays"}
    assert TrainSpec.from_dict(old).integer_arrays == ()  # a spec without the entry
    for bad in ("[1]", "{", '"a"', '["a", "a"]'):
        with pytest.raises(RemoteProtocolError, match="malformed"):
            TrainSpec.from_dict({**spec.to_dict(), "integer-arrays": bad})


# ----------------------------------------------------------------------------- strategy
def _trained(model: ArrayRecord, k: int) -> RecordDict:
    """Partition k's train reply: floats stepped, integer buffers counted up from the model
    as torch does (``load_state_dict`` truncates a float64 average into the int64 buffer)."""
    w = model["w"].numpy()
    n = np.trunc(model["n"].numpy()).astype(np.int64)
    return RecordDict(
        {
            "arrays": ArrayRecord(
                {
                    "w": Array((w + 0.01 * (k + 1)).astype(np.float32)),
                    "n": Array(np.asarray(n + 3 * k + 1)),
                    "c": Array(np.array([k, -k, 7, 2**40], np.int64)),
                    "flag": Array(np.array([k % 2 == 0, True])),
                }
            ),
            "metrics": MetricRecord({"num-examples": 10 + 7 * k}),
        }
    )


def _int_app(train: Callable[[ArrayRecord, int], RecordDict]) -> ClientApp:
    app = ClientApp(mods=[coded_secagg_mod])

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        return Message(train(msg.content["arrays"], k), reply_to=msg)

    return app


def _initial() -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(np.zeros(5, np.float32)),
            "n": Array(np.array(100, np.int64)),
            "c": Array(np.zeros(4, np.int64)),
            "flag": Array(np.zeros(2, bool)),
        }
    )


@pytest.mark.parametrize("masking", ["shares", "aligned"])
def test_three_rounds_match_flowers_fedavg_without_any_edit(masking: str) -> None:
    grid = FakeGrid(N)
    grid.app = _int_app(_trained)
    strategy = _strategy(N, masking=masking)
    result = strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=3)
    assert [r.ok for r in strategy.reports] == [True] * 3
    plain = _initial()
    for _ in range(3):
        plain = flower_fedavg([_trained(plain, k) for k in range(N)])
    ours = result.arrays
    assert list(ours.keys()) == list(plain.keys())
    for name in ("n", "c", "flag"):
        assert ours[name].dtype == plain[name].dtype == "float64"
        assert tuple(ours[name].shape) == tuple(plain[name].shape)
        assert ulps(ours[name].numpy(), plain[name].numpy()) <= N, name
    assert ours["w"].dtype == "float32"
    assert np.abs(ours["w"].numpy() - plain["w"].numpy()).max() < 1e-4


def test_round_one_integer_means_are_exact() -> None:
    grid = FakeGrid(N)
    grid.app = _int_app(_trained)
    strategy = _strategy(N)
    result = strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=1)
    replies = [_trained(_initial(), k) for k in range(N)]
    weights = [10 + 7 * k for k in range(N)]
    for name in ("n", "c", "flag"):
        values = [r["arrays"][name].numpy().reshape(-1) for r in replies]
        want = [exact_mean([int(v[j]) for v in values], weights) for j in range(values[0].size)]
        assert result.arrays[name].numpy().reshape(-1).tolist() == want


def test_an_integer_array_returned_as_float_is_refused_naming_the_array() -> None:
    def floated(model: ArrayRecord, k: int) -> RecordDict:
        out = _trained(model, k)
        out["arrays"]["n"] = Array(np.array(3.0))
        return out

    grid = FakeGrid(N)
    grid.app = _int_app(floated)
    strategy = _strategy(N, max_aborted_rounds=1)
    with pytest.raises(Exception, match="has dtype float64 where the run's model has an integer"):
        strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=1)


# ----------------------------------------------------------------------------- legacy path
class _Client(NumPyClient):
    def __init__(self, k: int) -> None:
        self.k = k

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        w, n = parameters
        return [w + 0.01, np.asarray(np.trunc(n).astype(np.int64) + self.k + 1)], 5 + self.k, {}

    def evaluate(self, parameters, config):  # type: ignore[no-untyped-def]
        return 1.0, 1, {}


def _legacy_start() -> list[np.ndarray]:
    return [np.zeros(3, np.float32), np.array(100, np.int64)]


@pytest.mark.parametrize("inplace", [True, False])
def test_legacy_fedavg_gets_the_float64_mean(inplace: bool) -> None:
    def client_fn(context: Context):  # type: ignore[no-untyped-def]
        return _Client(int(context.node_config["partition-id"])).to_client()

    grid = FakeGrid(N)
    grid.app = ClientApp(client_fn=client_fn, mods=[coded_secagg_mod])
    ctx = LegacyContext(
        Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={}),
        config=ServerConfig(num_rounds=1),
        strategy=legacy.FedAvg(
            min_available_clients=N,
            fraction_evaluate=0.0,
            inplace=inplace,
            initial_parameters=ndarrays_to_parameters(_legacy_start()),
        ),
    )
    fit = CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1, **FAST)  # type: ignore[arg-type]
    DefaultWorkflow(fit_workflow=fit)(grid, ctx)
    assert fit.coded is not None and [r.ok for r in fit.coded.reports] == [True]
    got = list(ctx.state.array_records["parameters"].values())[1].numpy()
    results = [(_Client(k).fit(_legacy_start(), {})[0], 5 + k) for k in range(N)]
    plain = aggregate(results)[1]  # FedAvg(inplace=False): the float64 weighted mean
    assert got.dtype == plain.dtype == np.float64 and got.shape == ()
    assert float(got) == exact_mean([int(r[0][1]) for r in results], [w for _, w in results])
    assert ulps(got, plain) <= N
    # FedAvg(inplace=True), Flower's default, casts each weight w_k / W to int64 (0) before
    # multiplying an int64 array: it returns 0; coded-fl gives the mean (README, troubleshooting)
    from flwr.common import Code, FitRes, Status

    fitres = [
        (None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(a), w, {})) for a, w in results
    ]
    zero = aggregate_inplace(fitres)[1]  # type: ignore[arg-type]
    assert zero.dtype == np.int64 and int(zero) == 0
