"""Shared helpers of the benchmarks: timing, machine description, output."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulations.deploy import forkserver


def machine() -> dict[str, Any]:
    """What produced the figures: CPU, cores, GPU, library versions, date."""
    import numba
    import numpy
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        # deployments' ClientApps forked from a warm process (CI only): not a user's start-up
        "clientapp_forkserver": forkserver.enabled(),
    }
    try:
        import flwr

        info["flwr"] = flwr.__version__
    except ImportError:  # pragma: no cover
        pass
    return info


def median_time(
    fn: Callable[[], object],
    *,
    repeats: int = 7,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
) -> tuple[float, list[float]]:
    """Median wall time of ``fn`` over ``repeats`` runs after ``warmup`` runs (seconds)."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


@dataclass
class Report:
    """Rows of figures plus goals, printed as a table and written as JSON."""

    name: str
    quick: bool
    config: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    goals: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Where the JSON will go (benchmarks may put companion files, e.g. a plot, beside it).
    out: str | None = None

    def add(self, **row: Any) -> dict[str, Any]:
        self.rows.append(row)
        shown = "  ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in row.items()
            if not isinstance(v, (list, dict))
        )
        print(f"[{self.name}] {shown}", flush=True)
        return row

    def goal(
        self,
        text: str,
        measured: float,
        target: float,
        *,
        lower_is_better: bool = True,
        applies: bool = True,
    ) -> None:
        met = measured <= target if lower_is_better else measured >= target
        self.goals.append(
            {
                "goal": text,
                "measured": measured,
                "target": target,
                "met": bool(met),
                "direction": "<=" if lower_is_better else ">=",
                "at_full_size": applies,
            }
        )
        tag = "MET" if met else "NOT MET"
        size = "" if applies else " (quick run: not the goal's size)"
        print(
            f"[{self.name}] goal: {text}: measured {measured:.4g} vs {target:.4g} -> {tag}{size}",
            flush=True,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.name,
            "quick": self.quick,
            "machine": machine(),
            "config": self.config,
            "results": self.rows,
            "goals": self.goals,
            "notes": self.notes,
        }

    def write(self, path: str | os.PathLike[str] | None) -> None:
        if path is None:
            return
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        print(f"[{self.name}] wrote {p}", flush=True)
