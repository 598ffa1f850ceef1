"""Straggler model, discrete-event simulation and cost model against theory (small n, fast)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulations.stragglers.costs import fit_costs, mask_degree, measure_step_costs
from simulations.stragglers.des import Network, StepSeconds, _fifo, simulate
from simulations.stragglers.model import SiloTimes, _integrate_order_statistic, harmonic


def test_harmonic() -> None:
    assert harmonic(0) == 0.0
    assert harmonic(1) == 1.0
    assert harmonic(4) == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4)
    with pytest.raises(ValueError):
        harmonic(-1)


@pytest.mark.parametrize("n", [1, 5, 20, 100])
def test_iid_order_statistics_closed_form_and_integral_agree(n: int) -> None:
    m = SiloTimes.iid(n, mu=2.0)
    for k in sorted({1, max(1, n // 2), n}):
        closed = (harmonic(n) - harmonic(n - k)) / 2.0
        assert m.expected_order_statistic(k) == pytest.approx(closed, rel=1e-12)
        assert _integrate_order_statistic(m.rates(), k, fast_rate=2.0) == pytest.approx(
            closed, rel=1e-4
        )
    assert m.expected_wait_all() == pytest.approx(harmonic(n) / 2.0)


def test_seed_003_example() -> None:
    """Seed 003's worked example: n = 100, mu = 1, s = 20 and s = 50."""
    m = SiloTimes.iid(100, mu=1.0)
    assert m.expected_wait_all() == pytest.approx(5.187, abs=1e-3)
    assert m.expected_wait_coded(20) == pytest.approx(5.187 - 3.598, abs=1e-3)
    assert m.theoretical_speedup(50) == pytest.approx(5.187 / (5.187 - 4.499), rel=1e-3)


def test_heavy_tail_integral_matches_monte_carlo() -> None:
    m = SiloTimes.heavy_tail(40, mu=1.0, seed=3)
    assert len(m.slow) == 2 and all(5 <= f <= 10 for f in m.factors)
    x = np.sort(m.draw(np.random.default_rng(0), 40_000), axis=1)
    for k in (40, 38, 30):
        mc = x[:, k - 1].mean()
        assert m.expected_order_statistic(k) == pytest.approx(mc, rel=0.03)


def test_draw_round_is_a_pure_function() -> None:
    m = SiloTimes.iid(7, mu=1.0)
    a = m.draw_round(seed=5, round_=3)
    assert np.array_equal(a, m.draw_round(seed=5, round_=3))
    assert not np.array_equal(a, m.draw_round(seed=5, round_=4))


def test_invalid_models_are_refused() -> None:
    with pytest.raises(ValueError):
        SiloTimes(n=3, mu=0.0)
    with pytest.raises(ValueError):
        SiloTimes(n=3, mu=1.0, slow=(5,), factors=(2.0,))
    with pytest.raises(ValueError):
        SiloTimes.iid(3, mu=1.0).expected_order_statistic(4)


def test_fifo_queue() -> None:
    a = np.array([[0.0, 0.0, 5.0, 5.5]])
    # service 1: done at 1, 2, 6, 7
    assert _fifo(a, 1.0).tolist() == [[1.0, 2.0, 6.0, 7.0]]


@pytest.mark.parametrize(("n", "s"), [(10, 1), (10, 5), (30, 6)])
def test_des_without_costs_is_the_order_statistic_theory(n: int, s: int) -> None:
    m = SiloTimes.iid(n, mu=1.0)
    rt = simulate(
        m,
        s,
        steps=StepSeconds.zero(),
        net=Network.instant(),
        rounds=20_000,
        rng=np.random.default_rng(1),
    )
    np.testing.assert_allclose(rt.plain, rt.wait_all)
    np.testing.assert_allclose(rt.coded, rt.wait_coded)
    assert rt.speedup == pytest.approx(m.theoretical_speedup(s), rel=0.03)


def test_des_costs_only_slow_the_rounds_down() -> None:
    m = SiloTimes.iid(10, mu=1.0)
    steps = StepSeconds(
        client_upload=0.1,
        server_upload=0.01,
        server_finish=0.2,
        plain_client=0.01,
        upload_bytes=10**6,
        plain_upload_bytes=10**5,
    )
    kw = {"rounds": 500}
    free = simulate(
        m, 2, steps=StepSeconds.zero(), net=Network.instant(), rng=np.random.default_rng(2), **kw
    )
    paid = simulate(m, 2, steps=steps, net=Network(), rng=np.random.default_rng(2), **kw)
    assert (paid.coded > free.coded).all() and (paid.plain >= free.plain).all()
    assert (paid.coded >= paid.close + 0.2).all()


