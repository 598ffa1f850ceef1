"""Coded shuffling places the gradient code's partitions and reshuffles them (issue 17).

The shuffle epochs run through the relay's and the members' real machines in one process
(``run_loopback``, real AES-GCM and SHA-256); the train-side helper reads real stores through
real Flower ``Message``/``Context`` objects.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict

from clients.data import (
    MissingDataError,
    partition_arrays,
    partition_tensors,
    seed_own_data,
    silo_data_mod,
)
from coded_fl.codes import make_code
from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.shuffling import ShuffleJob, ShuffleMember, run_loopback
from coded_fl.shuffling.partitions import (
    Holdings,
    code_assignment,
    mixed_partitions,
    own_assignment,
    own_partitions,
    pack_examples,
    partition_holders,
    unpack_examples,
)
from coded_fl.vocabulary import DATA_STORE_NODE_KEY, PARTITION_UNITS_ENTRY, STORE_NODE_KEY

K, S, UNITS = 6, 2, 3


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    """Flower messages outside a running app need a task identity."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_node_id", 1), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def _support(kind: str = "auto") -> np.ndarray:
    return make_code(K, S, kind=kind).matrix != 0  # type: ignore[arg-type]


def _own(j: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    m = int(rng.integers(4, 12))
    return {"x": rng.random((m, 3), dtype=np.float32), "y": np.full(m, j, dtype=np.int64)}


def _context(tmp_path, j: int, **extra) -> Context:
    cfg = {"partition-id": j, "num-partitions": K, STORE_NODE_KEY: str(tmp_path / f"silo-{j}")}
    return Context(
        run_id=1,
        node_id=100 + j,
        node_config={**cfg, **extra},
        state=RecordDict(),
        run_config={},
    )


def _world(tmp_path):
    rng = np.random.default_rng(0)
    own = {j: _own(j, rng) for j in range(K)}
    stores = {
        j: seed_own_data(_context(tmp_path, j), own[j], units_per_silo=UNITS) for j in range(K)
    }
    members = {m: ShuffleMember(m) for m in range(K)}
    return own, stores, members


def _epoch(holdings, parts, support, epoch, members, stores, **kw):
    job = ShuffleJob.make(
        run_id="r",
        epoch=epoch,
        current=holdings.assignment(),
        nxt=code_assignment(support, parts),
        K=K,
        t=0,
        mode="decentralized",
    )
    res = run_loopback(job, members, stores, **kw)
    holdings.update(res)
    return res


def _train_msg(parts) -> Message:
    conf = ConfigRecord({PARTITION_UNITS_ENTRY: json.dumps([list(p) for p in parts])})
    return Message(RecordDict({"config": conf}), dst_node_id=1, message_type="train")


def _read(tmp_path, silo: int, k: int, parts):
    """What the train function of silo ``silo`` gets for partition k (through the mod)."""
    got = {}

    def train(msg, ctx):  # what coded_secagg_mod does: partition-id := k, fresh state
        sub = Context(
            run_id=1,
            node_id=ctx.node_id,
            state=RecordDict(),
            run_config={},
            node_config={**ctx.node_config, "partition-id": k},
        )
        got.update(partition_arrays(msg, sub))
        return msg

    silo_data_mod(_train_msg(parts), _context(tmp_path, silo), train)
    return got


@pytest.mark.parametrize("kind", ["auto", "polynomial"])
def test_placement_gives_every_silo_exactly_its_codes_partitions(tmp_path, kind):
    own, stores, members = _world(tmp_path)
    support = _support(kind)
    parts = own_partitions(K, UNITS)
    holdings = Holdings.from_assignment(own_assignment(parts), K)
    res = _epoch(holdings, parts, support, 1, members, stores)
    assert res.ok, res.lines()
    assert res.load == res.formula_load  # bytes equal the scheme's formula
    for i in range(K):
        want = {u for j in partition_holders(support, i) for u in parts[j]}
        assert set(stores[i].units()) == want  # exactly the support, nothing else
        for j in partition_holders(support, i):  # oracle: the owner's own arrays
            got = _read(tmp_path, i, j, parts)
            np.testing.assert_array_equal(got["x"], own[j]["x"])
            np.testing.assert_array_equal(got["y"], own[j]["y"])


def test_a_reshuffle_mixes_partitions_and_moves_the_formulas_bytes(tmp_path):
    own, stores, members = _world(tmp_path)
    support = _support()
    parts = own_partitions(K, UNITS)
    holdings = Holdings.from_assignment(own_assignment(parts), K)
    assert _epoch(holdings, parts, support, 1, members, stores).ok
    mixed = mixed_partitions(parts, rng=np.random.default_rng(1))
    assert sorted(u for p in mixed for u in p) == sorted(u for p in parts for u in p)
    assert [len(p) for p in mixed] == [len(p) for p in parts]
    assert any(len({u.split("-")[0] for u in p}) > 1 for p in mixed)  # partitions now mix silos
    res = _epoch(holdings, mixed, support, 2, members, stores)
    assert res.ok and res.load == res.formula_load
    assert res.uplink_bytes <= res.uncoded_uplink_bytes
    oracle = {  # unit -> its rows, cut as seed_own_data cuts a silo's data
        u: {k: a[idx] for k, a in own[j].items()}
        for j in range(K)
        for u, idx in zip(parts[j], np.array_split(np.arange(len(own[j]["y"])), UNITS), strict=True)
    }
    for i in range(K):
        for j in partition_holders(support, i):
            got = _read(tmp_path, i, j, mixed)
            want = np.concatenate([oracle[u]["x"] for u in mixed[j]])
            np.testing.assert_array_equal(got["x"], want)
    for i in range(K):  # every silo holds exactly its partitions of the new map
        want = {u for j in partition_holders(support, i) for u in mixed[j]}
        assert set(stores[i].units()) == want


def test_a_silo_that_misses_the_placement_is_a_straggler_then_repaired(tmp_path):
    own, stores, members = _world(tmp_path)
    support = _support()
    parts = own_partitions(K, UNITS)
    holdings = Holdings.from_assignment(own_assignment(parts), K)
    res = _epoch(
        holdings,
        parts,
        support,
        1,
        members,
        stores,
        drop=lambda stage, m: (stage, m) == ("deliver", 2),
    )
    assert res.outcome(2).status == "dropped"
    lacking = [j for j in partition_holders(support, 2) if j != 2]
    assert lacking and not holdings.ready(2, partition_holders(support, 2), parts)
    assert set(stores[2].units()) == set(parts[2])  # nothing unverified, nothing lost
    for j in lacking:  # its train function refuses: it is never given data it lacks
        with pytest.raises(MissingDataError, match=f"partition {j}"):
            _read(tmp_path, 2, j, parts)
    assert _read(tmp_path, 2, 2, parts)["y"].tolist() == own[2]["y"].tolist()
    others = [i for i in range(K) if i != 2]
    assert all(holdings.ready(i, partition_holders(support, i), parts) for i in others)
    # the next reshuffle starts from what silo 2 really holds and repairs it
    mixed = mixed_partitions(parts, rng=np.random.default_rng(3))
    res2 = _epoch(holdings, mixed, support, 2, members, stores)
    assert res2.ok, res2.lines()
    for i in range(K):
        assert holdings.ready(i, partition_holders(support, i), mixed)
        want = {u for j in partition_holders(support, i) for u in mixed[j]}
        assert set(stores[i].units()) == want


def test_a_corrupted_unit_in_a_store_is_never_trained_on(tmp_path):
    _, stores, _ = _world(tmp_path)
    parts = own_partitions(K, UNITS)
    path = stores[0].unit_path("s0-1")
    path.write_bytes(b"\0" + path.read_bytes()[1:])
    with pytest.raises(DecodingError):
        _read(tmp_path, 0, 0, parts)


def test_the_helper_needs_the_mod_and_the_partition_map(tmp_path):
    _world(tmp_path)
    parts = own_partitions(K, UNITS)
    ctx = _context(tmp_path, 0)
    with pytest.raises(ConfigurationError, match="silo_data_mod"):
        partition_arrays(_train_msg(parts), ctx)
    pinned = _context(tmp_path, 0, **{DATA_STORE_NODE_KEY: str(tmp_path / "silo-0")})
    x, y = partition_tensors(_train_msg(parts), pinned)
    assert x.shape[0] == y.shape[0] > 0
    bare = Message(RecordDict({"config": ConfigRecord()}), dst_node_id=1, message_type="train")
    with pytest.raises(ConfigurationError, match="partition-units"):
        partition_arrays(bare, pinned)


def test_seeding_is_idempotent_and_units_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    data = _own(0, rng)
    store = seed_own_data(_context(tmp_path, 0), data, units_per_silo=2)
    assert store.epoch == 0 and store.units() == ("s0-0", "s0-1")
    again = seed_own_data(_context(tmp_path, 0), _own(0, rng), units_per_silo=2)
    assert again.units() == store.units() and again.read_unit("s0-0") == store.read_unit("s0-0")
    back = unpack_examples(pack_examples(data))
    np.testing.assert_array_equal(back["x"], data["x"])
    with pytest.raises(InputError):
        pack_examples({"x": np.zeros(2), "y": np.zeros(3)})


def test_partition_dataset_is_a_datasets_dataset_or_says_what_to_install(tmp_path, monkeypatch):
    from clients.data import partition_dataset

    own, _, _ = _world(tmp_path)
    parts = own_partitions(K, UNITS)
    pinned = _context(tmp_path, 1, **{DATA_STORE_NODE_KEY: str(tmp_path / "silo-1")})
    pytest.importorskip("datasets")  # in the test extra
    ds = partition_dataset(_train_msg(parts), pinned)
    assert set(ds.column_names) == {"x", "y"} and len(ds) == len(own[1]["y"])
    rows = ds.with_format("numpy")[:]  # what a flwr-datasets train loop reads
    np.testing.assert_array_equal(rows["x"], own[1]["x"])  # oracle: the owner's own arrays
    np.testing.assert_array_equal(rows["y"], own[1]["y"])
    assert rows["x"].dtype == own[1]["x"].dtype
    monkeypatch.setitem(sys.modules, "datasets", None)  # a project without datasets
    with pytest.raises(ConfigurationError, match="pip install datasets"):
        partition_dataset(_train_msg(parts), pinned)
