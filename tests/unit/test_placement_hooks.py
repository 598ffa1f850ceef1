"""The two ``CodedSecAgg.start`` options coded shuffling needs (issue 17): ``before_round`` (a
reshuffle between rounds; its entries reach that round's train config on every silo) and
``silo_nodes`` (silo i of the code is the node that holds silo i's partitions)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MessageType

from coded_fl.errors import ConfigurationError
from tests.unit.test_strategy_faults import D, FakeGrid, _strategy


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def _init() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})


def test_before_round_runs_before_each_rounds_train_requests_and_reaches_every_silo() -> None:
    grid = FakeGrid(4)
    seen: list[tuple[int, int, object]] = []  # (node, server-round, our entry)
    calls: list[tuple[int, int]] = []  # (round, train messages pushed so far)
    app = grid.app

    def recording(msg, ctx):  # type: ignore[no-untyped-def]
        if msg.metadata.message_type == MessageType.TRAIN and "config" in msg.content:
            conf = msg.content["config"]
            seen.append((ctx.node_id, int(conf["server-round"]), conf.get("test.map")))
        return app(msg, ctx)

    grid.app = recording  # type: ignore[assignment]

    def before_round(r: int) -> ConfigRecord:
        calls.append((r, len(seen)))
        return ConfigRecord({"test.map": f"map-{r}"})

    strategy = _strategy(4)
    strategy.start(grid=grid, initial_arrays=_init(), num_rounds=3, before_round=before_round)
    assert all(rep.ok for rep in strategy.reports)
    assert [r for r, _ in calls] == [1, 2, 3]
    assert [n for _, n in calls] == [0, 4, 8]  # before that round's requests, after the last
    for r in (1, 2, 3):
        got = {node: entry for node, rr, entry in seen if rr == r}
        assert got == {100 + i: f"map-{r}" for i in range(4)}


def test_silo_nodes_fix_which_node_is_which_silo() -> None:
    grid = FakeGrid(4)
    order = [102, 100, 103, 101]
    strategy = _strategy(4)
    strategy.start(grid=grid, initial_arrays=_init(), num_rounds=1, silo_nodes=order)
    assert strategy.reports[0].ok
    assert strategy._run is not None and strategy._run.node_of == dict(enumerate(order))
    with pytest.raises(ConfigurationError, match="one node per silo"):
        strategy.start(grid=grid, initial_arrays=_init(), num_rounds=1, silo_nodes=order[:3])