def test_work_scaling_costs_s_plus_one() -> None:
    m = SiloTimes.iid(10, mu=1.0)
    rt = simulate(
        m,
        2,
        steps=StepSeconds.zero(),
        net=Network.instant(),
        rounds=20_000,
        rng=np.random.default_rng(3),
        work_scaling=True,
    )
    expect = m.expected_wait_all() / (3 * m.expected_wait_coded(2))
    assert rt.speedup == pytest.approx(expect, rel=0.03)


def test_cost_model_sizes_match_the_codec_and_fit_is_sane() -> None:
    points = [measure_step_costs(n, s, 64, rounds=1) for n, s in ((4, 1), (5, 1), (6, 2))]
    model = fit_costs(points)
    for p in points:
        for what in (
            "train_request",
            "upload",
            "recovery_request",
            "recovery_request_mean",
            "recovery_reply",
        ):
            assert model.bytes(what, n=p.n, s=p.s, d=p.d) == pytest.approx(
                getattr(p, f"{what}_bytes")
            )
        assert model.seconds("client_upload", n=p.n, s=p.s, d=p.d) >= 0
    with pytest.raises(ValueError):
        model.bytes("nonsense", n=4, s=1, d=64)


def test_bench_parts_are_validated_before_any_work() -> None:
    from simulations.bench.common import Report
    from simulations.bench.stragglers import run

    report = Report(name="stragglers", quick=True)
    with pytest.raises(ValueError, match="unknown parts"):
        run(report, quick=True, parts="costs,nonsense")
    with pytest.raises(ValueError, match="needs the costs part"):
        run(report, quick=True, parts="des")
    assert report.rows == [] and report.goals == []


def test_mean_recovery_request_counts_the_relayed_shares_of_every_survivor() -> None:
    # n = 6, s = 2: survivors 0..3, derived sets of U = 4 cyclically; survivor j gets the
    # shares of the survivors i with 0 < i - j <= s relayed: 2, 2, 1, 0 of them
    points = [measure_step_costs(6, 2, 64, rounds=1)]
    model = fit_costs(points)
    k, m = 4, points[0].m
    box = 32 + 28 + 4 * m  # the share's ephemeral key, nonce, tag and m elements
    # (41: the header, the two counts and the count of view signatures, none unsigned)
    expect = sum(41 + 60 * k + (k - r) * 56 + r * box for r in (2, 2, 1, 0)) / k
    assert model.bytes("recovery_request_mean", n=6, s=2, d=64) == pytest.approx(expect)
    assert points[0].recovery_request_mean_bytes == pytest.approx(expect)
    assert model.bytes("recovery_request", n=6, s=2, d=64) > expect


def test_des_the_upload_sum_overlaps_the_recovery_round_trip() -> None:
    """The server sums the uploads while the recovery requests travel: a sum shorter than the
    round trip costs nothing, a longer one delays the replies' processing by the difference."""
    m = SiloTimes.iid(10, mu=1.0)
    net = Network(latency=0.05)
    base = StepSeconds(server_close=0.01, client_recovery=0.02, server_finish=0.1)

    def coded(sum_seconds: float) -> np.ndarray:
        st = replace(base, server_sum=sum_seconds)
        return simulate(m, 2, steps=st, net=net, rounds=200, rng=np.random.default_rng(3)).coded

    np.testing.assert_allclose(coded(0.05), coded(0.0))  # hidden by the 2 x 50 ms round trip
    np.testing.assert_allclose(coded(0.5) - coded(0.0), 0.5 - 0.12, atol=1e-9)


