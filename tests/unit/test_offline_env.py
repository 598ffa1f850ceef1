"""The offline Flower/Ray environment has two homes that must agree: ``scripts/env.sh``, which
every script sources (the main job's SuperLink and the Ray cluster its simulation runtime
starts inherit it), and ``simulations.runtime.flower_sim.OFFLINE_ENV``, which the simulations
started from Python set. A setting added to one and not the other (a Ray knob that saves CPU in
the benchmarks but not in ``flwr run``, say) is caught here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from simulations.runtime.flower_sim import LEAN_RAY_ENV, OFFLINE_ENV, offline_environment

ENV_SH = Path(__file__).resolve().parents[2] / "scripts" / "env.sh"


def _sourced() -> dict[str, str]:
    """The environment a script sees after ``source scripts/env.sh`` from an empty one."""
    out = subprocess.run(
        ["bash", "-c", f'source "{ENV_SH}" && env -0'],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_env_sh_sets_every_offline_setting_as_the_python_side_does() -> None:
    sourced = _sourced()
    differ = {k: (sourced.get(k), v) for k, v in OFFLINE_ENV.items() if sourced.get(k) != v}
    assert differ == {}, differ


def test_the_lean_ray_settings_are_part_of_the_offline_environment() -> None:
    assert LEAN_RAY_ENV.items() <= OFFLINE_ENV.items()
    # each one is a Ray system-config override (RAY_<name>), spelled as Ray reads it
    assert all(k.startswith("RAY_") and k[4:].islower() for k in LEAN_RAY_ENV)


def test_offline_environment_keeps_a_callers_own_choice(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    mine = next(iter(LEAN_RAY_ENV))  # Ray's own spelling: lower case after RAY_
    monkeypatch.setenv(mine, "1")
    for k in OFFLINE_ENV:
        if k != mine:
            monkeypatch.delenv(k, raising=False)
    offline_environment()
    assert os.environ[mine] == "1"
    assert all(os.environ[k] == v for k, v in OFFLINE_ENV.items() if k != mine)
