"""Exchange: acts on replies as they come, never loses a pulled reply, honours deadlines."""

from __future__ import annotations

import time

import pytest
from flwr.app import Error, Message, MessageType, RecordDict

from strategies.exchange import Exchange


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages made outside a Flower run need a run id (as a ServerApp has)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 7), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)


class FakeGrid:
    """An in-memory grid: every pushed message gets its reply after a per-node delay."""

    def __init__(self, delays: dict[int, float], errors: dict[int, str] | None = None) -> None:
        self.delays = delays
        self.errors = errors or {}
        self.pushed: dict[str, tuple[Message, float]] = {}

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        ids = []
        for i, m in enumerate(messages):
            mid = f"m{len(self.pushed)}-{i}"
            m.metadata.__dict__["_message_id"] = mid
            self.pushed[mid] = (m, time.monotonic())
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        out = []
        now = time.monotonic()
        for mid in list(message_ids):
            if mid in self.pushed:
                m, t = self.pushed[mid]
                if now - t >= self.delays[m.metadata.dst_node_id]:
                    del self.pushed[mid]  # a pull hands a reply over once, like the SuperLink
                    node = m.metadata.dst_node_id
                    if node in self.errors:
                        out.append(Message(Error(0, self.errors[node]), reply_to=m))
                    else:
                        out.append(Message(RecordDict(), reply_to=m))
        return out


def msgs(nodes):  # type: ignore[no-untyped-def]
    return [Message(RecordDict(), dst_node_id=n, message_type=MessageType.TRAIN) for n in nodes]


def test_stops_at_the_first_replies_and_time_stamps_every_late_one():
    grid = FakeGrid({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.3})
    ex = Exchange(grid, poll_interval=0.01)  # type: ignore[arg-type]
    ids = ex.push(msgs([1, 2, 3, 4]), stage="train", round_=1)
    seen: list[int] = []

    def first_two(node: int, reply: Message) -> bool:
        seen.append(node)
        return len(seen) == 2

    assert ex.collect(ids, first_two, deadline=time.monotonic() + 5)
    assert len(seen) == 2
    # node 3 answered in the same pull but after "done": it is a late reply, not lost
    assert {late.node_id for late in ex.late} == {1, 2, 3, 4} - set(seen) - {4}
    ex.drain(2.0)
    assert {late.node_id for late in ex.late} == {1, 2, 3, 4} - set(seen)
    assert all(late.stage == "train" and late.round == 1 for late in ex.late)


def test_deadline_bounds_the_wait():
    grid = FakeGrid({1: 0.0, 2: 60.0})
    ex = Exchange(grid, poll_interval=0.01)  # type: ignore[arg-type]
    ids = ex.push(msgs([1, 2]), stage="train", round_=1)
    t0 = time.monotonic()
    assert not ex.collect(ids, lambda n, r: False, deadline=time.monotonic() + 0.2)
    assert time.monotonic() - t0 < 2.0
    assert ex.lingering("train", 1) == [2]


def test_a_late_error_reply_keeps_its_reason_and_poll_does_not_wait():
    grid = FakeGrid({1: 0.0, 2: 0.0, 3: 0.15}, errors={3: "codedfl-needs-keys: restarted"})
    ex = Exchange(grid, poll_interval=0.01)  # type: ignore[arg-type]
    ids = ex.push(msgs([1, 2, 3]), stage="train", round_=2)
    seen: list[int] = []
    assert ex.collect(
        ids, lambda n, r: seen.append(n) or len(seen) == 2, deadline=time.monotonic() + 5
    )
    t0 = time.monotonic()
    ex.poll()  # node 3 has not answered yet: nothing recorded, no waiting
    assert ex.late == [] and time.monotonic() - t0 < 0.1
    time.sleep(0.2)
    ex.poll()
    [late] = ex.late
    assert (late.node_id, late.stage, late.round, late.error) == (3, "train", 2, True)
    assert "codedfl-needs-keys" in late.reason
