"""Running Flower simulations from the benchmarks: in-process, bounded, offline, measured.

- :func:`run_simulation` runs a ServerApp and a ClientApp with Flower's simulation runtime
  (``flwr.simulation.run_simulation``: deprecated in 1.42 but working; its ``run_config`` is
  empty, so the apps are parameterised with closures).
- Flower's simulation engine runs its message workers in a ``ThreadPoolExecutor()`` with the
  default size, ``min(32, cores + 4)``: 6 on a 2-core machine, so at most 6 ClientApps run at
  once however many Ray actors there are (measured: 12 ClientApps that sleep 2 s take 4.1 s).
  Silos that only sleep must all wait at once, so ``concurrency=`` raises that pool's size
  (a patch of one name in ``flwr.server.superlink.fleet.vce.vce_api``; checked to exist).
- :func:`run_child` runs a benchmark child process in its own session with a time limit and
  stops its whole process group (Ray included) when it ends, fails or overruns.
- :func:`memory` reports the proportional set size (PSS) of this process's descendants: what
  the Ray actors really cost (shared library pages counted once).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "LEAN_RAY_ENV",
    "OFFLINE_ENV",
    "mem_available",
    "memory",
    "offline_environment",
    "run_child",
    "run_simulation",
]

#: Ray's bookkeeping that no simulation here reads (no dashboard, no state API, no metrics):
#: its workers prestarted for the first driver (the simulation starts its own actors, so they
#: idle and exit), the metrics agent's collection, the per-event loop statistics and the task
#: events every worker reports to the GCS. Measured on 2 cores (``simulations.bench rounds
#: --quick``, five simulations of 4 silos): 172 -> 147 CPU seconds, the results unchanged; a
#: simulation whose time is training (one actor) showed no difference.
#: scripts/env.sh exports the same, so Flower's own simulation runtime (``flwr run`` on a
#: ``--simulation`` SuperLink: the main job) gets them too.
LEAN_RAY_ENV = {
    "RAY_prestart_worker_first_driver": "0",
    "RAY_enable_metrics_collection": "0",
    "RAY_event_stats": "0",
    "RAY_task_events_report_interval_ms": "0",
}

#: Offline, quiet Flower/Ray settings (scripts/env.sh has the same).
OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "RAY_DEDUP_LOGS": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    **LEAN_RAY_ENV,
}


def offline_environment() -> None:
    """Set :data:`OFFLINE_ENV` in this process's environment where a variable is not set
    already (a caller's own choice wins): before a simulation starts Ray in this process."""
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)


def _raise_worker_pool(workers: int) -> None:
    from flwr.server.superlink.fleet.vce import vce_api

    if not hasattr(vce_api, "ThreadPoolExecutor"):
        raise RuntimeError(
            "this Flower version's simulation engine has no vce_api.ThreadPoolExecutor: the "
            "worker-pool size cannot be raised (written for flwr 1.41/1.42)"
        )
    vce_api.ThreadPoolExecutor = functools.partial(  # type: ignore[attr-defined,misc]
        concurrent.futures.ThreadPoolExecutor, max_workers=workers
    )


def run_simulation(
    server_app: Any,
    client_app: Any,
    *,
    num_supernodes: int,
    virtual_cpus: int,
    client_cpus: float = 1.0,
    concurrency: int | None = None,
) -> None:
    """Run the apps in this process: Ray sees ``virtual_cpus`` CPUs, so
    ``virtual_cpus / client_cpus`` actors (ClientApp processes) exist; ``concurrency`` raises
    the engine's worker pool so that many ClientApps run at once."""
    offline_environment()
    if concurrency is not None:
        _raise_worker_pool(concurrency)
    from flwr.simulation import run_simulation as _run

    _run(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num_supernodes,
        backend_config={
            "client_resources": {"num_cpus": client_cpus, "num_gpus": 0.0},
            "init_args": {"num_cpus": virtual_cpus, "include_dashboard": False},
        },
    )


def run_child(module: str, args: Sequence[str], *, timeout: float) -> int:
    """``python -m module args...`` in a new session with a private FLWR_HOME, offline;
    its output goes to ours. The whole process group is stopped when it returns, fails or
    runs past ``timeout`` seconds (then TimeoutError)."""
    env = {**os.environ, **OFFLINE_ENV}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="codedfl-flwr-") as home:
        env["FLWR_HOME"] = home
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{module} ran past {timeout:.0f}s and was stopped") from None
        finally:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid  # the leader is gone; its group may live on
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


# ---------------------------------------------------------------------------- memory
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def memory(root: int | None = None) -> dict[str, float]:
    """PSS and RSS (MiB) of the descendants of ``root`` (default: this process), and how many."""
    kids = _children()
    todo, seen = [root or os.getpid()], []
    while todo:
        for c in kids.get(todo.pop(), []):
            seen.append(c)
            todo.append(c)
    pss = rss = 0
    for pid in seen:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:
            continue
    return {"processes": len(seen), "pss_mib": pss / 1024, "rss_mib": rss / 1024}


def mem_available() -> float:
    """MemAvailable of the machine, MiB (inf where /proc/meminfo is missing)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("inf")
