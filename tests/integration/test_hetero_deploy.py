"""Sites whose CPUs differ, on real SuperNodes (issue 27): every round completes.

The project's own TLS deployment (``scripts/deploy/local.sh``: SuperLink with SuperNode
authentication, 6 registered SuperNodes on this machine's loopback) runs the main app
(``APP=.``) with n = 6, s = 2, T = 1, no stragglers (the replies of a round arrive together, so
the replicas of each silo group are compared) and 3 local epochs. ``NODE_ENV`` gives even sites
``ATEN_CPU_CAPABILITY=default`` (no vector kernels) and odd ones ``avx2``: each site's ClientApp
processes compute with other CPU kernels, so replicas of a partition drift apart with training,
as on sites whose CPUs differ. One process per silo cannot have its own kernels in a simulation
(torch reads the variable once per process); here every SuperNode and its ClientApps are
processes of their own.

Everything asserted comes from what the run returns or writes (the exit status of the script,
which fails when the run failed, and the server app's ``report-file``), not from log lines.
Bounded by RUN_TIMEOUT (the ``flwr run``) and the test's own deadline; whatever the script
started is stopped by its recorded PIDs, also when the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
N, S, T, ROUNDS, EPOCHS = 6, 2, 1, 3, 3
KERNELS = ("default", "avx2")  # site i: KERNELS[i % 2]
DEADLINE = 1100  # seconds for the whole script (RUN_TIMEOUT bounds `flwr run` inside it)


def _run_local_sh(tmp_path: Path, config: str) -> tuple[int, str]:
    env = {
        **os.environ,
        "CODED_FL_PYTHON": sys.executable,
        "NODES": str(N),
        "APP": ".",
        "DEPLOY_DIR": str(tmp_path),
        "RUN_TIMEOUT": "900",
        "NODE_ENV": ";".join(f"ATEN_CPU_CAPABILITY={k}" for k in KERNELS),
    }
    env.pop("ATEN_CPU_CAPABILITY", None)
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts/deploy/local.sh"), "-c", config],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the script's EXIT trap stops what it started
        out, _ = proc.communicate(timeout=120)
    finally:
        # a no-op when the script stopped everything itself: only recorded PIDs are signalled
        subprocess.run(
            ["bash", str(REPO / "scripts/deploy/stop.sh"), str(tmp_path / "state")],
            env={**os.environ, "CODED_FL_PYTHON": sys.executable},
            capture_output=True,
            timeout=180,
            check=False,
        )
    return proc.returncode, out


def test_rounds_complete_when_sites_cpu_kernels_differ(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    config = (
        f"num-silos={N} num-stragglers={S} privacy-threshold={T} num-rounds={ROUNDS} "
        f'local-epochs={EPOCHS} straggler-delays="" dropout-sites="" compare-plain="none" '
        # the clip range round 1 widens to anyway with 3 epochs (saves two reruns of round 1)
        f'clip-range=16.0 report-file="{report}"'
    )
    rc, out = _run_local_sh(tmp_path, config)
    assert rc == 0, out[-4000:]
    rep = json.loads(report.read_text())
    assert rep["done"], rep.get("error")

    # every site's ClientApp computed with the kernels its SuperNode's environment asked for
    sites = {int(s["partition-id"]): s for s in rep["sites"]}
    assert sorted(sites) == list(range(N)), rep["sites"]
    for k, site in sites.items():
        assert site["aten-cpu-capability"] == KERNELS[k % 2]
        assert site["cpu-capability"] == KERNELS[k % 2].upper()

    # every round completed; replica drift was settled by the vote, never taken for a
    # deviating silo (no offender, nobody left out) and erased nowhere beyond the bound
    rows = rep["rounds"]
    assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))
    assert rep["completed"] == ROUNDS, [(r["round"], r["reason"]) for r in rows]
    assert all(r["ok"] for r in rows)
    assert all(r["offenders"] == [] and r["excluded"] == [] for r in rows), rows
    params = int(rep["model_parameters"])
    assert all(r["erased"] <= 0.01 * params for r in rows), rows

    # the vote compared replicas that really differed and settled the drift. Which replicas a
    # round compares: in a group-masked round (one round trip: the default masking from round
    # 3) every survivor with its group's reference; in a round with shared masks (rounds 1-2)
    # only the replies beyond n - s. Asserted where a group-masked round had, in some group,
    # survivors from sites with other kernels (silo i is the i-th node by id, so which sites
    # share a group is drawn by the SuperLink's node ids: all groups mixed in 18 of 20 draws)
    kernel_of_node = {int(s["node"]): s["cpu-capability"] for s in rep["sites"]}
    kernel = [kernel_of_node[int(node)] for node in rep["silo_nodes"]]
    assert rep["groups"], rep["code"]  # the repetition code (the default code)
    for r in rows:
        used = set(range(N)) - set(r["stragglers"]) - set(r["excluded"])
        mixed = any(len({kernel[i] for i in g if i in used}) > 1 for g in rep["groups"])
        if mixed and r["round_trips"] == 1:
            assert r["disagreeing"] > 0, r
    # the model learned (a wrong aggregate would leave it near chance, 10 %)
    assert rep["final_accuracy"] > 0.5, rep["final_accuracy"]

    # everything the script started was stopped by its recorded PID
    assert not list((tmp_path / "state").glob("*.pid"))
