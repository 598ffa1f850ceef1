"""The adaptive clip range end to end, through the real ClientApps (the faults tests' grid):
exact clip counts, a quorum of partitions before the range widens, a cap, and shrink-back.

With ``masking="shares"`` and no extra replies, n = 4 and s = 1 (groups {0, 1} and {2, 3}),
every round closes on the first three uploads (silos 0, 1, 2): silo 2 is the only member of
its group in the round, so nothing compares its reports: the setting where one deviating silo
could steer the range on its own before the quorum and the cap.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from strategies import CodedSecAgg
from tests.unit.test_strategy_drift import _fedavg
from tests.unit.test_strategy_drift import _strategy as drift_strategy
from tests.unit.test_strategy_faults import D, FakeGrid, _task_identity  # noqa: F401
from tests.unit.test_strategy_faults import _strategy as faults_strategy

pytestmark = pytest.mark.usefixtures("_task_identity")

HUGE = 1e30


def _run(strategy: CodedSecAgg, grid: FakeGrid, rounds: int, config: dict[int, dict]) -> None:
    """``rounds`` rounds; before round r every node's config takes ``config.get(r)``."""

    def before(r: int) -> None:
        for ctx in grid.contexts.values():
            ctx.node_config.update(config.get(r, {}))

    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    strategy.start(grid=grid, initial_arrays=init, num_rounds=rounds, before_round=before)


def test_one_silo_clipping_alone_does_not_widen_below_the_quorum(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grid = FakeGrid(4)
    s = faults_strategy(4)  # clip_quorum automatic: a silo holds 2 partitions, so 3
    with caplog.at_level("INFO", logger="flwr"):
        _run(s, grid, 2, {1: {"test-offset-2": HUGE}})
    rep = s.reports[0]
    assert rep.ok and rep.stragglers == (3,), rep.line()  # silo 2's group is not compared
    # exact counts: silo 2's two partitions, every entry of each
    assert rep.clipped_partitions == 2 and rep.clipped_fraction == 2 * D / (4 * D)
    assert rep.clip_range == 1.0 and rep.round_trips == 2  # no rerun
    assert s._run is not None and s._run.delta_scale == 1.0
    assert "2 of 4 partitions had update entries beyond the clip range 1" in caplog.text
    assert "fewer than clip_quorum=3" in caplog.text
    assert "widened" not in caplog.text


def test_a_huge_silo_widens_at_most_to_max_clip_range_and_the_range_shrinks_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grid = FakeGrid(4)
    s = faults_strategy(4, clip_quorum=1, max_clip_range=20.0)  # g at most 16
    with caplog.at_level("INFO", logger="flwr"):
        _run(s, grid, 5, {1: {"test-offset-2": HUGE}, 3: {"test-offset-2": 0.0}})
    reports = s.reports
    assert all(r.ok for r in reports), [r.line() for r in reports]
    # rounds 1-2 huge: widened 1 -> 4 -> 16 and no further (the cap); round 3 honest: nothing
    # beyond 16 / 4, so round 4 uses 4, then 1
    assert [r.clip_range for r in reports] == [16.0, 16.0, 16.0, 4.0, 1.0]
    assert [r.next_clip_range for r in reports] == [0.0, 0.0, 4.0, 1.0, 0.0]
    assert reports[0].round_trips == 6 and reports[1].round_trips == 2
    assert "the range is at max_clip_range=16" in caplog.text
    assert "clip range narrowed to 4 for the next round" in reports[2].line()
    assert s._run is not None and s._run.delta_scale == 1.0


def test_the_range_shrinks_after_rounds_without_big_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # round 1: every partition moves by 2 (k + 1) rho (rho = 1000 / 1024): all 4 clip at 1,
    # the quorum of 3 widens to 4, where only partitions 2 and 3 clip: applied clipped.
    # Round 2 moves by 0.01 (k + 1) rho, nowhere beyond 4 / 4: round 3 is back at 1.
    grid = FakeGrid(4, node_config={"test-examples": 1000, "test-step": 2.0})
    s = faults_strategy(4)
    with caplog.at_level("INFO", logger="flwr"):
        _run(s, grid, 3, {2: {"test-step": 0.01}})
    reports = s.reports
    assert all(r.ok for r in reports), [r.line() for r in reports]
    assert [r.clip_range for r in reports] == [4.0, 4.0, 1.0]
    assert [r.clipped_partitions for r in reports] == [2, 0, 0]
    assert reports[1].next_clip_range == 1.0 and "narrowed to 1" in reports[1].line()
    assert "4 of 4 partitions had update entries beyond the clip range" in caplog.text
    assert "2 of 4 partitions had update entries beyond the clip range 4" in caplog.text


def test_a_silo_with_huge_values_is_named_by_its_group_and_the_model_is_fedavg() -> None:
    n = 6  # s = 2: groups {0, 1, 2} and {3, 4, 5}; aligned masks, every upload compared
    grid = FakeGrid(n, node_config={"test-offset-4": HUGE})
    s = drift_strategy(n, 2)
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    out = s.start(grid=grid, initial_arrays=init, num_rounds=3)
    reports = s.reports
    assert [r.ok for r in reports] == [True] * 3, [r.line() for r in reports]
    assert reports[0].offenders == (4,)
    assert all(4 in r.excluded for r in reports[1:])
    # its clip flags were outvoted exactly like its model entries: nothing clipped, no widening
    assert all(r.clipped_partitions == 0 and r.clip_range == 1.0 for r in reports)
    w = out.arrays["w"].numpy()
    assert np.all(np.isfinite(w)) and np.allclose(w, _fedavg(n, 3), atol=1e-3)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("clip_quorum", 0),
        ("clip_quorum", 1.5),
        ("clip_quorum", True),
        ("clip_quorum", 5),  # more than the K = 4 partitions
        ("max_clip_range", 0.5),  # below clip_range
        ("max_clip_range", 2.0**17),  # beyond clip_range x 2^16
        ("max_clip_range", math.inf),
        ("max_clip_range", "16"),
    ],
)
def test_a_bad_clip_setting_is_refused_at_construction_by_name(setting: str, value: object) -> None:
    from coded_fl.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=setting):
        faults_strategy(4, **{setting: value})  # type: ignore[arg-type]


def test_a_clip_flag_that_differs_by_float_drift_names_nobody() -> None:
    # n = 6, s = 2, aligned masks, every member compared. rho = 512 / 1024 = 0.5; partition 5
    # packs 0.5 * 6 * step = 0.2499975, just under c / 4 = 0.25, at silos 3 and 5; silo 4's
    # replica drifts by 2e-5 (another CPU), which puts it just over: its "beyond c / 4" flag
    # differs from its group's. Drift, not deviation: no silo is named or left out.
    n, step = 6, 0.0833325
    grid = FakeGrid(n, node_config={"test-examples": 512, "test-step": step, "test-offset-4": 2e-5})
    s = drift_strategy(n, 2)
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    s.start(grid=grid, initial_arrays=init, num_rounds=2)
    reports = s.reports
    assert [r.ok for r in reports] == [True, True], [r.line() for r in reports]
    assert all(r.offenders == () and r.excluded == () for r in reports), [r.line() for r in reports]
    assert all(r.within_tolerance > 0 for r in reports)
