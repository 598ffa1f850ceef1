"""Legacy Flower projects and Flower's DP wrappers under coded secure aggregation, in process.

The grid runs each silo's real ClientApp synchronously (``tests.unit.test_strategy_faults``):
a legacy ``NumPyClient`` app (``ClientApp(client_fn=..., mods=[coded_secagg_mod])``) driven by
Flower's ``DefaultWorkflow`` with :class:`CodedSecAggWorkflow`, and a Message-API app with
Flower's ``fixedclipping_mod`` after the coded mod. Oracles: plain weighted averages of the
updates each partition's function returns (and Flower's own legacy FedAdam stepping from the
plain average), within the quantization error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common import FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import LegacyContext, ServerConfig
from flwr.server import strategy as legacy
from flwr.server.workflow import DefaultWorkflow
from flwr.serverapp import strategy as msgapi
from flwr.supercore.differential_privacy import CLIENTS_DISCREPANCY_WARNING

from clients import coded_secagg_mod
from clients.mod import partition_seed
from coded_fl.errors import ConfigurationError
from coded_fl.quantize import QuantizationConfig
from coded_fl.vocabulary import PARTITION_ENTRY, SEED_ENTRY
from strategies import CodedSecAgg, CodedSecAggWorkflow, LegacyStrategy, NotComposableError
from strategies.composable import REFUSED, calibrate_noise
from tests.unit.test_strategy_faults import FakeGrid, _task_identity  # noqa: F401

N, D, EXAMPLES = 4, 16, 10
FAST = dict(
    round_timeout=5.0,
    recovery_timeout=5.0,
    key_timeout=5.0,
    node_wait_timeout=5.0,
    poll_interval=0.001,
    extra_wait=0.0,
    progress=lambda r: None,
)


def _step(k: int) -> np.ndarray:
    """Partition k's update: distinct per coordinate and per partition."""
    return (0.01 * (k + 1) * np.cos(np.arange(D) + k)).astype(np.float32)


@dataclass
class Calls:
    fits: list[tuple[int, int, int]]  # (partition-id from client_fn, config partition, seed)


def _legacy_app(calls: Calls, mods: list) -> ClientApp:  # type: ignore[type-arg]
    class Client(NumPyClient):
        def __init__(self, k: int) -> None:
            self.k = k

        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            calls.fits.append((self.k, int(config[PARTITION_ENTRY]), int(config[SEED_ENTRY])))
            w = parameters[0] + _step(self.k)
            return [w], EXAMPLES, {"train_loss": 0.5}

        def evaluate(self, parameters, config):  # type: ignore[no-untyped-def]
            return 1.0, EXAMPLES, {}

    def client_fn(context: Context):  # type: ignore[no-untyped-def]
        return Client(int(context.node_config["partition-id"])).to_client()

    return ClientApp(client_fn=client_fn, mods=mods)


class LegacyGrid(FakeGrid):
    calls: Calls
    mods: list  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls = Calls([])
        self.app = _legacy_app(self.calls, [coded_secagg_mod, *getattr(self, "mods", [])])


def _bound(n: int = N) -> float:
    """Quantization error of the average: K roundings of step 1/scale over sum_k w_k / W."""
    scale = QuantizationConfig.for_summands(n, clip_range=1.0, headroom_bits=8).scale
    return n / scale / (n * EXAMPLES / 1024)


def _workflow_run(strategy: legacy.Strategy, grid: FakeGrid, rounds: int) -> LegacyContext:
    ctx = LegacyContext(
        Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={}),
        config=ServerConfig(num_rounds=rounds),
        strategy=strategy,
    )
    fit = CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1, **FAST)  # type: ignore[arg-type]
    DefaultWorkflow(fit_workflow=fit)(grid, ctx)
    assert fit.coded is not None and [r.ok for r in fit.coded.reports] == [True] * rounds
    return ctx


def _initial() -> legacy.FedAvg:
    return legacy.FedAvg(
        min_available_clients=N,
        fraction_evaluate=0.0,
        initial_parameters=ndarrays_to_parameters([np.zeros(D, dtype=np.float32)]),
    )


def _model(ctx: LegacyContext) -> np.ndarray:
    return next(iter(ctx.state.array_records["parameters"].values())).numpy()


