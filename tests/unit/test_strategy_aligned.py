"""``CodedSecAgg(masking="aligned")`` through the real driver and the real client mod (the
in-process grid of ``test_strategy_faults``): rounds turn to one round trip once the edge keys
are dealt, the model is FedAvg's, and a restarted silo is rekeyed, gets its edge keys again
and the run goes on."""

from __future__ import annotations

import numpy as np

from coded_fl.secagg.client import NEEDS_KEYS
from strategies import CodedSecAgg
from tests.unit.test_strategy_faults import (  # noqa: F401 - the fixture sets Flower's identity
    FakeGrid,
    _start,
    _strategy,
    _task_identity,
    restart_before_push,
)


def _aligned(n: int) -> CodedSecAgg:
    return _strategy(n, masking="aligned")


def test_rounds_take_one_round_trip_once_the_edge_keys_are_dealt_and_match_fedavg() -> None:
    grid = FakeGrid(6)
    s = _aligned(6)
    _start(s, grid, 5)
    assert [r.ok for r in s.reports] == [True] * 5, [r.reason for r in s.reports]
    assert [r.round_trips for r in s.reports] == [2, 2, 1, 1, 1]
    assert [r.responders for r in s.reports][2:] == [0, 0, 0]
    final = s.reports[-1].arrays
    assert final is not None
    # every partition k moves each entry by 0.01 (k + 1), equal weights: FedAvg adds the mean,
    # up to stochastic rounding (a mask that did not cancel would leave values of order p)
    np.testing.assert_allclose(final["w"].numpy(), 5 * 0.01 * 3.5, atol=1e-3)


def test_a_restarted_silo_gets_new_keys_and_edge_keys_and_the_rounds_go_on() -> None:
    grid = FakeGrid(6)
    s = _aligned(6)
    # pushes: keys, train 1, recovery 1, train 2, recovery 2, train 3 (aligned), train 4
    restart_before_push(grid, 102, 7)
    _start(s, grid, 8)
    assert all(r.ok for r in s.reports), [r.reason for r in s.reports]
    assert NEEDS_KEYS in s.reports[3].errors[2]  # round 4: silo 2 lost its state
    assert s.key_exchanges[-1][1] == (2,)
    # back to shared masks while its edge keys are dealt again, then one round trip again
    assert s.reports[-1].round_trips == 1 and s.reports[-1].responders == 0
