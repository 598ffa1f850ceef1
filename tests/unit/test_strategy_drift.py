"""CodedSecAgg with replicas that disagree, end to end through the real ClientApps (the faults
tests' in-process grid): every reply arrives together, so every group's members are compared.

Drift (a small offset at some sites, as another CPU gives) completes every round; a silo far off
where its group agrees is overruled, named and left out of the later rounds, and the model is
the honest FedAvg; a pair that disagrees everywhere aborts its rounds, and the run stops after
``max_aborted_rounds`` of them with a typed error instead of reporting N aborted rounds.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from coded_fl.errors import RunAbortedError
from coded_fl.secagg import AbortCode
from strategies import CodedSecAgg
from tests.unit.test_strategy_faults import D, FakeGrid, _task_identity  # noqa: F401
from tests.unit.test_strategy_faults import _strategy as faults_strategy

pytestmark = pytest.mark.usefixtures("_task_identity")


def _strategy(n: int, s: int, **kw: object) -> CodedSecAgg:
    # wait for every upload (extra_replies = s): every member of a group is compared
    return faults_strategy(n, s=s, extra=s, extra_wait=5.0, masking="aligned", **kw)


def _run(strategy: CodedSecAgg, grid: FakeGrid, rounds: int) -> np.ndarray:
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    out = strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds)
    return out.arrays["w"].numpy()


def _fedavg(n: int, rounds: int, step: float = 0.01) -> np.ndarray:
    """Plain float FedAvg of the test's train function (equal weights): every round adds the
    mean of step * (k + 1) over the n partitions."""
    return np.full(D, rounds * step * (n + 1) / 2, dtype=np.float64)


def test_drift_at_every_other_site_completes_every_round() -> None:
    n = 6
    grid = FakeGrid(n, node_config={f"test-offset-{i}": 3e-5 * i for i in (1, 3, 5)})
    strategy = _strategy(n, 2)
    w = _run(strategy, grid, 4)
    reports = strategy.reports
    assert [r.ok for r in reports] == [True] * 4, [r.reason for r in reports]
    assert all(r.offenders == () and r.erased == 0 for r in reports)
    assert sum(r.within_tolerance for r in reports) > 0
    # each group's value is its members' median: within the drift of the honest FedAvg
    assert np.allclose(w, _fedavg(n, 4), atol=1e-3)


def test_a_deviating_silo_is_overruled_named_and_left_out() -> None:
    n = 6  # s = 2: groups {0, 1, 2} and {3, 4, 5}
    grid = FakeGrid(n, node_config={"test-offset-4": 0.5})
    strategy = _strategy(n, 2)
    w = _run(strategy, grid, 4)
    reports = strategy.reports
    # every upload in, so every member is compared (shared masks in rounds 1-2 too): 3 and 5
    # outvote it in round 1, and it is left out from then on
    assert [r.ok for r in reports] == [True] * 4, [r.line() for r in reports]
    assert reports[0].offenders == (4,) and "left out" in reports[0].line()
    assert all(4 in r.excluded and r.offenders == () for r in reports[1:])
    # the honest FedAvg, up to quantization (rho = 10 / 1024: a coarse step)
    assert np.allclose(w, _fedavg(n, 4), atol=1e-3)


def test_a_pair_that_disagrees_everywhere_stops_the_run_after_max_aborted_rounds() -> None:
    n = 4  # s = 1: groups {0, 1} and {2, 3}; silo 1 is off by 0.5 everywhere
    grid = FakeGrid(n, node_config={"test-offset-1": 0.5})
    strategy = _strategy(n, 1, max_aborted_rounds=2)
    with pytest.raises(RunAbortedError, match="aborted in a row"):
        _run(strategy, grid, 10)
    reports = strategy.reports
    assert len(reports) == 2 and not any(r.ok for r in reports)
    assert all("drift tolerance" in r.reason for r in reports)
    assert all(r.abort_code is AbortCode.REPLICAS_DISAGREE for r in reports)
    assert all(set(r.suspects) == {0, 1} for r in reports)
