"""The weight bound is no oracle for a deviating server (issue 29, attack 3): a silo's refusal
of a round for its weight bound uses the round up, names the bound and never the weight, an
automatic bound must be a power of two and a fixed one cannot change within the run. So a
server learns at most the power of two that holds a silo's partition weights.

Before: the WEIGHT_BOUND refusal returned before the silo saved its state, so a server could
ask the same protocol round again with any ``max-weight`` and, from which bounds were refused,
recover each partition's ``num-examples`` exactly; a fixed-bound refusal even wrote the weight
into its detail.

The real ClientApps (with ``coded_secagg_mod``) and the real driver over the faults tests'
grid, n = 4, s = 1; silo 0's partitions hold 5,000 examples, the others 10.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest
from flwr.app import ConfigRecord, Error, Message, RecordDict

from coded_fl.secagg.messages import Refusal, RefusalCode, TrainRequest, Upload
from coded_fl.vocabulary import TRAIN_KEY
from coded_fl_flower.records import message_from
from tests.unit.test_strategy_faults import FakeGrid, _start, _strategy, _task_identity  # noqa: F401

pytestmark = pytest.mark.usefixtures("_task_identity")

N, SILO0 = 4, 100


@dataclass
class KeepingGrid(FakeGrid):
    """FakeGrid that keeps a copy of every train request pushed to silo 0."""

    sent: list[Message] = field(default_factory=list)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        msgs = list(messages)
        for msg in msgs:
            req = message_from(msg.content) if "codedfl.msg" in msg.content else None
            if isinstance(req, TrainRequest) and msg.metadata.dst_node_id == SILO0:
                self.sent.append(
                    Message(
                        RecordDict(dict(msg.content.items())),
                        dst_node_id=SILO0,
                        message_type=msg.metadata.message_type,
                    )
                )
        return super().push_messages(msgs)

    def ask_again(self, original: Message, **train: object) -> Message:
        """Silo 0's ClientApp answers ``original`` again, its train spec changed by ``train``."""
        content = RecordDict(dict(original.content.items()))
        content[TRAIN_KEY] = ConfigRecord({**dict(original.content[TRAIN_KEY].items()), **train})
        msg = Message(content, dst_node_id=SILO0, message_type=original.metadata.message_type)
        try:
            return self.app(msg, self.contexts[SILO0])
        except Exception as exc:  # what Flower's runtime does with a raising ClientApp
            return Message(Error(code=0, reason=str(exc)), reply_to=msg)


def _grid() -> KeepingGrid:
    grid = KeepingGrid(N)
    grid.contexts[SILO0].node_config["test-examples"] = 5000
    return grid


def _refusal(reply: Message) -> Refusal | None:
    if reply.has_error():
        return None
    msg = message_from(reply.content)
    assert not isinstance(msg, Upload), "the silo trained and uploaded a round asked again"
    return msg if isinstance(msg, Refusal) else None


def test_a_round_refused_for_its_weight_bound_cannot_be_asked_again() -> None:
    grid = _grid()
    s = _strategy(N)  # the automatic bound: 1,024, silo 0 alone asks for more (a straggler)
    _start(s, grid, 1)
    first = grid.sent[0]
    assert 0 in s.reports[0].stragglers and "weight bound" in s.reports[0].errors[0]
    assert "5000" not in s.reports[0].errors[0]  # the bound, never the weight
    # the same protocol round again, with every power of two the server might try: refused as
    # a replay each time, before any training (no bound refusal that would tell w > W)
    for bound in (2048.0, 4096.0, 8192.0):
        reply = grid.ask_again(first, **{"max-weight": bound})
        refusal = _refusal(reply)
        assert refusal is None or refusal.code != RefusalCode.WEIGHT_BOUND
        assert "replays a round" in (reply.error.reason if reply.has_error() else refusal.detail)


def test_an_automatic_bound_that_is_not_a_power_of_two_is_refused() -> None:
    grid = _grid()
    s = _strategy(N)
    _start(s, grid, 1)
    # a later round (not trained yet) with 4,999 or 5,000: either answer would tell more
    # than the power of two
    later = grid.sent[-1]
    req = message_from(later.content)
    assert isinstance(req, TrainRequest)
    for bound in (4999.0, 5000.0):
        bumped = RecordDict(dict(later.content.items()))
        reply = grid.ask_again(
            Message(bumped, dst_node_id=SILO0, message_type="train"), **{"max-weight": bound}
        )
        assert reply.has_error() and "power of two" in reply.error.reason


def test_a_fixed_bound_cannot_change_within_the_run() -> None:
    grid = _grid()
    s = _strategy(N, max_weight=1000.0)  # the user's fixed bound: silo 0 refuses it
    _start(s, grid, 2)
    assert all(0 in r.stragglers for r in s.reports)
    why = s.reports[0].errors[0]
    assert "max_weight=1000" in why and "5000" not in why
    # round 2's request with another fixed bound: refused, whatever the weight
    later = grid.sent[-1]
    for bound in (4999.0, 5001.0):
        reply = grid.ask_again(later, **{"max-weight": bound})
        assert reply.has_error() and "fixed weight bound 1000" in reply.error.reason
