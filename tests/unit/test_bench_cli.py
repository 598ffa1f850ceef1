"""``python -m simulations.bench``: the command line (``.ci/run`` runs ``all --quick --jobs 2``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from simulations.bench import BENCHMARKS, QUICK_SECONDS
from simulations.bench import __main__ as cli


def test_jobs_below_one_is_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["all", "--quick", "--jobs", "0"])
    assert exc.value.code == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err


def test_the_quick_timings_name_only_benchmarks_that_exist() -> None:
    assert set(QUICK_SECONDS) <= set(BENCHMARKS)


def test_children_run_longest_first_and_a_failure_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # each child is this interpreter printing its benchmark's name; "deploy" exits 3
    started: list[str] = []

    def call(cmd: list[str], stdout, stderr, env) -> int:  # type: ignore[no-untyped-def]
        name = cmd[3]
        assert cmd[:3] == [sys.executable, "-m", "simulations.bench"]
        assert cmd[4:] == ["--quick", "--out", f"{tmp_path}/{name}.json"]
        started.append(name)
        stdout.write(f"output of {name}\n")
        return 3 if name == "deploy" else 0

    monkeypatch.setattr(cli.subprocess, "call", call)
    args = argparse.Namespace(quick=True, out=str(tmp_path), parts=None, jobs=1)
    failed = cli._in_children(["codes", "deploy", "rounds"], args)
    assert started == ["rounds", "deploy", "codes"]  # 82 s, 80 s, then the unlisted one
    assert failed == ["deploy"]
    out = capsys.readouterr().out
    assert "output of deploy\n[deploy] FAILED (exit status 3)" in out
    assert "output of codes\n[codes] done" in out