def test_legacy_fedavg_gets_the_decoded_average_and_fit_runs_once_per_partition() -> None:
    grid = LegacyGrid(N)
    ctx = _workflow_run(_initial(), grid, rounds=2)
    plain = 2 * np.mean([_step(k) for k in range(N)], axis=0)  # every partition, both rounds
    assert np.abs(_model(ctx) - plain).max() <= 2 * _bound()
    assert np.abs(plain).max() > 100 * _bound()
    # fit ran once per partition a silo holds (two per silo here), with the partition both in
    # the client_fn's node config and in the fit config
    assert len(grid.calls.fits) == 2 * N * 2
    assert all(k == config_k for k, config_k, _ in grid.calls.fits)
    assert ctx.history.metrics_distributed_fit.get("train_loss") is None  # no aggregation fn


def test_seeds_are_the_partition_seeds_of_the_run() -> None:
    grid = LegacyGrid(N)
    fit = CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1, **FAST)  # type: ignore[arg-type]
    ctx = LegacyContext(
        Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={}),
        config=ServerConfig(num_rounds=1),
        strategy=_initial(),
    )
    DefaultWorkflow(fit_workflow=fit)(grid, ctx)
    assert fit.coded is not None and fit.coded.run_id is not None
    expected = {(k, partition_seed(fit.coded.run_id, 1, k)) for k in range(N)}
    assert {(k, seed) for k, _, seed in grid.calls.fits} == expected


def test_legacy_fedadam_steps_from_the_plain_average() -> None:
    init = [np.zeros(D, dtype=np.float32)]
    adam = dict(eta=0.1, min_available_clients=N, fraction_evaluate=0.0)
    coded = legacy.FedAdam(initial_parameters=ndarrays_to_parameters(init), **adam)
    ctx = _workflow_run(coded, LegacyGrid(N), rounds=1)
    ref = legacy.FedAdam(initial_parameters=ndarrays_to_parameters(init), **adam)
    avg = np.mean([_step(k) for k in range(N)], axis=0)
    res = FitRes(Status(0, ""), ndarrays_to_parameters([avg]), EXAMPLES, {})  # type: ignore[arg-type]
    params, _ = ref.aggregate_fit(1, [(None, res)], [])  # type: ignore[list-item]
    assert params is not None
    expected = parameters_to_ndarrays(params)[0]
    # Adam's first step is ~eta * sign(avg): the coded average's sign must agree, the size too,
    # wherever the average lies beyond the quantization error (where |avg| is within it, the
    # exact sign is not the coded average's to keep: eta * sign flips there, by design)
    sure = np.abs(avg) > 4 * _bound()
    assert sure.mean() > 0.9
    assert np.abs(_model(ctx) - expected)[sure].max() <= 1e-3
    assert np.abs(expected).max() > 0.05


@pytest.mark.parametrize(
    "cls", [c for c, _ in REFUSED], ids=lambda c: f"{c.__module__}.{c.__name__}"
)
def test_strategies_that_need_individual_results_are_refused(cls: type) -> None:
    inner: object
    try:
        inner = cls.__new__(cls)
    except TypeError:  # pragma: no cover
        pytest.skip("cannot make one")
    is_legacy = isinstance(inner, legacy.Strategy)
    with pytest.raises(NotComposableError, match="only ever learns the sum") as info:
        if is_legacy:
            LegacyStrategy(inner)  # type: ignore[arg-type]
        else:
            CodedSecAgg(inner, num_stragglers=1, privacy_threshold=1)  # type: ignore[arg-type]
    assert cls.__name__ in str(info.value)
    assert "compose" in str(info.value)
    assert isinstance(info.value, ConfigurationError)


def test_a_refused_strategy_inside_a_wrapper_is_found() -> None:
    dp = msgapi.DifferentialPrivacyClientSideFixedClipping(
        msgapi.FedMedian(), noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=4
    )
    with pytest.raises(NotComposableError, match="FedMedian"):
        CodedSecAgg(dp, num_stragglers=1, privacy_threshold=1)
    server_side = legacy.DifferentialPrivacyServerSideFixedClipping(
        legacy.FedAvg(), noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=4
    )
    with pytest.raises(NotComposableError, match="fixedclipping_mod"):
        CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1)(  # the first round refuses
            FakeGrid(4),
            LegacyContext(
                Context(run_id=7, node_id=0, node_config={}, state=_state(), run_config={}),
                strategy=server_side,
            ),
        )


