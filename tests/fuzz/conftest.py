"""Reports what the fuzz tests saw (see ``tests/fuzz/__init__.py``)."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from tests.fuzz import LONG
from tests.fuzz.tally import COUNTS, WORST

_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "tests/fuzz/" in report.nodeid:
        _DURATIONS[report.nodeid] = report.duration


def _summary() -> dict:
    per: dict[str, dict] = defaultdict(lambda: {"mutants": 0, "outcomes": {}, "accepted": {}})
    for (end, kind, outcome, what), n in sorted(COUNTS.items()):
        entry = per[f"{end}/{kind}"]
        entry["mutants"] += n
        entry["outcomes"][outcome] = entry["outcomes"].get(outcome, 0) + n
        if outcome.startswith("round"):  # rounds: the faults of each outcome
            what = f"{outcome[6:]}: {what}"
        if outcome.startswith(("accepted", "round")):
            entry["accepted"][what] = entry["accepted"].get(what, 0) + n
    for (end, kind), (dec, handle, peak) in WORST.items():
        per[f"{end}/{kind}"]["worst"] = {
            "decode_ms": round(dec * 1e3, 3),
            "handle_ms": round(handle * 1e3, 3),
            "peak_kib": round(peak / 1024, 1),
        }
    return {"per_type": dict(per), "seconds": {k: round(v, 1) for k, v in _DURATIONS.items()}}


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if not COUNTS or not (LONG or os.environ.get("CODEDFL_FUZZ_REPORT")):
        return
    summary = _summary()
    tr = terminalreporter
    tr.section("coded-fl fuzz")
    for key, entry in sorted(summary["per_type"].items()):
        tr.write_line(
            f"{key}: {entry['mutants']} mutants {entry['outcomes']} {entry.get('worst', '')}"
        )
        for what, n in sorted(entry["accepted"].items(), key=lambda kv: -kv[1]):
            tr.write_line(f"    {n:6d}  {what or '-'}")
    for test, seconds in sorted(summary["seconds"].items()):
        tr.write_line(f"{seconds:8.1f} s  {test}")
    path = os.environ.get("CODEDFL_FUZZ_REPORT")
    if path:
        with open(path, "w") as fh:
            json.dump(summary, fh, indent=1, sort_keys=True)
