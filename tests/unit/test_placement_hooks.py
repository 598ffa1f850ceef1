"""The two ``CodedSecAgg.start`` options coded shuffling needs (issue 17): ``before_round`` (a
reshuffle between rounds; its entries reach that round's train config on every silo) and
``silo_nodes`` (silo i of the code is the node that holds silo i's partitions)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MessageType

from coded_fl.errors import ConfigurationError
from tests.unit.test_strategy_faults import D, FakeGrid, _strategy


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def _init() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})


def test_before_round_runs_before_each_rounds_train_requests_and_reaches_every_silo() -> None:
    grid = FakeGrid(4)
    seen: list[tuple[int, int, object]] = []  # (node, server-round, our entry)
    calls: list[tuple[int, int]] = []  # (round, train messages pushed so far)
    app = grid.app

    def recording(msg, ctx):  # type: ignore[no-untyped-def]
        if msg.metadata.message_type == MessageType.TRAIN and "config" in msg.content:
            conf = msg.content["config"]
            seen.append((ctx.node_id, int(conf["server-round"]), conf.get("test.map")))
        return app(msg, ctx)

    grid.app = recording  # type: ignore[assignment]

    def before_round(r: int) -> ConfigRecord:
        calls.append((r, len(seen)))
        return ConfigRecord({"test.map": f"map-{r}"})

    strategy = _strategy(4)
    strategy.start(grid=grid, initial_arrays=_init(), num_rounds=3, before_round=before_round)
    assert all(rep.ok for rep in strategy.reports)
    assert [r for r, _ in calls] == [1, 2, 3]
    assert [n for _, n in calls] == [0, 4, 8]  # before that round's requests, after the last
    for r in (1, 2, 3):
        got = {node: entry for node, rr, entry in seen if rr == r}
        assert got == {100 + i: f"map-{r}" for i in range(4)}


def test_silo_nodes_fix_which_node_is_which_silo() -> None:
    grid = FakeGrid(4)
    order = [102, 100, 103, 101]
    strategy = _strategy(4)
    strategy.start(grid=grid, initial_arrays=_init(), num_rounds=1, silo_nodes=order)
    assert strategy.reports[0].ok
    assert strategy._run is not None and strategy._run.node_of == dict(enumerate(order))
    with pytest.raises(ConfigurationError, match="one node per silo"):
        strategy.start(grid=grid, initial_arrays=_init(), num_rounds=1, silo_nodes=order[:3])


class _LoopbackRelay:
    """ShuffleRelay's interface over run_loopback (real machines, real stores, no Flower);
    ``drops[epoch]`` = silos that vanish in that epoch's delivery; ``loses[epoch]`` = silos
    that commit that epoch's delivery but whose reply is lost."""

    def __init__(
        self,
        tmp_path,
        K: int,
        units: int,
        drops: dict[int, set[int]],
        loses: dict[int, set[int]] | None = None,
    ) -> None:
        from coded_fl.shuffling import ShuffleMember, UnitStore
        from coded_fl.shuffling.partitions import own_units, pack_examples
        from coded_fl.shuffling.plan.units import UnitSpec, digest

        self.members = {m: ShuffleMember(m) for m in range(K)}
        self.stores = {m: UnitStore(tmp_path / f"m{m}") for m in range(K)}
        for m, store in self.stores.items():
            raws = [pack_examples({"y": np.full(3, m)}) for _ in range(units)]
            specs = [
                UnitSpec(u, len(r), digest(r))
                for u, r in zip(own_units(m, units), raws, strict=True)
            ]
            store.commit(add=dict(zip(specs, raws, strict=True)), epoch=0, known=specs)
        self.drops, self.loses = drops, loses or {}
        self.jobs: list = []
        self.nodes_of_members = {m: 100 + m for m in range(K)}

    def run(self, job):  # type: ignore[no-untyped-def]
        from coded_fl.shuffling import run_loopback

        self.jobs.append(job)
        gone = self.drops.get(job.epoch, set())
        lost = self.loses.get(job.epoch, set())
        return run_loopback(
            job,
            self.members,
            self.stores,
            drop=lambda stage, m: stage == "deliver" and m in gone,
            lose=lambda stage, m: stage == "deliver" and m in lost,
        )


