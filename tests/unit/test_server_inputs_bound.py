"""A server that sends the members of one group different training inputs in a group-masked
round (issue 29, attack 1) learns nothing from the difference of their uploads.

Members of a repetition group share the group mask, so the server sees
:math:`r_0^{-1} y_0 - r_1^{-1} y_1`, the difference of their coded updates. Before the mask was
bound to every input of the training, a server that sent member 1 ``max-weight`` 2^100 (its
update then quantizes to zero) read group (0, 1)'s quantized partition sum off that difference,
at every coordinate, and no silo noticed. Now the mask is bound to a digest of the model, the
train spec and the user's config record (``clients.mod._model_digest``): member 1's mask is
another one, and the difference is uniformly random.

The real driver and ClientApps (the faults tests' grid), n = 4, s = 1, groups {0, 1} and
{2, 3}, ``masking="aligned"``: rounds 1 and 2 deal the edge keys, round 3 is group-masked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message

from coded_fl.secagg.messages import TrainRequest, Upload
from coded_fl.vocabulary import TRAIN_KEY
from coded_fl_flower.records import message_from
from tests.unit.test_strategy_faults import D, FakeGrid, _task_identity  # noqa: F401
from tests.unit.test_strategy_faults import _strategy as faults_strategy

pytestmark = pytest.mark.usefixtures("_task_identity")

N = 4


@dataclass
class SplittingGrid(FakeGrid):
    """FakeGrid whose transport changes one entry of silo ``victim``'s training inputs in
    group-masked rounds, and keeps every upload of those rounds."""

    victim: int = 101
    change: tuple[str, str, object] = (TRAIN_KEY, "max-weight", 2.0**100)
    uploads: dict[int, dict[int, Upload]] = field(default_factory=dict)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        msgs = list(messages)
        rounds = {}
        for msg in msgs:
            req = message_from(msg.content) if "codedfl.msg" in msg.content else None
            if isinstance(req, TrainRequest) and req.aligned:
                rounds[msg.metadata.dst_node_id] = req.round
                if msg.metadata.dst_node_id == self.victim:
                    key, entry, value = self.change
                    record = dict(msg.content[key].items()) if key in msg.content else {}
                    msg.content[key] = ConfigRecord({**record, entry: value})
        ids = list(super().push_messages(msgs))
        for mid, msg in zip(ids, msgs, strict=True):
            node = msg.metadata.dst_node_id
            if node in rounds and mid in self.replies and not self.replies[mid].has_error():
                up = message_from(self.replies[mid].content)
                if isinstance(up, Upload):
                    self.uploads.setdefault(rounds[node], {})[node - 100] = up
        return ids


def _small(x: np.ndarray, p: int, bound: int) -> np.ndarray:
    """Field elements within ``bound`` of 0 as signed values."""
    return np.minimum(x, p - x) < bound


@pytest.mark.parametrize(
    "change",
    [
        # member 1's update quantizes to zero (a power of two: an automatic bound must be one)
        (TRAIN_KEY, "max-weight", 2.0**100),
        (TRAIN_KEY, "delta-scale", 2.0**16),  # ... or to almost zero
        ("config", "lr", 0.0),  # the user's config: another learning rate
    ],
    ids=["max-weight", "delta-scale", "user-config"],
)
def test_members_sent_different_inputs_get_independent_masks(change) -> None:  # type: ignore[no-untyped-def]
    grid = SplittingGrid(N, change=change)
    s = faults_strategy(N, masking="aligned", extra=1, extra_wait=5.0)
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    s.start(grid=grid, initial_arrays=init, num_rounds=3)
    assert s._run is not None
    cfg = s._run.config
    code, p = cfg.group_code, cfg.field.p
    masked = grid.uploads[max(grid.uploads)]  # the group-masked round
    assert {0, 1} <= set(masked), sorted(masked)
    diffs, cols = code.differences([0, 1], [(0, 1)], [masked[0].masked, masked[1].masked])
    full = np.zeros(masked[0].masked.numel(), dtype=np.int64)
    full[cols] = diffs[0]
    # the honest difference of two replicas of one partition sum is small (quantized updates
    # of about 1e-2 at a scale below 2^24); an unmasked group sum would be too. Uniform field
    # elements fall below 2^24 (either side of 0) with probability 2^-6 each.
    small = _small(full, p, 2**24)
    assert small.mean() < 0.5, f"{small.sum()} of {small.size} coordinates look unmasked"
    # and the round that the server spoiled was not applied as if nothing happened
    last = s.reports[-1]
    assert not last.ok or last.erased > 0 or last.offenders, last.line()


def test_members_sent_the_same_inputs_share_the_mask() -> None:
    # the control: no change, the difference is the (zero) replica difference everywhere
    grid = SplittingGrid(N, change=("config", "unused", 0))
    grid.victim = -1
    s = faults_strategy(N, masking="aligned", extra=1, extra_wait=5.0)
    init = ArrayRecord({"w": Array(np.zeros(D, dtype=np.float32))})
    s.start(grid=grid, initial_arrays=init, num_rounds=3)
    masked = grid.uploads[max(grid.uploads)]
    assert s._run is not None
    _, cols = s._run.config.group_code.differences(
        [0, 1], [(0, 1)], [masked[0].masked, masked[1].masked]
    )
    assert cols.size == 0 and all(r.ok for r in s.reports)
