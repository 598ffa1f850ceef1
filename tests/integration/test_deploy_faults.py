"""Faults in a real deployment across (emulated) sites: SuperLink with TLS and SuperNode
authentication in its own network namespace, three sites in theirs, each behind a delaying proxy
(``simulations.deploy.testbed``). Every test is bounded by explicit deadlines and the bed is torn
down even when a test fails.

- refusals (unregistered key, no TLS, untrusted CA, an untrusted identity) and the tampered
  share run in the slow set;
- the longer ones (slow site, killed node, restarted node / aborted round) need
  ``CODED_FL_DEPLOY_FULL=1`` (about 2 minutes each here; see docs/deploy.md)::

    CODED_FL_DEPLOY_FULL=1 bash scripts/test.sh -m slow tests/integration/test_deploy_faults.py

They skip with the reason where network namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simulations.deploy.certs import make_ca, make_node_key
from simulations.deploy.launcher import DeploymentError
from simulations.deploy.testbed import Site, TestBed, namespaces_available

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "simulations" / "deploy" / "app"
BASE = 0.05  # one-way latency of every site (s): sites on another continent
FULL = os.environ.get("CODED_FL_DEPLOY_FULL") == "1"
full_only = pytest.mark.skipif(
    not FULL, reason="long deployment fault test: set CODED_FL_DEPLOY_FULL=1 (docs/deploy.md)"
)
RUN_TIMEOUT = 480.0  # no run may take longer (the test fails, the bed is torn down)


@pytest.fixture(scope="module")
def bed() -> Iterator[TestBed]:
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(f"multi-site test bed unavailable here: {why}")
    b = TestBed([Site(latency=BASE, jitter=BASE / 4) for _ in range(3)], seed=0)
    try:
        b.up()
        yield b
    finally:
        b.close()


@pytest.fixture
def healthy(bed: TestBed) -> TestBed:
    """Every site's SuperNode running and every link at its base latency."""
    for k in range(len(bed.sites)):
        bed.set_link(k, latency=BASE, jitter=BASE / 4)
        if not bed.dep.alive(f"site{k}"):
            _start_with_retry(bed, k, deadline=150.0)
    return bed


def _start_with_retry(bed: TestBed, k: int, *, deadline: float) -> None:
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


def _config(bed: TestBed, name: str, **kw: Any) -> dict[str, Any]:
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


def _report(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"rounds": []}