def _state() -> RecordDict:
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    return RecordDict(
        {
            MAIN_CONFIGS_RECORD: ConfigRecord({Key.CURRENT_ROUND: 1}),
            MAIN_PARAMS_RECORD: ArrayRecord({"0": Array(np.zeros(D, dtype=np.float32))}),
        }
    )


def test_a_legacy_strategy_given_to_codedsecagg_is_refused_with_the_legacy_way_in() -> None:
    with pytest.raises(ConfigurationError, match="CodedSecAggWorkflow"):
        CodedSecAgg(legacy.FedAvg(), num_stragglers=1, privacy_threshold=1)  # type: ignore[arg-type]


def test_an_accountant_is_refused() -> None:
    dp = msgapi.DifferentialPrivacyClientSideFixedClipping(
        msgapi.FedAvg(), noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=4
    )
    dp.accountant = object()  # type: ignore[assignment]
    with pytest.raises(NotComposableError, match="accountant"):
        CodedSecAgg(dp, num_stragglers=1, privacy_threshold=1)


def test_noise_is_calibrated_to_the_partitions_summed() -> None:
    dp = msgapi.DifferentialPrivacyClientSideFixedClipping(
        msgapi.FedAvg(), noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=3
    )
    old = legacy.DifferentialPrivacyClientSideFixedClipping(
        legacy.FedAvg(), noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=3
    )
    calibrate_noise(dp, 6)
    calibrate_noise(LegacyStrategy(old), 6)
    assert dp.num_sampled_clients == 6 and old.num_sampled_clients == 6


# ---------------------------------------------------------------------- Flower's DP wrappers
BIG = 2000  # model size of the DP tests: enough coordinates to measure the noise's spread


def _big_step(k: int) -> np.ndarray:
    """Partition k's update, of L2 norm 0.5 * (k + 1): above the clipping norm for k >= 1."""
    v = np.cos(np.arange(BIG) * (k + 1.5)).astype(np.float64)
    return (0.5 * (k + 1) * v / np.linalg.norm(v)).astype(np.float32)


def _clipped(k: int, c: float) -> np.ndarray:
    u = _big_step(k).astype(np.float64)
    return u * min(1.0, c / np.linalg.norm(u))


class DPGrid(FakeGrid):
    """Message-API silos: the user's train function, Flower's fixedclipping_mod after the coded
    mod (so it clips each partition's update)."""

    def __post_init__(self) -> None:
        from flwr.clientapp.mod import fixedclipping_mod

        super().__post_init__()
        app = ClientApp(mods=[coded_secagg_mod, fixedclipping_mod])

        @app.train()
        def train(msg: Message, context: Context) -> Message:
            k = int(context.node_config["partition-id"])
            w = msg.content["arrays"]["w"].numpy() + _big_step(k)
            content = RecordDict(
                {
                    "arrays": ArrayRecord({"w": Array(w.astype(np.float32))}),
                    "metrics": MetricRecord({"num-examples": EXAMPLES}),
                }
            )
            return Message(content, reply_to=msg)

        self.app = app


