"""The main app's summary compares coded-fl with plain FedAvg only where plain FedAvg ran: a
deployment whose ClientApps start slower than ``plain-timeout`` heard from no silo in any plain
round, and used to be reported as "+85.50 percentage points" for coded-fl."""

from __future__ import annotations

from simulations.app.server_app import _plain_lines


def test_no_comparison_when_no_plain_round_heard_from_any_silo() -> None:
    (line,) = _plain_lines([0, 0, 0, 0], 6, 12.0, 0.095, 50.0)
    assert "no round heard from any of the 6 silos" in line
    assert "no accuracy or time comparison" in line and "raise plain-timeout" in line


def test_the_comparison_stands_when_a_round_heard_from_silos() -> None:
    # a straggler cut off by the timeout is what the baseline models
    assert _plain_lines([6, 5, 0, 6], 6, 12.0, 0.9, 50.0) == []
    assert _plain_lines([6] * 8, 6, 12.0, 0.95, 90.0) == []
