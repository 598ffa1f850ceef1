"""Train metrics without configuration (issue 32, item 2): with ``metric_keys`` left unset,
every number a train function returns in its metric record is aggregated as plain FedAvg
aggregates it (weighted by ``num-examples``), securely, in metric slots; the silos name the
metrics in their replies (names only) and the server labels the decoded sums with them.

End to end through the real strategy and the real ClientApp with ``coded_secagg_mod``
(``tests/unit/test_strategy_faults.FakeGrid``); the oracle is the weighted average over the
K partitions computed here in plain floats.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from hypothesis import given
from hypothesis import strategies as st

from clients import coded_secagg_mod
from coded_fl.errors import RemoteProtocolError
from coded_fl.layout import METRIC_BOUND
from coded_fl.vocabulary import (
    INFO_KEY,
    MAX_METRIC_SLOTS,
    METRIC_NAMES_ENTRY,
    TrainSpec,
    auto_metric_names,
)
from strategies.coded_secagg import AUTO_METRIC_SLOTS
from strategies.records import metric_names
from tests.unit.test_strategy_faults import (
    FakeGrid,
    _start,
    _strategy,
    _task_identity,  # noqa: F401  (autouse: Flower's task identity)
)

N = 4


def _metrics(k: int, node_config: dict) -> dict[str, float | int | list[float]]:
    out: dict[str, float | int | list[float]] = {
        "num-examples": 10 * (k + 1),
        "train_loss": 0.25 * (k + 1),
        "accuracy": 0.5 + 0.03 * k,
        "steps": 7 + k,  # an int metric
        "per_class": [0.1, 0.2],  # a list: plain FedAvg averages it, the slots skip it
    }
    for j in range(int(node_config.get("test-many", 0))):
        out[f"m{j:02d}"] = float(j)
    site = node_config["site"]
    if node_config.get(f"test-rename-{site}"):
        out["loss"] = out.pop("train_loss")  # another version of the train function
    return out


def _app() -> ClientApp:
    app = ClientApp(mods=[coded_secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy()
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({"w": Array((w + 0.01 * (k + 1)).astype(np.float32))}),
                    "metrics": MetricRecord(_metrics(k, context.node_config)),  # type: ignore[arg-type]
                }
            ),
            reply_to=msg,
        )

    return app


def _grid(**node_config: object) -> FakeGrid:
    grid = FakeGrid(N, node_config=dict(node_config))
    grid.app = _app()
    return grid


def _oracle(K: int, name: str, **node_config: object) -> float:
    rows = [_metrics(k, {"site": -1, **node_config}) for k in range(K)]
    w = np.array([float(r["num-examples"]) for r in rows])  # type: ignore[arg-type]
    v = np.array([float(r[name]) for r in rows])  # type: ignore[arg-type]
    return float((w * v).sum() / w.sum())


def _run(grid: FakeGrid, rounds: int = 2, **settings: object):  # type: ignore[no-untyped-def]
    s = _strategy(N, **settings)  # type: ignore[arg-type]
    _start(s, grid, rounds)
    assert all(r.ok for r in s.reports), [r.reason for r in s.reports]
    assert s._run is not None
    return s, s._run.config.gradient_code.K


def _atol(s) -> float:  # type: ignore[no-untyped-def]
    """What the metrics' quantization resolves: a metric travels as rho_k m c / METRIC_BOUND,
    each of the K partitions rounded to one step of 1 / scale, divided by total rho."""
    run = s._run
    K = run.config.gradient_code.K
    total_rho = sum(10 * (k + 1) for k in range(K)) / run.weight_bound
    return K * METRIC_BOUND / (run.config.clip_range * run.config.quantization.scale * total_rho)


@pytest.mark.parametrize("masking", ["shares", "aligned"])
def test_every_numeric_metric_is_aggregated_as_fedavg_would_without_metric_keys(
    masking: str,
) -> None:
    s, K = _run(_grid(), rounds=3, masking=masking)
    for rep in s.reports:
        got = dict(rep.train_metrics or {})
        # the numbers, weighted by num-examples; the list is not in a slot
        assert set(got) == {"train_loss", "accuracy", "steps"}, got
        for name in ("train_loss", "accuracy", "steps"):
            assert got[name] == pytest.approx(_oracle(K, name), abs=_atol(s)), name
        assert rep.metrics["train_loss"] == pytest.approx(_oracle(K, "train_loss"), abs=_atol(s))


def test_silos_that_name_different_metrics_leave_the_round_unlabelled_and_say_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # site 2 returns "loss" where the others return "train_loss": in the sorted order the two
    # land in different slots, so no slot is one metric: the round completes, its metrics
    # are left out, and the warning names what each silo sent
    with caplog.at_level(logging.WARNING, logger="flwr"):
        s, _ = _run(_grid(**{"test-rename-2": True}), rounds=1)
    (rep,) = s.reports
    assert not rep.train_metrics
    assert "train metrics left out this round: the silos named different metrics" in caplog.text
    assert "'loss'" in caplog.text and "'train_loss'" in caplog.text


def test_metrics_beyond_the_slots_are_left_out_by_name_and_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="flwr"):
        s, K = _run(_grid(**{"test-many": 10}), rounds=2)
    names = sorted(["train_loss", "accuracy", "steps", *(f"m{j:02d}" for j in range(10))])
    kept, dropped = names[:AUTO_METRIC_SLOTS], names[AUTO_METRIC_SLOTS:]
    for rep in s.reports:
        got = dict(rep.train_metrics or {})
        assert set(got) == set(kept)
        assert got["accuracy"] == pytest.approx(_oracle(K, "accuracy"), abs=_atol(s))
        assert got["m03"] == pytest.approx(3.0, abs=_atol(s))
    assert caplog.text.count("metrics left out") == 0
    assert caplog.text.count(f"{len(names)} metrics, {AUTO_METRIC_SLOTS} slots") == 1
    assert str(dropped) in caplog.text


def test_named_metric_keys_and_no_metrics_work_as_before() -> None:
    s, K = _run(_grid(), rounds=1, metric_keys=("accuracy",))
    got = dict(s.reports[0].train_metrics or {})
    assert set(got) == {"accuracy"}
    assert got["accuracy"] == pytest.approx(_oracle(K, "accuracy"), abs=_atol(s))
    s, _ = _run(_grid(), rounds=1, metric_keys=())
    assert not s.reports[0].train_metrics


# ------------------------------------------------------------------------- the pieces
def test_the_train_spec_carries_the_slots_and_refuses_bad_counts() -> None:
    spec = TrainSpec(metric_slots=8)
    assert TrainSpec.from_dict(spec.to_dict()) == spec
    assert spec.packed_metrics == tuple(f"#{j}" for j in range(8))
    assert TrainSpec(metric_keys=("a",)).packed_metrics == ("a",)
    for bad in (-1, MAX_METRIC_SLOTS + 1, 2.5, "8", True):
        with pytest.raises(RemoteProtocolError, match="metric-slots"):
            TrainSpec.from_dict({**spec.to_dict(), "metric-slots": bad})
    with pytest.raises(RemoteProtocolError, match="metric-slots"):
        TrainSpec.from_dict({**TrainSpec(metric_keys=("a",)).to_dict(), "metric-slots": 2})


def test_auto_names_are_the_numbers_but_the_weight_sorted() -> None:
    got = auto_metric_names(
        {"num-examples": 3, "b": 1.0, "a": 2, "flag": True, "xs": [1.0], "c": 0.5},
        "num-examples",
    )
    assert got == ("a", "b", "c")


def _reply_with(entry: object) -> Message:
    content = RecordDict()
    if entry is not None:
        from flwr.app import ConfigRecord

        content[INFO_KEY] = ConfigRecord({METRIC_NAMES_ENTRY: entry})  # type: ignore[dict-item]
    return Message(content, dst_node_id=1, message_type="train")


def test_metric_names_are_read_or_none() -> None:
    assert metric_names(_reply_with(json.dumps(["a", "b"]))) == ("a", "b")
    for bad in (None, "[1, 2]", "not json", '["a", "a"]', '{"a": 1}', '[""]', 3):
        assert metric_names(_reply_with(bad)) is None, bad


@given(st.one_of(st.text(max_size=300), st.integers(), st.floats(), st.binary(max_size=50)))
def test_metric_names_never_raise_on_anything_a_silo_sends(entry: object) -> None:
    got = metric_names(_reply_with(entry))
    assert got is None or all(isinstance(n, str) and n for n in got)