class _Records(logging.Handler):
    """Keeps the records the server-side ``flwr`` logger emits in this process."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def flwr_records() -> Iterator[list[logging.LogRecord]]:
    logger, handler = logging.getLogger("flwr"), _Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _discrepancies(records: list[logging.LogRecord]) -> int:
    return sum(r.msg == CLIENTS_DISCREPANCY_WARNING for r in records)


@pytest.mark.parametrize(
    "inner, attr",
    [
        (lambda: msgapi.FedAvg(fraction_train=0.2), "fraction_train=0.2"),
        (lambda: legacy.FedAvg(fraction_fit=0.5), "fraction_fit=0.5"),
    ],
)
def test_client_sampling_under_dp_is_refused_naming_the_setting(inner: Any, attr: str) -> None:
    is_legacy = isinstance(inner(), legacy.Strategy)
    wrapper = legacy if is_legacy else msgapi
    dp = wrapper.DifferentialPrivacyClientSideFixedClipping(
        inner(), noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=4
    )
    with pytest.raises(ConfigurationError, match=attr) as info:
        if is_legacy:
            LegacyStrategy(dp)
        else:
            CodedSecAgg(dp, num_stragglers=1, privacy_threshold=1)
    assert "=1.0" in str(info.value) and "amplification" in str(info.value)
    # without DP, sampling is only ignored (every silo trains every round): no refusal
    if is_legacy:
        LegacyStrategy(inner())
    else:
        CodedSecAgg(inner(), num_stragglers=1, privacy_threshold=1)


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_client_side_fixed_clipping_clips_each_partition_and_noise_uses_k(
    noise: float, flwr_records: list[logging.LogRecord]
) -> None:
    c = 0.6
    dp = msgapi.DifferentialPrivacyClientSideFixedClipping(
        msgapi.FedAvg(fraction_evaluate=0.0, min_available_nodes=N),
        noise_multiplier=noise,
        clipping_norm=c,
        num_sampled_clients=1,  # wrong on purpose: coded-fl sets it to K = 4
    )
    s = CodedSecAgg(dp, num_stragglers=1, privacy_threshold=1, **FAST)  # type: ignore[arg-type]
    init = ArrayRecord({"w": Array(np.zeros(BIG, dtype=np.float32))})
    result = s.start(grid=DPGrid(N), initial_arrays=init, num_rounds=1)
    assert [r.ok for r in s.reports] == [True]
    assert dp.num_sampled_clients == N
    # the change of noise is a warning naming both values; the one result standing for all K
    # partitions raises no per-round "privacy leakage" warning
    changed = [r.getMessage() for r in flwr_records if r.levelno == logging.WARNING]
    assert any("num_sampled_clients 1 -> 4" in m for m in changed), changed
    assert any("aggregate_train: Received 1 results" in r.getMessage() for r in flwr_records)
    assert _discrepancies(flwr_records) == 0
    # the control: Flower's wrapper given that one result directly does warn
    reply = Message(
        RecordDict({"arrays": result.arrays, "metrics": MetricRecord({"num-examples": 1})}),
        dst_node_id=1,
        message_type=MessageType.TRAIN,
    )
    dp.aggregate_train(2, [reply])
    assert _discrepancies(flwr_records) == 1
    got = result.arrays["w"].numpy().astype(np.float64)
    clipped = np.mean([_clipped(k, c) for k in range(N)], axis=0)
    unclipped = np.mean([_big_step(k) for k in range(N)], axis=0)
    if noise == 0.0:
        assert np.abs(got - clipped).max() <= _bound()
        assert np.abs(unclipped - clipped).max() > 100 * _bound()  # clipping changed it
    else:  # Gaussian noise of std z C / K on every coordinate (not z C / 1)
        spread = float(np.std(got - clipped))
        assert abs(spread - noise * c / N) <= 0.1 * noise * c / N, spread


def test_legacy_client_side_fixed_clipping_clips_each_partition() -> None:
    from flwr.client.mod import fixedclipping_mod

    c = 0.02  # the legacy updates _step(k) have norms 0.04 .. 0.16
    dp = legacy.DifferentialPrivacyClientSideFixedClipping(
        _initial(), noise_multiplier=0.0, clipping_norm=c, num_sampled_clients=N
    )
    grid = LegacyGrid.__new__(LegacyGrid)
    grid.mods = [fixedclipping_mod]
    LegacyGrid.__init__(grid, N)
    ctx = _workflow_run(dp, grid, rounds=1)
    clipped = []
    for k in range(N):
        u = _step(k).astype(np.float64)
        clipped.append(u * min(1.0, c / np.linalg.norm(u)))
    assert np.abs(_model(ctx) - np.mean(clipped, axis=0)).max() <= _bound()
    unclipped = np.mean([_step(k) for k in range(N)], axis=0)
    assert np.abs(unclipped - np.mean(clipped, axis=0)).max() > 20 * _bound()


def test_settings_of_a_wrapped_strategy_are_read_through_the_wrapper() -> None:
    inner = msgapi.FedAvg(min_available_nodes=7, arrayrecord_key="model")
    dp = msgapi.DifferentialPrivacyClientSideFixedClipping(
        inner, noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=7
    )
    s = CodedSecAgg(dp, num_stragglers=1, privacy_threshold=1)
    assert s.spec.arrays_key == "model"
    with pytest.raises(ConfigurationError, match="min_available_nodes=7 exceeds the 3 silos"):
        s._check_inner(3)
    old = legacy.DifferentialPrivacyClientSideFixedClipping(
        legacy.FedAvg(min_available_clients=5, min_fit_clients=5),
        noise_multiplier=0.1,
        clipping_norm=1.0,
        num_sampled_clients=5,
    )
    adapter = LegacyStrategy(old)
    assert adapter.min_available_nodes == 5 and adapter.min_train_nodes == 5


# ---------------------------------------------------------------------- legacy replies, bad input
def _fitres(arrays: list[np.ndarray], *, code: int = 0) -> RecordDict:
    from flwr.common import Code
    from flwr.compat.common import recorddict_compat as compat

    res = FitRes(Status(Code(code), "boom" if code else ""), ndarrays_to_parameters(arrays), 3, {})
    res.metrics = {"train_loss": 0.25, "note": "text"}
    return compat.fitres_to_recorddict(res, keep_input=True)


def test_a_legacy_reply_is_labelled_from_its_npy_headers_without_copies() -> None:
    from clients.legacy import from_legacy_reply
    from coded_fl.vocabulary import TrainSpec

    model = ArrayRecord({"a": Array(np.zeros((2, 3), np.float32)), "b": Array(np.zeros(4))})
    content = _fitres([np.ones((2, 3), np.float32), np.arange(4.0)])
    data = [a.data for a in content["fitres.parameters"].values()]
    spec = TrainSpec(arrays_key="fitins.parameters", weight_key="num_examples")
    out = from_legacy_reply(content, model, spec, who="w")
    arrays = out["fitins.parameters"]
    assert [(k, tuple(a.shape), a.dtype) for k, a in arrays.items()] == [
        ("a", (2, 3), "float32"),
        ("b", (4,), "float64"),
    ]
    assert [a.data for a in arrays.values()] == data  # the same bytes
    assert np.array_equal(arrays["b"].numpy(), np.arange(4.0))
    assert dict(out["metrics"].items()) == {"train_loss": 0.25, "num_examples": 3}


@pytest.mark.parametrize("fault", ["status", "count", "bytes"])
def test_a_bad_legacy_reply_is_refused_with_a_typed_error(fault: str) -> None:
    from clients.legacy import from_legacy_reply
    from coded_fl.errors import InputError
    from coded_fl.vocabulary import TrainSpec

    model = ArrayRecord({"a": Array(np.zeros(3, np.float32))})
    content = _fitres([np.ones(3, np.float32)], code=1 if fault == "status" else 0)
    if fault == "count":
        content = _fitres([np.ones(3, np.float32), np.ones(3, np.float32)])
    if fault == "bytes":
        content["fitres.parameters"] = ArrayRecord(
            {"0": Array(dtype="", shape=(), stype="numpy.ndarray", data=b"garbage")}
        )
    match = {"status": "status", "count": "2 arrays", "bytes": "not NumPy"}[fault]
    with pytest.raises(InputError, match=match):
        from_legacy_reply(content, model, TrainSpec(), who="the train function (partition 0)")


def test_the_legacy_workflow_takes_distributed_dp() -> None:
    """``CodedSecAggWorkflow(dp=...)``: the same keying rounds and noisy mean as the Message
    API (each NumPyClient's update unweighted, clipped and noised; 6 silos in 3 groups)."""
    from coded_fl.dp import DistributedDP

    n, rounds = 6, 2
    dp = DistributedDP(noise_multiplier=0.01, clip=10.0)  # no update is clipped
    ctx = LegacyContext(
        Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={}),
        config=ServerConfig(num_rounds=rounds),
        strategy=legacy.FedAvg(
            min_available_clients=n,
            fraction_evaluate=0.0,
            initial_parameters=ndarrays_to_parameters([np.zeros(D, dtype=np.float32)]),
        ),
    )
    fit = CodedSecAggWorkflow(num_stragglers=1, privacy_threshold=1, dp=dp, **FAST)  # type: ignore[arg-type]
    DefaultWorkflow(fit_workflow=fit)(LegacyGrid(n), ctx)
    assert fit.coded is not None
    reps = fit.coded.reports
    assert [r.ok for r in reps] == [True] * rounds
    assert [r.keying_rounds for r in reps] == [2, 0]
    assert 0 < reps[0].epsilon < reps[1].epsilon  # type: ignore[operator]
    plan = fit.coded._run.config.dp_plan  # type: ignore[union-attr]
    noise = plan.noise_std / n  # per coordinate of the mean, each round
    expected = rounds * np.mean([_step(k) for k in range(n)], axis=0)
    err = _model(ctx) - expected
    assert np.abs(err).max() < 6 * noise * np.sqrt(rounds)
    assert err.std() > 0.3 * noise  # the noise is there