def test_a_placement_that_leaves_too_few_silos_placed_is_run_again(tmp_path) -> None:
    from strategies.placement import ShuffledTraining

    relay = _LoopbackRelay(tmp_path, 4, 2, drops={1: {0, 2}})
    run = ShuffledTraining(_strategy(4), relay, units_per_silo=2, reshuffle_every=1)  # type: ignore[arg-type]
    run.start(FakeGrid(4), _init(), 3)
    first, again, *reshuffles = run.epochs
    assert first.before_round == again.before_round == 1
    assert first.incomplete == (0, 2) and again.incomplete == ()  # s = 1: one retry repairs
    assert again.load < first.load  # it moved only what was missing
    assert [e.before_round for e in reshuffles] == [2, 3]
    assert all(e.load == e.formula_load for e in run.epochs)
    assert not any(e.incomplete for e in reshuffles)
    assert all(rep.ok for rep in run.reports)


def test_a_reply_lost_after_the_commit_is_caught_at_the_next_hello_and_replanned(tmp_path) -> None:
    """Silo 0 commits a reshuffle (dropping units it held before) but its delivery report is
    lost: the server's view still lists it as holding its old units. At the next reshuffle its
    hello reports what its store holds; the job named it as the sender of units it dropped, so
    that epoch stops before any key or data moves, the view takes the reported holdings, and
    the epoch runs again (next epoch number) and completes. Every round completes."""
    from coded_fl.shuffling.partitions import partition_holders
    from strategies.placement import ShuffledTraining

    relay = _LoopbackRelay(tmp_path, 4, 2, drops={}, loses={2: {0}})
    lines: list[str] = []
    run = ShuffledTraining(
        _strategy(4), relay, units_per_silo=2, reshuffle_every=1, seed=1, progress=lines.append
    )  # type: ignore[arg-type]
    run.start(FakeGrid(4), _init(), 4)
    res = run.results
    assert res[1].outcome(0).status == "dropped"  # epoch 2: its report was lost
    stale = [r for r in res if r.aborted.startswith("stale view of the stores: silo 0")]
    assert len(stale) == 1 and stale[0].relayed == 0
    after = res[res.index(stale[0]) + 1]
    assert after.ok and after.job.epoch == stale[0].job.epoch + 1, after.lines()
    assert any("view of the stores was stale" in line for line in lines)
    assert [j.epoch for j in relay.jobs] == list(range(1, len(res) + 1))
    assert all(rep.ok for rep in run.reports)
    for i in range(4):  # the view is the stores, and each store holds exactly its partitions
        want = {u for j in partition_holders(run.support, i) for u in run.parts[j]}
        assert set(relay.stores[i].units()) == want == run.holdings.held[i]


class _SlowSiloGrid(FakeGrid):
    """A FakeGrid whose node ``slow`` answers each train request only after ``pulls`` pulls
    that ask for it: a straggler still working when the round has closed."""

    def __init__(self, n: int, slow: int, pulls: int) -> None:
        super().__init__(n)
        self.slow, self.pulls = slow, pulls
        self.held: dict[str, int] = {}

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        msgs = list(messages)
        ids = list(super().push_messages(msgs))
        for mid, msg in zip(ids, msgs, strict=True):
            if msg.metadata.dst_node_id == self.slow and msg.metadata.message_type == "train":
                self.held[mid] = self.pulls
        return ids

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        asked = set(message_ids)
        for mid in [m for m in self.held if m in asked]:
            self.held[mid] -= 1
            if self.held[mid] <= 0:
                del self.held[mid]
        return super().pull_messages(asked - set(self.held))


def test_a_reshuffle_can_wait_for_the_previous_rounds_stragglers(tmp_path) -> None:
    """Silo 3 is a straggler in every round (its train reply comes late); with a
    settle_timeout, ShuffledTraining settles the run before each reshuffle: no silo is still
    working on a round's message when its shuffle messages come (in Flower's simulation
    engine, the one that ended last would write the node's context back over the other's)."""
    from strategies.placement import ShuffledTraining

    grid = _SlowSiloGrid(4, slow=103, pulls=4)
    strategy = _strategy(4)
    relay = _LoopbackRelay(tmp_path, 4, 2, drops={})
    busy_at_epoch: dict[int, list[str]] = {}
    run_epoch = relay.run

    def run(job):  # type: ignore[no-untyped-def]
        busy_at_epoch[job.epoch] = sorted(grid.held)  # train replies still being worked on
        return run_epoch(job)

    relay.run = run  # type: ignore[method-assign]
    shuffled = ShuffledTraining(
        strategy, relay, units_per_silo=2, reshuffle_every=1, settle_timeout=30.0
    )  # type: ignore[arg-type]
    shuffled.start(grid, _init(), 3)
    assert all(rep.ok for rep in shuffled.reports)
    assert all(3 in rep.stragglers for rep in shuffled.reports)  # it was late in every round
    assert set(busy_at_epoch) == {1, 2, 3}
    assert busy_at_epoch[2] == busy_at_epoch[3] == []  # settled before each reshuffle
    # the run ends without waiting for the last round's straggler; settle() waits for it
    assert strategy.settle(30.0) == []


