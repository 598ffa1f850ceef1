"""The main job's ``threads-per-silo`` / ``deterministic`` run-config keys reach torch inside the
train function, per silo, through a real coded round (``silo_torch_mod`` outside the coded mod)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients import coded_secagg_mod
from coded_fl.errors import ConfigurationError
from simulations.app.silo_torch import (
    conv_kernels,
    parse_threads,
    silo_conv,
    silo_threads,
    silo_torch_mod,
)
from tests.unit.test_strategy_faults import FakeGrid, _start, _strategy


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 7)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


def _recording_app(seen: list[tuple[int, int, int, bool]]) -> ClientApp:
    app = ClientApp(mods=[silo_torch_mod, coded_secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        site = int(context.node_config["site"])
        k = int(context.node_config["partition-id"])  # the partition, set by the coded mod
        seen.append(
            (site, k, torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
        )
        w = msg.content["arrays"]["w"].numpy()
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({"w": Array((w + 0.01).astype(np.float32))}),
                    "metrics": MetricRecord({"num-examples": 10}),
                }
            ),
            reply_to=msg,
        )

    return app


def _round(run_config: dict[str, object]) -> list[tuple[int, int, int, bool]]:
    seen: list[tuple[int, int, int, bool]] = []
    grid = FakeGrid(4)
    grid.app = _recording_app(seen)
    for ctx in grid.contexts.values():
        ctx.run_config = dict(run_config)  # type: ignore[assignment]
    strategy = _strategy(4)
    torch.set_num_threads(1)
    _start(strategy, grid, 1)
    assert [r.ok for r in strategy.reports] == [True]
    assert torch.get_num_threads() == 1  # restored after every call
    return seen


def test_threads_per_silo_reach_the_train_function_of_each_silo() -> None:
    seen = _round({"threads-per-silo": "1,2"})
    assert len(seen) == 8  # 4 silos x 2 partitions each (s = 1)
    for site, _k, threads, det in seen:
        assert threads == (1, 2)[site % 2], seen
        assert not det
    # the replicas of one partition ran with different thread counts: the heterogeneity wanted
    by_partition: dict[int, set[int]] = {}
    for _site, k, threads, _det in seen:
        by_partition.setdefault(k, set()).add(threads)
    assert all(v == {1, 2} for v in by_partition.values()), by_partition


def test_deterministic_flag_applies_the_helper() -> None:
    seen = _round({"deterministic": True, "threads-per-silo": "2"})
    assert {(threads, det) for _, _, threads, det in seen} == {(2, True)}
    assert not torch.are_deterministic_algorithms_enabled()
    seen = _round({"deterministic": True})
    assert {(threads, det) for _, _, threads, det in seen} == {(1, True)}


def test_default_leaves_torch_alone() -> None:
    seen = _round({})
    assert {(threads, det) for _, _, threads, det in seen} == {(1, False)}


def test_main_job_places_the_mod_outside_the_coded_mod() -> None:
    from simulations.app import client_app

    mods = client_app.app._mods
    assert mods.index(silo_torch_mod) < mods.index(coded_secagg_mod)


def test_parse() -> None:
    assert parse_threads("") == ()
    assert parse_threads(" 1, 2 ,4") == (1, 2, 4)
    assert silo_threads({"threads-per-silo": "1,2,4"}, 5) == 4
    assert silo_threads({}, 3) is None
    for bad in ("0", "1,x", "1,,2", "-2"):
        with pytest.raises(ConfigurationError, match="threads-per-silo"):
            parse_threads(bad)


def test_bad_setting_is_an_error_of_the_call() -> None:
    ctx = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0},
        state=RecordDict(),
        run_config={"threads-per-silo": "two"},
    )
    with pytest.raises(ConfigurationError, match=r"e\.g\. threads-per-silo"):
        silo_torch_mod(None, ctx, lambda m, c: m)  # type: ignore[arg-type]


def test_deployment_bed_sets_a_per_process_environment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A SuperNode of the deployment bed can get its own ATEN_CPU_CAPABILITY (Site.env)."""
    from pathlib import Path

    from simulations.deploy.launcher import Deployment
    from simulations.deploy.testbed import Site

    dep = Deployment(tmp_path, tls=False, auth=False)
    cmd = ["sh", "-c", 'echo "cap=$ATEN_CPU_CAPABILITY home=$FLWR_HOME"']
    dep.spawn("a", cmd, env={"ATEN_CPU_CAPABILITY": "avx2"})
    dep.spawn("b", cmd)
    assert dep.wait_exit("a", timeout=30) == 0 and dep.wait_exit("b", timeout=30) == 0
    log_a, log_b = (Path(dep.procs[n].log).read_text() for n in "ab")
    assert f"cap=avx2 home={dep.home}" in log_a  # on top of the deployment's environment
    assert f"cap= home={dep.home}" in log_b
    assert Site(env={"ATEN_CPU_CAPABILITY": "default"}).env == {"ATEN_CPU_CAPABILITY": "default"}


def test_conv_kernels_per_silo_are_cycled_and_typos_are_refused() -> None:
    assert [silo_conv("onednn,native", k) for k in range(4)] == [
        "onednn",
        "native",
        "onednn",
        "native",
    ]
    assert silo_conv("", 3) is None
    with pytest.raises(ConfigurationError, match="'mkl' is not one of"):
        silo_conv("onednn,mkl", 0)


def test_the_two_conv_kernel_families_round_differently_and_the_setting_is_restored() -> None:
    # the premise of the simulation's heterogeneity bed (tests/integration/test_hetero_flower.py)
    from simulations.app.task import Net

    torch.manual_seed(0)
    net = Net()
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    before = torch.backends.mkldnn.enabled

    def grad(kind: str) -> torch.Tensor:
        net.zero_grad()
        with conv_kernels(kind):
            torch.nn.functional.cross_entropy(net(x), y).backward()
        return torch.cat([p.grad.flatten() for p in net.parameters() if p.grad is not None])

    a, b = grad("onednn"), grad("native")
    assert torch.backends.mkldnn.enabled == before
    assert (a != b).sum() > 100  # thousands here; bit-identical would make the bed vacuous
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)  # the same gradient up to rounding
