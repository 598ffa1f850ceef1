"""A silo's own privacy budget (issue 33, the deviating server): the ledger of the noised releases
its data was in, kept across runs and sessions, and the refusal past the budget.

The threat: a server that asks for more noised rounds than it says (or starts a new session
to reset any per-session count) averages the noise away. The silo counts for itself, at its own
delta, and refuses the round that would exceed its budget.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.serverapp.strategy import FedAvg

from coded_fl.dp import DistributedDP, PrivacyBudgetError, PrivacyLedger
from coded_fl.dp.accounting import ORDERS, skellam_rdp
from coded_fl.errors import ConfigurationError
from coded_fl.layout import UpdateLayout
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.policy import ClientPolicy
from simulations.bench.adversary import _quiet_flower
from simulations.runtime.inprocess_grid import InProcessGrid, task_identity
from strategies import CodedSecAgg
from tests.integration import flower_apps as fa

DP = DistributedDP(noise_multiplier=1.0, clip=1.0)
N = 6


def _plan():  # type: ignore[no-untyped-def]
    d = UpdateLayout(model_size=fa.D_OUT * fa.D_IN + fa.D_OUT).length
    cfg = ProtocolConfig(
        num_silos=N, num_stragglers=1, privacy_threshold=1, vector_length=d, dp=DP, masking="auto"
    )
    return cfg.dp_plan


def test_the_ledger_composes_releases_and_keeps_them_across_instances(tmp_path):
    plan = _plan()
    path = tmp_path / "site" / "ledger.json"
    one = PrivacyLedger(path).charge(plan, delta=1e-5, budget=None)
    two = PrivacyLedger(path).charge(plan, delta=1e-5, budget=None)  # a new run, a new object
    assert PrivacyLedger(path).releases == 2
    assert one == pytest.approx(plan.epsilon_round, rel=1e-9)
    # two releases compose by adding RDP (the oracle: dp-accounting on the doubled curve)
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    rdp = 2 * skellam_rdp(ORDERS, l2=plan.l2, l1=plan.l1, mu=plan.mu)
    assert two == pytest.approx(compute_epsilon(ORDERS, rdp, 1e-5)[0], rel=1e-9)
    assert PrivacyLedger(path).epsilon(1e-5) == pytest.approx(two, rel=1e-9)
    raw = json.loads(path.read_text())
    assert set(raw) == {"orders", "rdp", "releases"}  # public numbers only


def test_a_release_past_the_budget_is_refused_and_not_charged(tmp_path):
    plan = _plan()
    ledger = PrivacyLedger(tmp_path / "ledger.json")
    first = ledger.charge(plan, delta=1e-5, budget=None)
    with pytest.raises(PrivacyBudgetError, match=r"max_epsilon=.*would be exceeded"):
        ledger.charge(plan, delta=1e-5, budget=first * 1.2)
    assert ledger.releases == 1
    # the budget is at the silo's delta: a larger delta gives a smaller epsilon, never the
    # server's choice
    assert ledger.epsilon(1e-3) < ledger.epsilon(1e-5)


@pytest.mark.parametrize("content", ["{", '{"orders": [2.0], "rdp": [1.0], "releases": 1}', "[]"])
def test_an_unreadable_ledger_is_never_read_as_nothing_spent(tmp_path, content):
    path = tmp_path / "ledger.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match="cannot be read"):
        PrivacyLedger(path).charge(_plan(), delta=1e-5, budget=100.0)


def test_the_node_config_tightens_the_budget_never_loosens_it():
    assert ClientPolicy().tightened({"codedfl.max-epsilon": "4"}).max_epsilon == 4.0
    tight = ClientPolicy(max_epsilon=2.0)
    assert tight.tightened({"codedfl.max-epsilon": 8}).max_epsilon == 2.0
    for bad in ({"max_epsilon": 0.0}, {"max_epsilon": float("inf")}, {"budget_delta": 1.0}):
        with pytest.raises(ConfigurationError):
            ClientPolicy(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max-epsilon"):
        ClientPolicy().tightened({"codedfl.max-epsilon": 0})


def _run(grid: InProcessGrid, rounds: int) -> CodedSecAgg:
    strategy = CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=N, min_train_nodes=N),
        num_silos=N,
        num_stragglers=1,
        privacy_threshold=1,
        dp=DP,
        max_aborted_rounds=0,
        round_timeout=10.0,
        key_timeout=10.0,
        node_wait_timeout=5.0,
        poll_interval=0.001,
    )
    with task_identity(grid.run.run_id), _quiet_flower():
        strategy.start(grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=rounds)
    return strategy


def test_silos_stop_a_run_at_their_budget_and_a_new_run_cannot_reset_it(tmp_path):
    """Each site's budget admits two noised rounds: the third is refused by every silo (the
    run stops, naming the budget), and a second run on the same sites (a new session, new
    keys) is refused at its first noised round: the ledger outlives both."""
    plan = _plan()
    probe = PrivacyLedger(tmp_path / "probe.json")
    two = [probe.charge(plan, delta=1e-5, budget=None) for _ in range(3)][1:]
    budget = (two[0] + two[1]) / 2  # between two and three releases
    sites = [tmp_path / f"site{i}" for i in range(N)]
    grid = InProcessGrid(
        [fa.client_app()] * N,
        node_configs=[
            {
                "partition-id": i,
                "num-partitions": N,
                "codedfl.state-dir": str(sites[i]),
                "codedfl.max-epsilon": budget,
            }
            for i in range(N)
        ],
    )
    with pytest.raises(ConfigurationError, match="privacy budget max_epsilon"):
        _run(grid, rounds=4)
    for site in sites:
        assert PrivacyLedger(site / "dp-ledger.json").releases == 2
    with pytest.raises(ConfigurationError, match="privacy budget max_epsilon"):
        _run(grid, rounds=1)
    for site in sites:
        ledger = PrivacyLedger(site / "dp-ledger.json")
        assert ledger.releases == 2 and ledger.epsilon(1e-5) <= budget
    assert np.isfinite(budget)