def _run(
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
            done = len(_report(cfg["report-file"])["rounds"])
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
    rep = _report(cfg["report-file"])
    assert rep.get("done"), f"the run did not finish: {rep}"
    return rep


def _sites(row: dict[str, Any], key: str) -> set[str]:
    return set(row[f"{key}_sites"])


# ---------------------------------------------------------------------------- refusals
def test_unregistered_node_is_refused(bed: TestBed) -> None:
    before = {n["node-id"] for n in bed.nodes()}
    # a key the SuperLink never saw (made now, not registered), then no key at all
    bed.start_node(0, name="rogue", wait=False)
    assert bed.dep.wait_exit("rogue", timeout=90) not in (None, 0)
    log = Path(bed.dep.procs["rogue"].log).read_text()
    assert "Failed to activate SuperNode" in log and "SuperNode ID" not in log
    bed.start_node(0, name="keyless", key=False, wait=False)
    assert bed.dep.wait_exit("keyless", timeout=90) not in (None, 0)
    assert "SuperNode ID" not in Path(bed.dep.procs["keyless"].log).read_text()
    assert {n["node-id"] for n in bed.nodes()} == before


def test_node_without_tls_is_refused(bed: TestBed) -> None:
    before = {n["node-id"] for n in bed.nodes()}
    # plain HTTP to the TLS SuperLink: every attempt fails; bounded by --max-wait-time
    bed.start_node(
        1, name="plain", tls=False, key=False, wait=False, extra=["--max-wait-time", "20"]
    )
    code = bed.dep.wait_exit("plain", timeout=90)
    bed.dep.stop("plain", grace=5)
    log = Path(bed.dep.procs["plain"].log).read_text()
    assert "SuperNode ID" not in log and "Connection attempt failed" in log, log[-2000:]
    assert code != 0
    # TLS, but trusting another CA: the node refuses the SuperLink's certificate
    make_ca(bed.run_dir / "other-ca")
    bed.start_node(
        1, name="wrongca", root_certificates=str(bed.run_dir / "other-ca" / "ca.pem"), wait=False
    )
    assert bed.dep.wait_exit("wrongca", timeout=90) not in (None, 0)
    assert "CERTIFICATE_VERIFY_FAILED" in Path(bed.dep.procs["wrongca"].log).read_text()
    assert {n["node-id"] for n in bed.nodes()} == before


def test_a_site_with_an_untrusted_identity_stops_the_run_naming_the_setting(
    healthy: TestBed,
) -> None:
    # site 1 connects with its registered auth key but signs its key-agreement key with an
    # identity no other site trusts: both others refuse its roster entry (UNTRUSTED_KEY), so
    # no round can complete and the run stops after round 1, failed, naming the setting
    make_node_key(healthy.run_dir, "stranger")
    healthy.dep.stop("site1", grace=10)
    try:
        end = time.monotonic() + 150
        while True:
            try:
                healthy.start_node(
                    1,
                    node_config={"codedfl.identity-key": str(healthy.run_dir / "stranger")},
                    timeout=60,
                )
                break
            except DeploymentError:
                if time.monotonic() > end:
                    raise
                time.sleep(5)
        cfg = _config(healthy, "untrusted", **{"num-rounds": 3})
        t0 = time.monotonic()
        out = healthy.run(APP, cfg, timeout=RUN_TIMEOUT, log_name="untrusted")
        elapsed = time.monotonic() - t0
        rep = _report(cfg["report-file"])
        assert not rep.get("done"), rep
        assert len(rep["rounds"]) <= 1, rep["rounds"]
        assert "codedfl.trusted-keys" in out and "untrusted-key" in out, out[-3000:]
        assert elapsed < 240, elapsed  # one round, not three timeouts
        res = healthy.flwr(["ls", healthy.dep.connection, "--format", "json"])
        runs = sorted(
            json.loads(res.stdout[res.stdout.index("{") :])["runs"], key=lambda r: int(r["run-id"])
        )
        assert "completed" not in str(runs[-1].get("status")), runs[-1]  # scripts exit non-zero
    finally:
        healthy.dep.stop("site1", grace=10)  # the next test's fixture restarts it as it was


# ---------------------------------------------------------------------------- tampering
def test_tampered_share_is_refused_and_its_sender_named(healthy: TestBed) -> None:
    # site 0 alters every share it uploads before it signs the entry (a lying silo: the
    # signatures verify, so the server relays the shares); site 2 is slow (15x compute), so the
    # survivors of round 1 are sites 0 and 1: site 1 cannot open site 0's share and accuses it;
    # the evidence (site 0's revealed key: the share still does not open) names site 0, and
    # round 2 completes without it, from sites 1 and 2 (site 2's round-2 work queues behind its
    # slow round 1: a longer round timeout)
    cfg = _config(
        healthy,
        "tamper",
        **{
            "masking": "shares",  # the shares are what site 0 tampers with
            "num-rounds": 2,
            "tamper-site": 0,
            "tamper-mode": "signed",
            "slow-sites": "2",
            "train-seconds": 1.0,
            "slow-factor": 15.0,
            "round-timeout": 180.0,
        },
    )
    rep = _run(healthy, cfg)
    assert rep["key_exchanges"] == [[1, [0, 1, 2]]]
    first, second = rep["rounds"]
    # round 1: an accusation costs one round trip more (site 0 is asked to reveal the key of
    # the disputed share); a share that does not open never gives a wrong sum
    assert _sites(first, "accused") == {"site0"}, first
    assert first["round_trips"] == 3 and not first["ok"], first
    (accused,) = first["accused"].values()
    assert "judged on the evidence" in accused and "lied" in accused
    assert first["offender_sites"] == ["site0"], first
    # which check refuses the share depends on how the sites map to silo indices (node ids
    # are random): a share silo 1 derives from silo 0's keys fails key confirmation (its tag
    # was altered), a sealed one fails authentication
    refusals = ("failed authentication", "fails key confirmation")
    assert any(w in e for e in first["errors"].values() for w in refusals), first
    # round 2: site 0 is left out; the other two complete it, with no accusation
    assert second["ok"], second
    assert "site0" in second["excluded_sites"] and not second["accused_sites"], second
    assert second["round_trips"] == 2, second


# ---------------------------------------------------------------------------- slow site
@full_only
def test_slow_site_is_not_waited_for(healthy: TestBed) -> None:
    # site 2 is a slow site as the deploy benchmark defines one: a link at 10x the others'
    # latency and 15x their compute (1 s of training vs 15 s). Latency alone does not order the
    # sites reliably here: a SuperNode picks a message up at its next poll (every 3 s while
    # idle) and a ClientApp process's start-up on a loaded 2-core machine varies by seconds, so
    # at 10x and even 40x latency (2 s one-way) CI saw rounds where site 2 came in with the
    # second upload. The 14 s of extra compute makes "not waited for" observable every round.
    healthy.set_link(2, latency=10 * BASE, jitter=10 * BASE / 4)
    cfg = _config(
        healthy,
        "latency",
        **{"num-rounds": 3, "slow-sites": "2", "train-seconds": 1.0, "slow-factor": 15.0},
    )
    rep = _run(healthy, cfg)
    assert rep["key_exchanges"] == [[1, [0, 1, 2]]]  # keys once per run
    for row in rep["rounds"]:
        assert row["ok"], row
        # the default masking with n = 3, s = 1: the repetition code's one group needs no
        # mask graph, so every round is group-masked from round 1: one round trip
        assert row["round_trips"] == 1
        if row["round"] == 1:
            # round 1 starts every site's first ClientApp process (imports, kernel cache), whose
            # time on a loaded machine varies most: the slow site may come in with the second
            # upload, but no other site is ever left out
            assert _sites(row, "straggler") <= {"site2"}, row
        else:
            assert _sites(row, "straggler") == {"site2"}, row
    late = {int(r): t for r, t in rep.get("late_uploads", {}).items()}
    for row in rep["rounds"]:
        if row["round"] in late:  # the slow site's upload came after the round had closed
            assert min(late[row["round"]]) > row["close_seconds"]


# ---------------------------------------------------------------------------- crashes
@full_only
def test_supernode_killed_mid_round(healthy: TestBed) -> None:
    def crash_site0() -> None:
        time.sleep(1.0)  # round 2's train requests are out
        healthy.dep.kill("site0")  # SIGKILL: SuperNode, SuperExec and a running ClientApp

    rep = _run(healthy, _config(healthy, "kill"), actions={1: crash_site0})
    rounds = rep["rounds"]
    assert [r["ok"] for r in rounds] == [True, True, True], rounds
    for row in rounds[1:]:  # completed from the other two, without waiting for site 0
        assert "site0" in _sites(row, "straggler"), row
    assert rep["key_exchanges"] == [[1, [0, 1, 2]]]


@full_only
def test_restarted_supernodes_rejoin_with_new_keys_after_an_aborted_round(
    healthy: TestBed,
) -> None:
    def restart_sites_0_and_1() -> None:
        # round 2 starts now; both SuperNodes are stopped and started again (new processes,
        # the same registered keys: the same node ids, but their ClientApp state is gone)
        stops = [
            threading.Thread(target=healthy.dep.stop, args=(f"site{k}",), kwargs={"grace": 10})
            for k in (0, 1)
        ]
        for t in stops:
            t.start()
        for t in stops:
            t.join(timeout=30)
        for k in (0, 1):
            healthy.start_node(k, timeout=60)

    cfg = _config(healthy, "restart", **{"num-rounds": 4, "round-timeout": 45.0})
    rep = _run(healthy, cfg, actions={1: restart_sites_0_and_1})
    rounds = rep["rounds"]
    silos = {v: int(k) for k, v in rep["silos"].items()}
    assert rounds[0]["ok"]
    # where the restart lands decides round 2, and both are the designed behaviour: mid-round,
    # round 2 has only site 2's upload (the others lost their keys or were down) and is aborted,
    # model unchanged, and a later round rekeys them; with both sites back before round 2 asks
    # them (a CI run on a fast set-up), they refuse with NEEDS_KEYS and round 2 rekeys them and
    # completes. Never does a round complete without the rekey of the restarted sites.
    second = rounds[1]
    if second["ok"]:
        assert set(second["rekeyed_sites"]) == {"site0", "site1"}, second
    else:
        assert second["reason"], second
    rekeyed = [r for r in rounds if r["rekeyed"]]
    assert rekeyed and set(rekeyed[0]["rekeyed_sites"]) <= {"site0", "site1"}, rounds
    assert all(r["ok"] for r in rounds if r["round"] >= rekeyed[-1]["round"]), (
        rounds
    )  # the rounds after the rekey complete
    first = rekeyed[0]["round"]
    assert rekeyed[0]["round_trips"] == 2  # the rekey + train (group-masked: no recovery)
    assert rep["key_exchanges"][0] == [1, [0, 1, 2]]
    for before, asked in rep["key_exchanges"][1:]:
        assert before >= first and set(asked) <= {silos["site0"], silos["site1"]}
    all_rekeyed = {s for r in rekeyed for s in r["rekeyed_sites"]}
    assert all_rekeyed == {"site0", "site1"}, rounds
