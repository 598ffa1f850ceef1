"""The Flower adapters of the shuffle (server driver, ClientApp handler, records) on an in-process
grid that calls the ClientApps directly: fast, no Ray (the simulation test runs them on Flower's
engine)."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterable

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from clients.shuffle import (
    member_id,
    shuffle_client_app,
    silo_store,
    store_path,
)
from coded_fl.errors import ConfigurationError, RemoteProtocolError
from coded_fl.shuffling import ShuffleJob, UnitManifest, UnitStore, install_silo, plan_shuffle
from coded_fl.shuffling.transport import wire
from coded_fl.shuffling.transport.wire import JoinReply
from coded_fl.vocabulary import SHUFFLE_KEY
from coded_fl.vocabulary import SHUFFLE_STATE_KEY as STATE_KEY
from coded_fl_flower.records import packet_content, packet_from
from simulations.shuffle.flower import RecordingGrid, drop_mod, leaked
from strategies.shuffle import ShuffleRelay

K = 4


@pytest.fixture(autouse=True)
def _server_identity(monkeypatch):
    """Flower's runtime sets who is sending before a ServerApp makes messages; do the same."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)


class InProcessGrid(Grid):
    """Nodes 100.. run their ClientApp when a message is pushed; ``silent`` nodes never reply."""

    def __init__(self, apps: dict[int, tuple[ClientApp, dict]], silent: Iterable[int] = ()):
        self.apps = apps
        self.silent = set(silent)
        self.contexts = {
            n: Context(run_id=7, node_id=n, node_config=cfg, state=RecordDict(), run_config={})
            for n, (_, cfg) in apps.items()
        }
        self.replies: dict[str, Message] = {}

    def set_run(self, run_id):  # type: ignore[override]
        pass

    @property
    def run(self):  # type: ignore[override]
        return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # type: ignore[override]
        return Message(content, dst_node_id=dst_node_id, message_type=message_type)

    def get_node_ids(self):
        return list(self.apps)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            mid = str(uuid.uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            ids.append(mid)
            node = msg.metadata.dst_node_id
            if node in self.silent:
                continue
            app, _ = self.apps[node]
            try:
                reply = app(msg, self.contexts[node])
            except Exception as exc:  # what Flower does with a ClientApp that raises
                reply = Message(Error(code=2, reason=str(exc)), reply_to=msg)
            self.replies[mid] = reply
        return ids

    def pull_messages(self, message_ids):  # type: ignore[override]
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


def _world(tmp_path, *, mods=(), node_config=None):
    rng = np.random.default_rng(1)
    data = {f"shard-{u}": rng.bytes(int(rng.integers(400, 900))) for u in range(2 * K)}
    ids = sorted(data)
    now = {u: frozenset({i % K}) for i, u in enumerate(ids)}
    nxt = {u: frozenset({(i + 1) % K}) for i, u in enumerate(ids)}
    manifest = UnitManifest.from_data(data)
    plan = plan_shuffle(manifest, now, nxt, K=K, t=2)
    for k in range(K):
        install_silo(plan, k, data, UnitStore(tmp_path / f"member-{k}"), epoch=0)
    UnitStore(tmp_path / f"member-{K}").commit(add={manifest.spec(u): data[u] for u in ids})
    app = shuffle_client_app(store_root=tmp_path, mods=list(mods))
    apps = {100 + m: (app, {"partition-id": m, **(node_config or {})}) for m in range(K + 1)}
    return data, now, nxt, apps


def _job(now, nxt, mode, epoch=1):
    return ShuffleJob.make(
        run_id="flwr-run-7", epoch=epoch, current=now, nxt=nxt, K=K, t=2, mode=mode
    )


@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
def test_an_epoch_through_the_adapters(tmp_path, mode):
    data, now, nxt, apps = _world(tmp_path)
    grid = InProcessGrid(apps)
    rec = RecordingGrid(grid)
    res = ShuffleRelay(rec, stage_timeout=5, hello_timeout=5).run(_job(now, nxt, mode))
    assert res.ok, res.lines()
    for k in range(K):
        ctx = grid.contexts[100 + k]
        store = silo_store(ctx)  # what the training code reads
        assert store.root == tmp_path / f"member-{k}"
        assert {u: store.read_unit(u) for u in store.units()} == {
            u: b for u, b in data.items() if k in nxt[u]
        }
        assert STATE_KEY in ctx.state
    assert res.uplink_bytes < res.uncoded_uplink_bytes
    assert not leaked(rec.seen, data)
    assert all(SHUFFLE_KEY.encode() not in b for b in rec.seen)  # only the packets' bytes


class _StaleWriteBackGrid(InProcessGrid):
    """After node ``node`` answers a request of kind ``stage``, its context is put back as it
    was before that request: what Flower's simulation engine does when another message of the
    node (a straggler's late train call) ran at the same time and ended last."""

    def __init__(self, apps, *, node: int, stage: type) -> None:
        super().__init__(apps)
        self.node, self.stage, self.reverted = node, stage, 0
        self.armed = False

    def push_messages(self, messages):
        msgs = list(messages)
        stale = {}
        for msg in msgs:
            n = msg.metadata.dst_node_id
            if self.armed and n == self.node and isinstance(packet_from(msg.content), self.stage):
                stale[n] = copy.deepcopy(self.contexts[n])
        ids = super().push_messages(msgs)
        for n, ctx in stale.items():
            self.contexts[n] = ctx
            self.reverted += 1
        return ids


@pytest.mark.parametrize("stage", [wire.Hello, wire.JoinRequest, wire.PlanRequest])
def test_a_stale_context_written_back_loses_no_shuffle_state(tmp_path, stage):
    """The member's machine is kept sealed next to its store, not in the context: a context
    put back to its state before a hello, join or plan request (a concurrent late train call
    that ended last) does not lose the epoch's progress."""
    data, now, nxt, apps = _world(tmp_path)
    grid = _StaleWriteBackGrid(apps, node=102, stage=stage)
    # a JoinRequest only comes with a fresh key: the second epoch would continue the first's
    relay = ShuffleRelay(
        grid, stage_timeout=5, hello_timeout=5, reuse_keys=stage is not wire.JoinRequest
    )
    assert relay.run(_job(now, nxt, "decentralized")).ok  # the node's first epoch
    grid.armed = True  # the second epoch (a reshuffle) races a late train call
    nxt2 = {u: frozenset((k + 1) % K for k in h) for u, h in nxt.items()}
    res = relay.run(_job(nxt, nxt2, "decentralized", epoch=2))
    assert grid.reverted == 1
    assert res.ok, res.lines()
    store = silo_store(grid.contexts[102])
    assert {u: store.read_unit(u) for u in store.units()} == {
        u: b for u, b in data.items() if 2 in nxt2[u]
    }
    state = grid.contexts[102].state[STATE_KEY]
    assert set(state.keys()) == {"store", "state-key"}  # no machine, no epoch key in there
    # the reshuffle continued the first epoch's group key (hello, plan, deliver), unless the
    # relay was told to agree a fresh one (the join case)
    assert res.keys_reused is (stage is not wire.JoinRequest)
    assert ("join" in res.seconds) is (stage is wire.JoinRequest)
    sealed = (tmp_path / "member-2" / "member.state").read_bytes()
    assert b"private" not in sealed and b"group" not in sealed


def test_a_silent_node_is_bounded_by_the_stage_deadline(tmp_path):
    _, now, nxt, apps = _world(tmp_path)
    grid = InProcessGrid(apps)
    relay = ShuffleRelay(grid, stage_timeout=0.3, hello_timeout=2)
    # silo 3 answers the hello, then goes silent
    original = grid.push_messages

    def push(messages):
        msgs = list(messages)
        if any(packet_from(m.content).__class__.__name__ != "Hello" for m in msgs):
            grid.silent.add(103)
        return original(msgs)

    grid.push_messages = push  # type: ignore[method-assign]
    t0 = time.monotonic()
    res = relay.run(_job(now, nxt, "centralized"))
    assert time.monotonic() - t0 < 4
    assert [s.status for s in res.silos] == ["complete", "complete", "complete", "dropped"]
    assert "no reply within 0.3s" in res.silos[3].error
    assert UnitStore(tmp_path / "member-3").epoch == 0


def test_a_node_that_drops_is_named(tmp_path):
    _, now, nxt, apps = _world(tmp_path, mods=[drop_mod({2: ("deliver", 1)})])
    res = ShuffleRelay(InProcessGrid(apps), stage_timeout=5, hello_timeout=5).run(
        _job(now, nxt, "decentralized")
    )
    assert [s.status for s in res.silos] == ["complete", "complete", "dropped", "complete"]
    assert "member 2 dropped (injected fault)" in res.silos[2].error
    assert UnitStore(tmp_path / "member-2").epoch == 0


def test_a_node_without_the_handler_is_named(tmp_path):
    _, now, nxt, apps = _world(tmp_path)
    apps[103] = (ClientApp(), apps[103][1])  # silo 3's ClientApp lacks the shuffle handler
    res = ShuffleRelay(InProcessGrid(apps), stage_timeout=5, hello_timeout=0.5).run(
        _job(now, nxt, "centralized")
    )
    assert [s.status for s in res.silos] == ["complete", "complete", "complete", "absent"]
    assert any("node 103" in e and "No query function" in e for e in res.errors), res.errors


@pytest.mark.parametrize("other_org", [False, True])
def test_an_organisation_key_from_node_config(tmp_path, other_org):
    key = tmp_path / "org.key"
    key.write_text(bytes(range(32)).hex())
    _, now, nxt, apps = _world(tmp_path, node_config={"codedfl.org-key-file": str(key)})
    if other_org:
        rogue = tmp_path / "rogue.key"
        rogue.write_bytes(bytes(range(1, 33)))
        app, cfg = apps[102]
        apps[102] = (app, {**cfg, "codedfl.org-key-file": str(rogue)})
    res = ShuffleRelay(InProcessGrid(apps), stage_timeout=5, hello_timeout=5).run(
        _job(now, nxt, "centralized")
    )
    if not other_org:
        assert res.ok, res.lines()
    else:  # the leader refuses a roster with a key its organisation did not vouch for
        assert res.aborted and "not vouched for" in res.aborted
        assert all(UnitStore(tmp_path / f"member-{k}").epoch == 0 for k in range(K))


def test_node_config_and_records():
    ctx = Context(
        run_id=3, node_id=1, node_config={"partition-id": 2}, state=RecordDict(), run_config={}
    )
    assert member_id(ctx, K=4) == 2
    assert str(store_path(ctx, 2)).endswith("run-3/member-2")
    ctx.node_config["codedfl.silo"] = "sender"
    assert member_id(ctx, K=4) == 4
    with pytest.raises(ConfigurationError, match="central sender's store"):
        silo_store(ctx)
    ctx.node_config["codedfl.silo"] = "x"
    with pytest.raises(ConfigurationError, match="expected a silo index"):
        member_id(ctx, K=4)
    ctx.node_config["codedfl.store"] = "/data/silo"
    assert str(store_path(ctx, 1)) == "/data/silo"
    empty = Context(run_id=3, node_id=1, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(ConfigurationError, match=r"codedfl\.silo"):
        member_id(empty, K=4)
    p = JoinReply(bytes(16), 3, b"share")
    assert packet_from(packet_content(p)) == p
    assert packet_from(RecordDict()) is None
    bad = RecordDict({SHUFFLE_KEY: ArrayRecord({"msg": Array(np.zeros(3, dtype=np.float32))})})
    with pytest.raises(RemoteProtocolError, match="uint8"):
        packet_from(bad)
    with pytest.raises(ConfigurationError, match="stage_timeout"):
        ShuffleRelay(InProcessGrid({}), stage_timeout=-1)
