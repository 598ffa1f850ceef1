"""Coded secure aggregation through the real Flower simulation engine (Ray backend).

One simulation with 4 SuperNodes runs several scenarios in a row (Ray starts once); each test
asserts on one scenario's outcome against an exact float FedAvg computed here.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from flwr.app import Array, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAdam, FedAvg

from strategies import CodedSecAgg
from strategies.roster import RosterGrid
from tests.integration import flower_apps as fa

pytestmark = [pytest.mark.integration]

N = 4


def _coded(inner, **kw) -> CodedSecAgg:  # type: ignore[no-untyped-def]
    defaults = {
        "num_silos": N,
        "num_stragglers": 1,
        "privacy_threshold": 1,
        "clip_range": 4.0,
        "max_weight": 100.0,
        "round_timeout": 60.0,
        "key_timeout": 300.0,  # ends when every node answered: Ray actors start slowly under load
        "recovery_timeout": 60.0,
        "node_wait_timeout": 60.0,
        "metric_keys": ("train_loss",),
    }
    defaults.update(kw)
    return CodedSecAgg(inner, **defaults)


def _fedavg() -> FedAvg:
    return FedAvg(fraction_evaluate=0.0, min_available_nodes=N, min_train_nodes=N)


def exact(grid: Grid) -> dict:
    strategy = _coded(_fedavg())
    res = strategy.start(grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=2)
    return {
        "arrays": fa.as_numpy(res.arrays),
        "reports": strategy.reports,
        "train_metrics": dict(res.train_metrics_clientapp),
    }


def dropouts(grid: Grid) -> dict:
    strategy = _coded(_fedavg(), num_stragglers=2, privacy_threshold=1)
    res = strategy.start(
        grid=grid,
        initial_arrays=fa.initial_arrays(),
        num_rounds=1,
        train_config=fa.train_config(**{"test-fail-sites": "0,3"}),
    )
    return {"arrays": fa.as_numpy(res.arrays), "reports": strategy.reports}


def fedadam(grid: Grid) -> dict:
    kw = {
        "eta": 0.05,
        "eta_l": 0.1,
        "tau": 1e-3,
        "fraction_evaluate": 0.0,
        "min_available_nodes": N,
        "min_train_nodes": N,
    }
    strategy = _coded(FedAdam(**kw))
    init = fa.initial_arrays()
    # two rounds: under NumPy 2 FedAdam returns a float64 model from a float32 one; the wrapper
    # keeps the model's dtypes, or round 2's replies would not match the model they were sent
    res = strategy.start(grid=grid, initial_arrays=init, num_rounds=2)
    # the reference: the same FedAdam steps applied to the exact float FedAvg of all partitions
    from flwr.app import ArrayRecord

    ref = FedAdam(**kw)
    current = init
    for r in (1, 2):
        ref.configure_train(
            r, current, ConfigRecord(), RosterGrid(grid, sorted(grid.get_node_ids()))
        )
        state = {k: torch.from_numpy(v) for k, v in fa.as_numpy(current).items()}
        avg = fa.fedavg_reference(state, list(range(N)))
        template = Message(
            RecordDict(), dst_node_id=sorted(grid.get_node_ids())[0], message_type=MessageType.TRAIN
        )
        template.metadata.__dict__["_message_id"] = f"ref{r}"
        reply = Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({k: v.float() for k, v in avg.items()}),  # type: ignore[dict-item]
                    "metrics": MetricRecord({"num-examples": 1}),
                }
            ),
            reply_to=template,
        )
        expected, _ = ref.aggregate_train(r, [reply])
        assert expected is not None
        current = ArrayRecord(
            {k: Array(np.asarray(v.numpy(), dtype=np.float32)) for k, v in expected.items()}
        )
    return {
        "arrays": fa.as_numpy(res.arrays),
        "dtypes": {k: str(v.dtype) for k, v in res.arrays.items()},
        "expected": fa.as_numpy(current),
        "reports": strategy.reports,
    }


def nan_updates(grid: Grid) -> dict:
    strategy = _coded(_fedavg())
    init = fa.initial_arrays()
    res = strategy.start(
        grid=grid,
        initial_arrays=init,
        num_rounds=1,
        train_config=fa.train_config(**{"test-nan-sites": "0,1,2,3"}),
    )
    return {
        "arrays": fa.as_numpy(res.arrays),
        "initial": fa.as_numpy(init),
        "reports": strategy.reports,
    }


def restart(grid: Grid) -> dict:
    strategy = _coded(_fedavg(), masking="shares")
    conf = fa.train_config(**{"test-reset-sites": "2", "test-reset-round": 2})
    res = strategy.start(
        grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=3, train_config=conf
    )
    return {"arrays": fa.as_numpy(res.arrays), "reports": strategy.reports}


def restart_aligned(grid: Grid) -> dict:
    """The default masking (group-aligned with the repetition code): a silo restarted in
    round 3, once the edge keys are dealt, loses them with its state."""
    strategy = _coded(_fedavg())
    conf = fa.train_config(**{"test-reset-sites": "2", "test-reset-round": 3})
    res = strategy.start(
        grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=6, train_config=conf
    )
    return {"arrays": fa.as_numpy(res.arrays), "reports": strategy.reports}


def aligned(grid: Grid) -> dict:
    strategy = _coded(_fedavg(), masking="aligned")
    res = strategy.start(grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=4)
    return {"arrays": fa.as_numpy(res.arrays), "reports": strategy.reports}


#: distributed DP's scenario: noise of 0.01 x clip on the sum (small against the updates, far
#: above the rounding), no straggler (g = 4 groups of one silo >= T + 2)
DP_Z, DP_CLIP = 0.01, 1.0


def private(grid: Grid) -> dict:
    from coded_fl.dp import DistributedDP

    strategy = _coded(
        _fedavg(),
        num_stragglers=0,
        metric_keys=None,
        dp=DistributedDP(noise_multiplier=DP_Z, clip=DP_CLIP),
    )
    init = fa.initial_arrays()
    strategy.start(grid=grid, initial_arrays=init, num_rounds=3)
    models = [fa.as_numpy(init)] + [
        fa.as_numpy(r.arrays) if r.arrays is not None else None for r in strategy.reports
    ]
    plan = strategy._run.config.dp_plan if strategy._run is not None else None
    return {"models": models, "reports": strategy.reports, "noise_std": plan.noise_std}


def mod_without_strategy(grid: Grid) -> list[str]:
    fedavg = _fedavg()
    msgs = fedavg.configure_train(1, fa.initial_arrays(), ConfigRecord(), grid)
    replies = grid.send_and_receive(msgs, timeout=60)
    return [m.error.reason for m in replies if m.has_error()]


def too_few_nodes(grid: Grid) -> None:
    _coded(_fedavg(), num_silos=N + 1, node_wait_timeout=2.0).start(
        grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=1
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, fa.Outcome]:
    from flwr.simulation import run_simulation

    fa.pythonpath_for_workers()
    out = tmp_path_factory.mktemp("flower") / "outcomes.pkl"
    scenarios = {
        "exact": exact,
        "dropouts": dropouts,
        "fedadam": fedadam,
        "nan": nan_updates,
        "mod_without_strategy": mod_without_strategy,
        "too_few_nodes": too_few_nodes,
        "restart": restart,
        "restart_aligned": restart_aligned,
        "aligned": aligned,
        "private": private,
    }
    run_simulation(
        server_app=fa.server_app(scenarios, out),
        client_app=fa.client_app(),
        num_supernodes=N,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": N}},
    )
    assert out.exists(), "the ServerApp did not finish"
    return pickle.loads(out.read_bytes())


def _ok(outcome: fa.Outcome) -> dict:
    assert outcome.error is None, outcome.extra.get("trace", outcome.error)
    return outcome.value  # type: ignore[no-any-return]


def _reference(rounds: int) -> dict[str, np.ndarray]:
    state = {k: torch.from_numpy(v) for k, v in fa.as_numpy(fa.initial_arrays()).items()}
    for _ in range(rounds):
        state = {k: v.float() for k, v in fa.fedavg_reference(state, list(range(N))).items()}
    return {k: v.numpy() for k, v in state.items()}


def test_coded_secure_aggregate_equals_plain_fedavg_within_quantization(outcomes):
    got = _ok(outcomes["exact"])
    ref = _reference(2)
    for name in ref:
        np.testing.assert_allclose(got["arrays"][name], ref[name], atol=2e-5)
    reps = got["reports"]
    assert [r.ok for r in reps] == [True, True]
    assert all(r.replies_used >= N - 1 for r in reps)
    assert got["train_metrics"][1]["train_loss"] > 0


def test_s_silos_that_fail_are_skipped_and_the_sum_is_still_exact(outcomes):
    got = _ok(outcomes["dropouts"])
    rep = got["reports"][0]
    assert rep.ok, rep.reason
    # the round closes at n - s = 2 uploads: both failing silos are stragglers, and the
    # report says why each failed whether its error reply came before the close or after
    # (the run's end waits for lingering replies)
    assert len(rep.stragglers) == 2
    assert set(rep.errors) == set(rep.stragglers)
    assert all("test fault" in e for e in rep.errors.values())
    ref = _reference(1)  # all four partitions, although two silos failed
    for name in ref:
        np.testing.assert_allclose(got["arrays"][name], ref[name], atol=2e-5)


def test_fedadam_as_inner_strategy_gets_the_exact_average(outcomes):
    got = _ok(outcomes["fedadam"])
    assert [r.ok for r in got["reports"]] == [True, True], [r.reason for r in got["reports"]]
    assert set(got["dtypes"].values()) == {"float32"}
    for name in got["expected"]:
        np.testing.assert_allclose(got["arrays"][name], got["expected"][name], atol=1e-4)


def test_nan_updates_abort_the_round_and_leave_the_model_unchanged(outcomes):
    got = _ok(outcomes["nan"])
    rep = got["reports"][0]
    assert not rep.ok
    assert "NaN" in rep.reason and "uploaded" in rep.reason
    for name, v in got["initial"].items():
        np.testing.assert_array_equal(got["arrays"][name], v)


def test_a_mod_without_the_strategy_fails_fast_naming_the_fix(outcomes):
    reasons = _ok(outcomes["mod_without_strategy"])  # type: ignore[arg-type]
    assert len(reasons) == N
    assert all("coded_fl_flower.CodedSecAgg" in r for r in reasons)


def test_fewer_nodes_than_silos_is_a_clear_error(outcomes):
    err = outcomes["too_few_nodes"].error
    assert err is not None and "ConfigurationError" in err and "num_silos" in err


@pytest.mark.slow
def test_a_clientapp_without_the_mod_fails_the_key_exchange_naming_the_mod(tmp_path):
    from flwr.simulation import run_simulation

    fa.pythonpath_for_workers()
    out = tmp_path / "outcomes.pkl"

    # the wait ends when every node has answered (here: with its ClientApp's error), so a
    # generous deadline costs nothing; CI saw 4 Ray actors take over 60 s to start on 2 loaded
    # cores, and a deadline that passes first hides the error this test reads
    def run(grid: Grid) -> None:
        _coded(_fedavg(), key_timeout=300.0).start(
            grid=grid, initial_arrays=fa.initial_arrays(), num_rounds=1
        )

    run_simulation(
        server_app=fa.server_app({"no_mod": run}, out),
        client_app=fa.client_app(with_mod=False),
        num_supernodes=N,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": N}},
    )
    err = pickle.loads(out.read_bytes())["no_mod"].error
    assert err is not None and "ConfigurationError" in err
    assert "coded_secagg_mod" in err


def test_a_restarted_silo_is_rekeyed_and_rejoins(outcomes):
    got = _ok(outcomes["restart"])
    r1, r2, r3 = got["reports"]
    assert r1.ok and r2.ok and r3.ok
    assert r1.rekeyed == () and r2.rekeyed == ()
    # round 2: the restarted silo has no keys: it says so and is skipped as a straggler (its
    # reply may come before or after the round closed at n - s uploads; either way the server
    # reads it); round 3: keys renewed for exactly that silo, and it is back
    assert len(r3.rekeyed) == 1
    [silo] = r3.rekeyed
    assert silo in r2.stragglers
    if silo in r2.errors:
        assert "codedfl-needs-keys" in r2.errors[silo]
    assert all("codedfl-needs-keys" not in e for s, e in r2.errors.items() if s != silo)
    assert silo not in r3.errors
    assert silo not in r3.stragglers or len(r3.stragglers) <= 1
    ref = _reference(3)
    for name in ref:
        np.testing.assert_allclose(got["arrays"][name], ref[name], atol=5e-5)


def test_a_silo_restarted_after_the_edge_keys_were_dealt_gets_them_again_and_rejoins(outcomes):
    got = _ok(outcomes["restart_aligned"])
    reps = got["reports"]
    assert all(r.ok for r in reps), reps
    assert [r.round_trips for r in reps[:3]] == [2, 2, 1]  # round 3: group-masked
    # round 4: the restarted silo has neither keys nor edge keys: it is rekeyed (one more
    # round trip), and while its group's edge key is dealt to its new key it is a straggler
    # that says why; from the round after the relay it uploads again, one round trip each
    rekeyed = [r for r in reps if r.rekeyed]
    assert len(rekeyed) == 1 and rekeyed[0].round == 4, reps
    [silo] = rekeyed[0].rekeyed
    for r in reps[3:5]:
        if silo in r.errors:
            assert "codedfl-needs-keys" in r.errors[silo] or "edge" in r.errors[silo]
    last = reps[-1]
    assert silo not in last.errors and last.round_trips == 1 and last.responders == 0, last
    ref = _reference(6)
    for name in ref:
        np.testing.assert_allclose(got["arrays"][name], ref[name], atol=5e-5)


def test_group_aligned_masks_take_one_round_trip_from_round_3_and_equal_fedavg(outcomes):
    got = _ok(outcomes["aligned"])
    reps = got["reports"]
    assert [r.ok for r in reps] == [True] * 4, [r.reason for r in reps]
    assert [r.round_trips for r in reps] == [2, 2, 1, 1]  # keys dealt in rounds 1 and 2
    assert [r.responders for r in reps][2:] == [0, 0]  # no recovery stage
    ref = _reference(4)
    for name in ref:
        np.testing.assert_allclose(got["arrays"][name], ref[name], atol=4e-5)


def test_distributed_dp_moves_the_model_by_the_clipped_mean_plus_the_planned_noise(outcomes):
    """Each round's model is the previous one plus the unweighted mean of the partitions'
    updates clipped to L2 norm DP_CLIP, plus noise of the plan's spread over K: the noise is
    there (its spread within 25 % of the plan's over 117 coordinates), and nothing else
    moves the model. The edge keys are dealt by two keying rounds before round 1."""
    from coded_fl.dp.transform import clip_l2

    got = _ok(outcomes["private"])
    reps = got["reports"]
    assert [r.ok for r in reps] == [True] * 3, [r.reason for r in reps]
    assert [r.keying_rounds for r in reps] == [2, 0, 0]
    assert [r.round_trips for r in reps][1:] == [1, 1]
    eps = [r.epsilon for r in reps]
    assert 0 < eps[0] < eps[1] < eps[2], eps
    errors = []
    for before, after in zip(got["models"], got["models"][1:], strict=False):
        state = {k: torch.from_numpy(v) for k, v in before.items()}
        flat0 = np.concatenate([before[k].ravel() for k in before]).astype(np.float64)
        deltas = []
        for k in range(N):
            new, _, _ = fa.local_update(state, k)
            flat = np.concatenate([new[name].numpy().ravel() for name in before])
            deltas.append(clip_l2(flat.astype(np.float64) - flat0, DP_CLIP)[0])
        ref = flat0 + np.mean(deltas, axis=0)
        errors.append(np.concatenate([after[k].ravel() for k in before]) - ref)
    err = np.concatenate(errors)
    expected = got["noise_std"] / N
    assert abs(err.std() / expected - 1) < 0.25, (err.std(), expected)
    assert abs(err).max() < 6 * expected
