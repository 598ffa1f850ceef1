"""The multi-site test bed of the deployment fault tests (``test_deploy_faults`` and
``test_deploy_faults_full``): its fixtures and the run helper. Each of the two modules that import
the fixtures gets its own bed (module scope), so the two run on two workers at once (as one
module they were CI's critical path: 672 s on one worker)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simulations.deploy.launcher import DeploymentError
from simulations.deploy.testbed import Site, TestBed, namespaces_available

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "simulations" / "deploy" / "app"
BASE = 0.05  # one-way latency of every site (s): sites on another continent
FULL = os.environ.get("CODED_FL_DEPLOY_FULL") == "1"
full_only = pytest.mark.skipif(
    not FULL, reason="long deployment fault test: set CODED_FL_DEPLOY_FULL=1 (docs/deploy.md)"
)
RUN_TIMEOUT = 480.0  # no run may take longer (the test fails, the bed is torn down)


# (named fixtures: a module imports bed_fixture and healthy_fixture and asks for bed / healthy)
@pytest.fixture(scope="module", name="bed")
def bed_fixture() -> Iterator[TestBed]:
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(f"multi-site test bed unavailable here: {why}")
    b = TestBed([Site(latency=BASE, jitter=BASE / 4) for _ in range(3)], seed=0)
    try:
        b.up()
        yield b
    finally:
        b.close()


@pytest.fixture(name="healthy")
def healthy_fixture(bed: TestBed) -> TestBed:
    """Every site's SuperNode running and every link at its base latency."""
    for k in range(len(bed.sites)):
        bed.set_link(k, latency=BASE, jitter=BASE / 4)
        if not bed.dep.alive(f"site{k}"):
            start_with_retry(bed, k, deadline=150.0)
    return bed


def start_with_retry(bed: TestBed, k: int, *, deadline: float) -> None:
    """Start site k's SuperNode; after a crash the SuperLink refuses to reactivate its key until
    the heartbeat expires (2 x 30 s), so retry until ``deadline`` seconds have passed."""
    end = time.monotonic() + deadline
    while True:
        try:
            bed.start_node(k, timeout=60)
            return
        except DeploymentError:
            if time.monotonic() > end:
                raise
            time.sleep(5)


def config(bed: TestBed, name: str, **kw: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "mode": "coded",
        "num-silos": 3,
        "num-rounds": 3,
        "dim": 20000,
        "num-stragglers": 1,
        "privacy-threshold": 1,
        "round-timeout": 60.0,
        "recovery-timeout": 45.0,
        "key-timeout": 60.0,
        "node-wait-timeout": 60.0,
        "report-file": str(bed.run_dir / f"{name}.json"),
    }
    cfg.update(kw)
    Path(cfg["report-file"]).unlink(missing_ok=True)
    return cfg


def report(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"rounds": []}


def run_app(
    bed: TestBed,
    cfg: dict[str, Any],
    actions: dict[int, Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """Run the app; ``actions[r]`` is called (in a watcher thread) as soon as round r ended,
    i.e. while round r + 1 starts. Returns the report; re-raises an action's failure."""
    actions = dict(actions or {})
    failures: list[BaseException] = []
    stop = threading.Event()

    def watch() -> None:
        while actions and not stop.is_set():
            done = len(report(cfg["report-file"])["rounds"])
            for r in sorted(a for a in actions if a <= done):
                try:
                    actions.pop(r)()
                except BaseException as exc:  # reported to the test below
                    failures.append(exc)
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        bed.run(APP, cfg, timeout=RUN_TIMEOUT, log_name=Path(cfg["report-file"]).stem)
    finally:
        stop.set()
        watcher.join(timeout=180)
    if failures:
        raise failures[0]
    rep = report(cfg["report-file"])
    assert rep.get("done"), f"the run did not finish: {rep}"
    return rep


def sites(row: dict[str, Any], key: str) -> set[str]:
    return set(row[f"{key}_sites"])