def test_coded_reshuffles_halve_the_fanout_through_the_real_machines(tmp_path) -> None:
    """Issue 31: with the polynomial code (cyclic supports) every reshuffle pairs all units;
    each pair goes as one XOR and every silo ends with exactly its partitions' units."""
    from coded_fl.shuffling.partitions import partition_holders
    from strategies.placement import ShuffledTraining

    K, units = 4, 3
    relay = _LoopbackRelay(tmp_path, K, units, drops={})
    strategy = _strategy(K, code="polynomial")
    run = ShuffledTraining(strategy, relay, units_per_silo=units, reshuffle_every=1)  # type: ignore[arg-type]
    assert run.coded_reshuffle  # "auto": the code allows it
    run.start(FakeGrid(K), _init(), 3)
    assert all(rep.ok for rep in run.reports)
    for res in run.results[1:]:  # the reshuffles
        job = res.job
        fanout = sum(1 for a, b in zip(job.current, job.target, strict=True) if not b <= a)
        assert res.ok and res.load == res.formula_load == fanout / 2
        assert res.downlink_bytes == res.uncoded_downlink_bytes  # each silo gets what it lacks
    for k in range(K):  # the stores hold exactly the last map's partitions
        want = {u for j in partition_holders(run.support, k) for u in run.parts[j]}
        assert set(relay.stores[k].units()) == want


def test_a_coded_reshuffle_is_refused_for_the_repetition_codes_disjoint_groups(tmp_path) -> None:
    from strategies.placement import ShuffledTraining

    relay = _LoopbackRelay(tmp_path, 4, 2, drops={})
    with pytest.raises(ConfigurationError, match="reshuffle='uniform'"):
        ShuffledTraining(
            _strategy(4, code="repetition"), relay, units_per_silo=2, reshuffle="coded"
        )  # type: ignore[arg-type]
    auto = ShuffledTraining(_strategy(4, code="repetition"), relay, units_per_silo=2)  # type: ignore[arg-type]
    assert not auto.coded_reshuffle
    with pytest.raises(ConfigurationError, match="'auto', 'coded' or 'uniform'"):
        ShuffledTraining(_strategy(4), relay, units_per_silo=2, reshuffle="xor")  # type: ignore[arg-type]


def _coded_run(relay: _LoopbackRelay, K: int, units: int):  # type: ignore[no-untyped-def]
    """Placement and two rounds, a coded reshuffle before round 2 (the polynomial code)."""
    from strategies.placement import ShuffledTraining

    lines: list[str] = []
    shuffled = ShuffledTraining(
        _strategy(K, code="polynomial"),
        relay,  # type: ignore[arg-type]
        units_per_silo=units,
        reshuffle_every=1,
        seed=2,
        progress=lines.append,
    )
    shuffled.start(FakeGrid(K), _init(), 2)
    return shuffled, lines


def test_a_silent_sender_of_coded_pairs_is_routed_around_at_once(tmp_path) -> None:
    """Silo 1 sends nothing in the first reshuffle (it drops before its coded messages): its
    pairs' receivers miss both units, more than s silos lack their partitions, and the epoch
    is planned again at once from the units' other holders; no round loses a silo."""
    from coded_fl.shuffling import run_loopback

    K, units = 4, 3
    relay = _LoopbackRelay(tmp_path, K, units, drops={})

    def run(job):  # type: ignore[no-untyped-def]
        relay.jobs.append(job)
        silent = job.epoch == 2  # the first reshuffle
        return run_loopback(
            job,
            relay.members,
            relay.stores,
            drop=lambda stage, m: silent and (stage, m) == ("plan", 1),
        )

    relay.run = run  # type: ignore[method-assign]
    shuffled, lines = _coded_run(relay, K, units)
    first, retry = shuffled.results[1], shuffled.results[2]
    assert first.outcome(1).status == "dropped"
    assert sum(o.status != "complete" for o in first.silos) > 1  # its pairs' receivers too
    assert any("not from the silent or failing senders [1]" in line for line in lines)
    assert retry.ok, retry.lines()
    assert all(rep.ok for rep in shuffled.reports)
    assert shuffled.epochs[1].incomplete == (0, 1, 2)  # silo 1 and its pairs' receivers
    assert shuffled.epochs[2].incomplete == () and shuffled.epochs[2].before_round == 2


