"""A silo that holds keys, then says nothing (gone, or hanging): named after two quiet rounds,
not waited for from then on, back with its next reply (the real driver and ClientApps over the
faults tests' grid).

n = 6, s = 2, aligned masks, ``extra_replies=2``: every round waits up to ``extra_wait`` for
the replies beyond n - s. The grid answers at once, so a round that waits for nobody pulls
once; a round that waits for a silent silo pulls until its extra wait ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message

from tests.unit.test_strategy_drift import _fedavg
from tests.unit.test_strategy_faults import D, FakeGrid, _task_identity  # noqa: F401
from tests.unit.test_strategy_faults import _strategy as faults_strategy

pytestmark = pytest.mark.usefixtures("_task_identity")

N, SILENT = 6, 104  # silo 4's node


@dataclass
class QuietGrid(FakeGrid):
    """FakeGrid whose ``quiet`` nodes answer nothing but the key exchange; counts the pulls
    made after each train push."""

    quiet: set[int] = field(default_factory=set)
    #: one entry per push that held train requests: the pulls until the next push
    train_pulls: list[int] = field(default_factory=list)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        msgs = list(messages)
        ids = list(super().push_messages(msgs))
        sent = self.pushed[-len(ids) :] if ids else []
        for mid, (node, kind) in zip(ids, sent, strict=True):
            if node in self.quiet and kind != "KeyRequest":
                del self.replies[mid]  # never comes
        if any(kind == "TrainRequest" for _, kind in sent):
            self.train_pulls.append(0)
        elif self.train_pulls:
            self.train_pulls.append(-1)  # another stage: not counted
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # type: ignore[override]
        if self.train_pulls and self.train_pulls[-1] >= 0:
            self.train_pulls[-1] += 1
        return super().pull_messages(message_ids)


def _run(grid: QuietGrid, rounds: int):  # type: ignore[no-untyped-def]
    s = faults_strategy(N, s=2, extra=2, extra_wait=0.3, masking="aligned")
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    out = s.start(grid=grid, initial_arrays=init, num_rounds=rounds)
    return s, out.arrays["w"].numpy()


def test_a_silent_silo_is_named_after_two_rounds_and_not_waited_for() -> None:
    grid = QuietGrid(N, quiet={SILENT})
    s, w = _run(grid, 5)
    reports = s.reports
    assert [r.ok for r in reports] == [True] * 5, [r.line() for r in reports]
    # round 1: a straggler like any other; from round 2: nothing heard for two rounds
    assert [r.silent for r in reports] == [(), (4,), (4,), (4,), (4,)]
    assert [r.unawaited for r in reports] == [(), (), (4,), (4,), (4,)]
    assert all(4 in r.stragglers for r in reports)
    assert "silent for two rounds: silo(s) [4]" in reports[1].line()
    # rounds 1-2 waited the extra wait for it (hundreds of pulls at poll_interval 1 ms);
    # rounds 3-4 closed on the first pull, which brought every other silo's upload (then one
    # look for late replies after the round and one before the next: 3 pulls in all; round
    # 5's count holds the run's final drain of lingering replies)
    train = [p for p in grid.train_pulls if p >= 0]
    assert len(train) == 5 and min(train[:2]) > 10 and max(train[2:4]) <= 3, train
    np.testing.assert_allclose(w, _fedavg(N, 5), atol=1e-3)


def test_a_silent_silo_that_answers_again_is_awaited_again() -> None:
    grid = QuietGrid(N, quiet={SILENT})

    def wake(g: FakeGrid) -> None:  # before round 4's pushes: silo 4 is back
        if sum(kind == "TrainRequest" for _, kind in g.pushed) >= 3 * N:
            grid.quiet.clear()

    grid.before_push.append(wake)
    s, w = _run(grid, 5)
    reports = s.reports
    assert [r.ok for r in reports] == [True] * 5, [r.line() for r in reports]
    assert [r.silent for r in reports] == [(), (4,), (4,), (), ()]
    assert [r.unawaited for r in reports] == [(), (), (4,), (4,), ()]
    assert 4 not in reports[4].stragglers  # used again
    np.testing.assert_allclose(w, _fedavg(N, 5), atol=1e-3)


def test_silence_is_measured_over_two_rounds_so_a_late_straggler_is_never_named() -> None:
    # every silo answers (in time): nobody is silent, every round waits for every silo
    grid = QuietGrid(N)
    s, _ = _run(grid, 3)
    assert all(r.silent == () and r.unawaited == () for r in s.reports)
