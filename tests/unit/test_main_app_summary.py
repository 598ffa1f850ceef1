"""The main app's summary compares coded-fl with plain FedAvg only where plain FedAvg ran: a
deployment whose ClientApps start slower than ``plain-timeout`` heard from no silo in any plain
round, and used to be reported as "+85.50 percentage points" for coded-fl."""

from __future__ import annotations

from pathlib import Path

import tomllib

from simulations.app.server_app import _plain_lines, make_strategy

ROOT = Path(__file__).resolve().parents[2]


def test_no_comparison_when_no_plain_round_heard_from_any_silo() -> None:
    (line,) = _plain_lines([0, 0, 0, 0], 6, 12.0, 0.095, 50.0)
    assert "no round heard from any of the 6 silos" in line
    assert "no accuracy or time comparison" in line and "raise plain-timeout" in line


def test_the_comparison_stands_when_a_round_heard_from_silos() -> None:
    # a straggler cut off by the timeout is what the baseline models
    assert _plain_lines([6, 5, 0, 6], 6, 12.0, 0.9, 50.0) == []
    assert _plain_lines([6] * 8, 6, 12.0, 0.95, 90.0) == []


def _run_config(**changes: object) -> dict[str, object]:
    raw = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {**raw["tool"]["flwr"]["app"]["config"], **changes}


def test_the_main_job_turns_distributed_dp_on_from_its_run_config() -> None:
    """The main job's own keys: DP off by default (train_loss aggregated securely), on with
    dp-noise-multiplier > 0, where the job must not ask for a train metric (the wrapper
    refuses metric_keys with dp: a user's `-c dp-noise-multiplier=1` used to fail there)."""
    plain = make_strategy(_run_config(), 10, print)
    assert plain.protocol.dp is None and plain.spec.metric_keys == ("train_loss",)
    rc = _run_config(**{"dp-noise-multiplier": 1.0, "dp-clip": 0.5, "privacy-threshold": 1})
    private = make_strategy(rc, 10, print)
    dp = private.protocol.dp
    assert dp is not None and dp.noise_multiplier == 1.0
    assert dp.clip == 0.5 and dp.delta == 1e-5
    assert private.spec.metric_keys == () and private.spec.metric_slots == 0