def test_des_who_is_served_first_does_not_depend_on_who_is_slow() -> None:
    """The model goes out in a random order every round: a slow silo's index does not decide
    when it gets the model (in index order the last indices were always served last, and with
    s = 1 the second-slowest silo's download offset landed in the fixed cost)."""
    n, net = 50, Network()
    big = 4 * 10**7  # 32 ms per copy on the server's link: offsets up to 1.6 s
    steps = StepSeconds(model_bytes=big, upload_bytes=big, plain_upload_bytes=big)

    def fixed(slow: tuple[int, int]) -> float:
        times = SiloTimes(n=n, mu=1.0, slow=slow, factors=(20.0, 20.0))
        rt = simulate(times, 1, steps=steps, net=net, rounds=4000, rng=np.random.default_rng(9))
        return float((rt.coded - rt.wait_coded).mean())

    first, last = fixed((0, 1)), fixed((n - 2, n - 1))
    assert abs(first - last) < 0.05 * max(first, last)


def test_aligned_cost_model_sizes_match_the_codec_and_have_no_recovery_stage() -> None:
    """masking="aligned": the timed round is one round trip (no recovery messages, no recovery
    costs), and the upload is 4d plus group 0's e confirmation tags."""
    points = [
        measure_step_costs(n, s, 64, rounds=1, masking="aligned")
        for n, s in ((4, 1), (7, 1), (6, 2), (20, 2))
    ]
    model = fit_costs(points)
    assert model.masking == "aligned"
    for p in points:
        assert p.e == mask_degree(p.n, p.s, "aligned")
        assert p.client_recovery == p.server_recovery == 0.0
        assert p.recovery_request_bytes == p.recovery_reply_bytes == 0
        for what in ("train_request", "upload", "recovery_request", "recovery_reply"):
            assert model.bytes(what, n=p.n, s=p.s, d=p.d) == getattr(p, f"{what}_bytes")
        for step in ("client_recovery", "server_recovery"):
            assert model.seconds(step, n=p.n, s=p.s, d=p.d) == 0.0
    steps = StepSeconds.from_model(model, n=20, s=2, d=64)
    assert steps.round_trips == 1 and steps.recovery_reply_bytes == 0


def test_mask_degree_follows_the_mask_graph_over_the_groups() -> None:
    assert mask_degree(20, 2, "shares") == 0
    assert mask_degree(20, 2, "aligned") == 3  # 6 groups, T = 2: 3-connected
    assert mask_degree(10, 2, "aligned") == 2  # 3 groups: the triangle
    assert mask_degree(100, 50, "aligned") == 0  # one group: no mask at all
    with pytest.raises(ValueError, match="masking"):
        mask_degree(10, 2, "nonsense")


def test_fit_refuses_points_of_two_maskings() -> None:
    points = [
        measure_step_costs(4, 1, 64, rounds=1),
        measure_step_costs(4, 1, 64, rounds=1, masking="aligned"),
    ]
    with pytest.raises(ValueError, match="one masking"):
        fit_costs(points)


def test_des_one_round_trip_closes_sums_and_decodes() -> None:
    """round_trips = 1: the round ends at close + close_collection + sum + finish, whatever
    the recovery steps would have cost; with every cost zero it is X_(n-s) again."""
    m = SiloTimes.iid(10, mu=1.0)
    net = Network(latency=0.05)
    one = StepSeconds(server_close=0.01, server_sum=0.02, server_finish=0.03, round_trips=1)
    rt = simulate(m, 2, steps=one, net=net, rounds=300, rng=np.random.default_rng(5))
    np.testing.assert_allclose(rt.coded, rt.close + 0.06)
    slow = replace(one, client_recovery=5.0, recovery_reply_bytes=10**9)
    again = simulate(m, 2, steps=slow, net=net, rounds=300, rng=np.random.default_rng(5))
    np.testing.assert_allclose(again.coded, rt.coded)
    two = simulate(
        m,
        2,
        steps=replace(one, round_trips=2),
        net=net,
        rounds=300,
        rng=np.random.default_rng(5),
    )
    # the recovery round trip (two latencies) is longer than the sum it hides
    assert (two.coded - rt.coded >= 2 * 0.05 - 0.02 - 1e-9).all()
    zero = simulate(
        m,
        2,
        steps=StepSeconds(round_trips=1),
        net=Network.instant(),
        rounds=300,
        rng=np.random.default_rng(5),
    )
    np.testing.assert_allclose(zero.coded, zero.wait_coded)
    with pytest.raises(ValueError, match="round_trips"):
        simulate(
            m, 2, steps=replace(one, round_trips=3), net=net, rounds=1, rng=np.random.default_rng(5)
        )