def test_a_silo_that_sends_a_wrong_xor_gains_nothing_and_is_routed_around(
    tmp_path, monkeypatch
) -> None:
    """Attack (issue 31): silo 1 holds the group key and seals a wrong XOR for each of its
    pairs in the first reshuffle. Its receivers decode units whose SHA-256 fails: none is
    committed, and the epoch is planned again at once without silo 1 as a sender; every store
    ends with exactly the right bytes."""
    import coded_fl.shuffling.storage.delivery as delivery
    from coded_fl.shuffling import run_loopback
    from coded_fl.shuffling.partitions import partition_holders

    K, units = 4, 3
    relay = _LoopbackRelay(tmp_path, K, units, drops={})
    lying = {"on": False}
    honest_encode = delivery.encode

    def encode(plan, buf, indices=None, out=None):  # type: ignore[no-untyped-def]
        got = honest_encode(plan, buf, indices, out)
        if lying["on"] and indices is not None and (plan.msg_sender[indices] == 1).all():
            got[:, 0] ^= 0x5A  # a different XOR, sealed with the real group key
        return got

    monkeypatch.setattr(delivery, "encode", encode)
    oracle = {u: relay.stores[m].read_unit(u) for m in range(K) for u in relay.stores[m].units()}

    def run(job):  # type: ignore[no-untyped-def]
        relay.jobs.append(job)
        lying["on"] = job.epoch == 2
        try:
            return run_loopback(job, relay.members, relay.stores)
        finally:
            lying["on"] = False

    relay.run = run  # type: ignore[method-assign]
    shuffled, lines = _coded_run(relay, K, units)
    bad = shuffled.results[1]
    assert any(o.failed for o in bad.silos)  # the receivers caught it
    assert any("not from the silent or failing senders [1]" in line for line in lines)
    assert shuffled.results[2].ok and all(rep.ok for rep in shuffled.reports)
    for k in range(K):  # exactly the right units, byte for byte
        want = {u for j in partition_holders(shuffled.support, k) for u in shuffled.parts[j]}
        assert set(relay.stores[k].units()) == want
        assert all(relay.stores[k].read_unit(u) == oracle[u] for u in want)


@pytest.mark.parametrize("silent", [(0, 3), (1, 2), (4, 5)])
def test_any_s_silent_silos_in_a_coded_reshuffle_leave_every_round_complete(
    tmp_path, silent
) -> None:
    """n = 6, s = 2: any two silos that send nothing in a coded reshuffle. Every unit has three
    holders, so the re-plan (before the round, at once) finds a sender for each, and every
    round completes."""
    from coded_fl.shuffling import run_loopback
    from strategies.placement import ShuffledTraining

    K, units = 6, 2
    relay = _LoopbackRelay(tmp_path, K, units, drops={})

    def run(job):  # type: ignore[no-untyped-def]
        relay.jobs.append(job)
        gone = set(silent) if job.epoch == 2 else set()
        return run_loopback(
            job, relay.members, relay.stores, drop=lambda stage, m: stage == "plan" and m in gone
        )

    relay.run = run  # type: ignore[method-assign]
    shuffled = ShuffledTraining(
        _strategy(K, s=2, code="polynomial"), relay, units_per_silo=units, reshuffle_every=1
    )  # type: ignore[arg-type]
    shuffled.start(FakeGrid(K), _init(), 2)
    assert shuffled.coded_reshuffle
    assert all(rep.ok for rep in shuffled.reports)
    _placed, hit, again = shuffled.epochs
    assert len(hit.incomplete) > 2 and hit.before_round == again.before_round == 2
    assert again.incomplete == ()  # planned again at once from the other holders
