"""The report generator on fixture JSON files, and the Flower straggler rows' arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from simulations.bench.stragglers import flower_rows, s_grid
from simulations.report.document import load, main, summary_rows, write_report

MACHINE = {
    "date": "2026-01-01T00:00:00+00:00",
    "cpu": "Test CPU",
    "cores": 2,
    "python": "3.11",
    "torch": "2.13",
    "numpy": "2.4",
    "flwr": "1.41.0",
    "gpu": None,
}


def _bench(name: str, results: list[dict], goals: list[dict], **extra: object) -> dict:
    return {
        "benchmark": name,
        "quick": False,
        "machine": MACHINE,
        "config": {},
        "results": results,
        "goals": goals,
        "notes": ["a note"],
        **extra,
    }


def _fixtures(tmp: Path) -> Path:
    bench = tmp / "bench"
    bench.mkdir()
    des = [
        {
            "kind": "des",
            "model": m,
            "n": n,
            "s": s,
            "d": 10**6,
            "mean_silo_seconds": 10.0,
            "rounds": 10,
            "theory_speedup": 2.0 + s / n,
            "measured_speedup": 1.9 + s / n,
            "relative_error": -0.05,
            "plain_seconds": 30.0,
            "coded_seconds": 15.0,
            "fixed_costs_coded": 0.3,
        }
        for m in ("iid", "heavy")
        for n in (10, 20)
        for s in (1, 2, 5)
    ]
    flower = [
        {
            "kind": "flower",
            "model": m,
            "n": 10,
            "s": s,
            "rounds": 5,
            "theory_speedup": 2.0,
            "sample_speedup": 1.9,
            "straggler_speedup": 1.8,
            "relative_error": -0.1,
            "raw_speedup": 1.5,
            "theory_with_fixed_costs": 1.6,
            "fixed_plain": 0.1,
            "fixed_coded": 0.3,
            "close_after_draw": 0.2,
            "waiting_would_add": 2.0,
            "corrected_speedup": 1.9,
        }
        for m in ("iid", "heavy")
        for s in (1, 2)
    ]
    run = {
        "kind": "flower_run",
        "nodes": 10,
        "schedule": {"calib": 1, "iid": 2, "heavy": 1},
        "d": 1000,
        "warmup_seconds": 30.0,
        "seconds": 100.0,
        "memory_after_warmup": {"processes": 12, "pss_mib": 2048.0, "rss_mib": 4096.0},
    }
    strag = _bench(
        "stragglers",
        [*des, *flower, run],
        [
            {
                "goal": "speedup |x| within 10 %",
                "measured": 0.05,
                "target": 0.1,
                "met": True,
                "at_full_size": True,
            }
        ],
    )
    acc_rows = [
        {
            "kind": "accuracy",
            "setting": f"iid/fedavg/drop{k}",
            "silos": 10,
            "s": 2,
            "rounds": 3,
            "final_ours": 0.9,
            "final_plain": 0.89,
            "difference_pp": 1.0,
            "ours_accuracy": [0.5, 0.8, 0.9],
            "plain_accuracy": [0.5, 0.79, 0.89],
            "initial_accuracy": 0.1,
            "ours_seconds_per_round": 2.0,
            "plain_seconds_per_round": 1.0,
            "round1_max_abs_diff": 1e-6,
            "round1_bound": 2e-6,
        }
        for k in (0, 2)
    ]
    quant = [
        {
            "kind": "quantization",
            "scale": 2.0**k,
            "log2_scale": k,
            "default_scale": k == 8,
            "n": 10,
            "s": 2,
            "K": 10,
            "d": 100,
            "max_abs_error_sum": 5 / 2**k,
            "bound_sum": 10 / 2**k,
            "rms_error_sum": 1 / 2**k,
            "rms_expected_sum": 1.29 / 2**k,
            "max_abs_error_average": 0.5 / 2**k,
            "bound_average": 1 / 2**k,
        }
        for k in (4, 8, 12)
    ]
    acc = _bench(
        "accuracy",
        [*acc_rows, *quant],
        [
            {
                "goal": "accuracy within 0.5 pp",
                "measured": 1.0,
                "target": 0.5,
                "met": False,
                "at_full_size": True,
            }
        ],
    )
    rounds = _bench(
        "rounds",
        [
            {"n": n, "d": 10**6, "variant": v, "seconds_per_round": t * n}
            for n in (10, 20)
            for v, t in (("plain", 0.05), ("ours", 0.1))
        ],
        [
            {
                "goal": "ratio >= 4x",
                "measured": 5.0,
                "target": 4.0,
                "met": True,
                "at_full_size": True,
            }
        ],
    )
    for name, data in (("stragglers", strag), ("accuracy", acc), ("rounds", rounds)):
        (bench / f"{name}.json").write_text(json.dumps(data))
    (bench / "not-a-benchmark.json").write_text("[1, 2]")
    return bench


def test_report_from_fixtures(tmp_path: Path) -> None:
    bench = _fixtures(tmp_path)
    assert set(load(bench)) == {"stragglers", "accuracy", "rounds"}
    out = write_report(bench, tmp_path / "doc" / "report.md")
    text = out.read_text()
    assert "| stragglers | speedup \\|x\\| within 10 % | 0.05 | <= 0.1 | MET |" in text
    assert "**NOT MET**" in text  # the accuracy goal
    assert "| rounds | ratio >= 4x | 5 | >= 4 | MET |" in text
    assert "| kernels | not measured (no JSON) |" in text
    assert "Test CPU, 2 cores" in text  # provenance under the figures
    figs = {p.name for p in (tmp_path / "doc" / "report").glob("*.png")}
    assert {"stragglers_speedup.png", "round_time.png", "accuracy.png", "quantization.png"} <= figs
    assert "kernels.png" not in figs and "shuffling.png" not in figs  # nothing to draw


def test_summary_marks_quick_runs(tmp_path: Path) -> None:
    b = _bench(
        "codes",
        [],
        [{"goal": "g", "measured": 1.0, "target": 2.0, "met": True, "at_full_size": False}],
        quick=True,
    )
    rows = summary_rows({"codes": b})
    assert any("quick run" in str(r[4]) for r in rows if r[0] == "codes")


def test_cli_reads_without_running(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["--bench-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "| stragglers | not measured (no JSON) |" in text


def test_flower_rows_arithmetic() -> None:
    rounds_plain = [
        {"round": r, "phase": p, "seconds": t, "wait_all": w}
        for r, p, t, w in (
            (1, "calib", 0.5, 0),
            (2, "calib", 0.2, 0),
            (3, "iid", 3.2, 3.0),
            (4, "iid", 2.2, 2.0),
        )
    ]
    rounds_coded = [
        {
            "round": r,
            "phase": p,
            "seconds": t,
            "close_seconds": t - 0.1,
            "ok": True,
            "wait_all": w,
            "wait_coded": c,
        }
        for r, p, t, w, c in (
            (1, "calib", 0.9, 0, 0),
            (2, "calib", 0.4, 0, 0),
            (3, "iid", 1.4, 3.0, 1.0),
            (4, "iid", 1.4, 2.0, 1.0),
        )
    ]
    raw = {
        "mu": 1.0,
        "seed": 0,
        "runs": [
            {"n": 10, "scheme": "plain", "s": 0, "rounds": rounds_plain},
            {"n": 10, "scheme": "coded", "s": 2, "rounds": rounds_coded},
        ],
    }
    (row,) = flower_rows(raw)
    assert row["fixed_plain"] == 0.2 and row["fixed_coded"] == 0.4  # the first calib is skipped
    assert row["raw_speedup"] == pytest.approx(2.7 / 1.4)
    assert row["straggler_speedup"] == pytest.approx((2.7 - 0.2) / (1.4 - 0.4))
    assert row["sample_speedup"] == pytest.approx(2.5 / 1.0)
    assert row["theory_speedup"] == pytest.approx(2.928968 / (2.928968 - 1.5), rel=1e-6)
    assert row["corrected_speedup"] == pytest.approx(
        row["straggler_speedup"] * row["theory_speedup"] / row["sample_speedup"]
    )
    assert row["relative_error"] == pytest.approx(
        row["corrected_speedup"] / row["theory_speedup"] - 1
    )
    assert row["close_after_draw"] == pytest.approx(0.3) and row["waiting_would_add"] == 1.5


def test_s_grid() -> None:
    assert s_grid(10) == [1, 2, 5]
    assert s_grid(100) == [1, 5, 10, 20, 50]
    assert all(s < 1000 for s in s_grid(1000))
