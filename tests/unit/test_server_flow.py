"""The server machine's flow (:mod:`coded_fl.secagg.server.actions`): after ``open_round`` the
machine says, as typed actions, what its driver does next; the order of the protocol's steps
is the machine's, the driver only follows. Each test records the actions a real round hands
the driver (the in-memory harness, every message through the codec) and checks them against
the protocol's stages."""

from __future__ import annotations

from typing import Any

import pytest

from coded_fl.errors import LocalProtocolError
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.server import AbortCode, RoundAborted, ServerMachine
from coded_fl.secagg.server.actions import (
    AFTER_WAIT,
    COMPUTE,
    Await,
    Compute,
    Deadline,
    KeysDone,
    RoundDone,
    SendRequests,
    Stage,
)
from simulations.runtime.secagg_harness import Harness, Silo

SHARES = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    vector_length=12,
    run_id="flow-shares",
    masking="shares",
)
ALIGNED = ProtocolConfig(
    num_silos=6,
    num_stragglers=2,
    privacy_threshold=1,
    vector_length=12,
    run_id="flow-aligned",
    masking="aligned",
)


def _recorded(h: Harness) -> list[Any]:
    """Wrap the harness's server machine so that every action it hands out is kept (one
    entry per run of equal Awaits: the driver asks again after every reply)."""
    seen: list[Any] = []
    machine = h.server
    plain = machine.next_action

    def next_action() -> Any:
        action = plain()
        if not (
            seen
            and isinstance(action, Await)
            and isinstance(seen[-1], Await)
            and seen[-1].stage is action.stage
        ):
            seen.append(action)
        elif isinstance(action, Await):
            seen[-1] = action
        return action

    machine.next_action = next_action  # type: ignore[method-assign]
    return seen


def _shape(actions: list[Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for a in actions:
        if isinstance(a, SendRequests):
            out.append(("send", a.stage.value, a.deadline.value))
        elif isinstance(a, Compute):
            out.append(("compute", a.step))
        elif isinstance(a, Await):
            out.append(("await", a.stage.value))
        else:
            out.append((type(a).__name__,))
    return out


def test_a_shares_round_sends_recovers_sums_while_it_travels_and_decodes():
    h = Harness(SHARES, seed=1)
    h.setup()
    actions = _recorded(h)
    out = h.run_round(1, behaviour={4: Silo(drop="train")})
    assert isinstance(out.result, RoundResult)
    assert _shape(actions) == [
        ("send", "train", "round"),
        ("await", "train"),
        ("send", "recovery", "recovery"),
        ("compute", "server_sum"),
        ("await", "recovery"),
        ("compute", "server_finish"),
        ("RoundDone",),
    ]
    assert isinstance(actions[-1], RoundDone) and actions[-1].result is out.result
    # the last Await before each close said the machine could close
    awaits = [a for a in actions if isinstance(a, Await)]
    assert all(a.ready for a in awaits)


def test_an_aligned_round_is_one_round_trip_once_the_edge_keys_are_dealt():
    h = Harness(ALIGNED, seed=2)
    h.setup()
    r = 0
    while not h.server.edges_ready and r < 5:  # shared-mask rounds deal the edge keys
        r += 1
        assert isinstance(h.run_round(r).result, RoundResult)
    assert h.server.edges_ready
    actions = _recorded(h)
    out = h.run_round(r + 1)
    assert isinstance(out.result, RoundResult)
    assert _shape(actions) == [
        ("send", "train", "round"),
        ("await", "train"),
        ("compute", "server_finish"),
        ("RoundDone",),
    ]


def test_too_few_uploads_end_in_a_typed_abort_and_the_machine_takes_the_next_round():
    h = Harness(SHARES, seed=3)
    h.setup()
    actions = _recorded(h)
    drop = {i: Silo(drop="train") for i in (3, 4)}
    out = h.run_round(1, behaviour=drop)
    assert isinstance(out.result, RoundAborted)
    assert out.result.code is AbortCode.TOO_FEW_UPLOADS
    assert actions[-1] is out.result and _shape(actions)[-1] == ("RoundAborted",)
    again = h.run_round(2)
    assert isinstance(again.result, RoundResult)


def test_a_key_exchange_ends_in_keys_done_naming_the_silent():
    h = Harness(SHARES, seed=4)
    actions = _recorded(h)
    assert h.setup(behaviour={2: Silo(drop="keys")}) == (2,)
    assert _shape(actions) == [("send", "keys", "keys"), ("await", "keys"), ("KeysDone",)]
    assert isinstance(actions[-1], KeysDone) and actions[-1].missing == (2,)


def test_the_flow_refuses_calls_out_of_order_and_changes_nothing():
    m = ServerMachine(SHARES)
    with pytest.raises(LocalProtocolError, match="open a key exchange or a round"):
        m.next_action()
    m.open_key_exchange()
    with pytest.raises(LocalProtocolError, match="follow next_action"):
        m.stop_waiting()  # the requests were not handed out yet
    with pytest.raises(LocalProtocolError, match="follow next_action"):
        m.compute()
    send = m.next_action()
    assert isinstance(send, SendRequests) and send.stage is Stage.KEYS
    assert send.deadline is Deadline.KEYS and len(send.requests) == SHARES.n
    wait = m.next_action()
    assert wait == Await(Stage.KEYS, ready=False, complete=False)
    assert m.next_action() == wait  # asking again changes nothing


def test_every_wait_and_every_work_has_its_handler():
    for stage in Stage:
        step, handler = AFTER_WAIT[stage]
        assert step.startswith("server_") and callable(getattr(ServerMachine, handler))
    for step, method in COMPUTE.items():
        assert step.startswith("server_") and callable(getattr(ServerMachine, method))


def test_a_silo_that_does_not_sign_the_survivor_set_leaves_a_smaller_set_under_the_same_wait():
    from tests.unit.test_survivor_views import harness

    h = harness()
    actions = _recorded(h)
    out = h.run_round(1, {2: Silo(drop="view")})
    assert isinstance(out.result, RoundResult)
    assert _shape(actions) == [
        ("send", "train", "round"),
        ("await", "train"),
        ("send", "view", "recovery"),  # the recovery's deadline starts with the views
        ("await", "view"),
        ("send", "view", "continue"),  # the smaller set: the same deadline goes on
        ("await", "view"),
        ("send", "recovery", "recovery"),
        ("compute", "server_sum"),
        ("await", "recovery"),
        ("compute", "server_finish"),
        ("RoundDone",),
    ]
