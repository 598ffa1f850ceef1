"""Faults in a real deployment across (emulated) sites: SuperLink with TLS and SuperNode
authentication in its own network namespace, three sites in theirs, each behind a delaying proxy
(``simulations.deploy.testbed``). Every test is bounded by explicit deadlines and the bed is torn
down even when a test fails.

- refusals (unregistered key, no TLS, untrusted CA, an untrusted identity) and the tampered
  share run in the slow set;
- the longer ones (slow site, killed node, restarted node / aborted round) are in
  ``test_deploy_faults_full``, on a bed of their own (``tests.integration.deploy_bed``).

They skip with the reason where network namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from simulations.deploy.certs import make_ca, make_node_key
from simulations.deploy.launcher import DeploymentError
from simulations.deploy.testbed import TestBed
from tests.integration.deploy_bed import (  # noqa: F401 (the fixtures bed, healthy)
    APP,
    RUN_TIMEOUT,
    bed_fixture,
    config,
    healthy_fixture,
    report,
    run_app,
    sites,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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
        cfg = config(healthy, "untrusted", **{"num-rounds": 3})
        t0 = time.monotonic()
        out = healthy.run(APP, cfg, timeout=RUN_TIMEOUT, log_name="untrusted")
        elapsed = time.monotonic() - t0
        rep = report(cfg["report-file"])
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
    cfg = config(
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
    rep = run_app(healthy, cfg)
    assert rep["key_exchanges"] == [[1, [0, 1, 2]]]
    first, second = rep["rounds"]
    # round 1: train, the survivor views (the sites sign their keys: every survivor signs S
    # before a recovery over it), recovery, and one round trip more for the accusation (site 0
    # is asked to reveal the key of the disputed share); a share that does not open never
    # gives a wrong sum
    assert sites(first, "accused") == {"site0"}, first
    assert first["round_trips"] == 4 and not first["ok"], first
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
    assert second["round_trips"] == 3, second  # train, views, recovery
