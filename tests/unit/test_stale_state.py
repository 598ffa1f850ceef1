"""A node whose context is written back from before its latest upload (found in CI).

Flower's simulation engine runs a node's messages on several actors at once and writes back
each one's context when it ends: a straggler's late train from round r that ends after the
node's round r + 1 upload writes back a state without that upload, and the recovery of round
r + 1 was then refused (``NEEDS_KEYS``: "this silo holds no record of uploading it"), so the
round aborted (``tests/integration/test_legacy_guide.py`` under CI load). The mod now keeps the
record of the node's uploads (round -> digest of the inputs it trained on) in a file per node
and session as well, and merges it back before every message
(:meth:`coded_fl.secagg.ClientMachine.recall_uploads`).

Re-enacted in process (``FakeGrid``: the real strategy and the real mod): before round 2's
recovery requests, every node's context state is replaced by the copy it had before round 2's
train request.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from clients.mod import STATE_DIR_ENV
from coded_fl.secagg import ClientMachine
from tests.unit.test_strategy_faults import (
    FakeGrid,
    _start,
    _strategy,
    _task_identity,  # noqa: F401  (autouse: Flower's task identity)
)

N = 4


def _stale_before_round_2_recovery(grid: FakeGrid) -> None:
    """Push batches: keys, train 1, recovery 1, train 2, recovery 2: keep every node's state
    from before train 2 and write it back before recovery 2."""
    pushes: list[int] = []
    saved: dict[int, object] = {}

    def hook(g: FakeGrid) -> None:
        pushes.append(len(pushes) + 1)
        if pushes[-1] == 4:
            saved.update({n: copy.deepcopy(c.state) for n, c in g.contexts.items()})
        if pushes[-1] == 5:
            for n, state in saved.items():
                g.contexts[n].state = state  # type: ignore[assignment]

    grid.before_push.append(hook)


def test_a_state_written_back_from_before_the_upload_still_answers_the_recovery(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    grid = FakeGrid(N)
    _stale_before_round_2_recovery(grid)
    s = _strategy(N, masking="shares")
    _start(s, grid, 2)
    assert [r.ok for r in s.reports] == [True, True], [r.reason for r in s.reports]
    assert [r.round_trips for r in s.reports] == [2, 2]
    # the record holds public digests only: round -> 32-byte hash of the inputs, per node
    files = sorted(tmp_path.glob("uploads-*.json"))
    assert len(files) == N
    for f in files:
        record = json.loads(f.read_text())
        assert sorted(record) == ["1", "2"]
        assert all(len(bytes.fromhex(d)) == 32 for d in record.values())


def test_without_the_record_the_stale_state_refuses_and_the_round_keeps_the_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the record made unreadable (a file in place of its folder): the state alone decides,
    # as before: the silos refuse with NEEDS_KEYS and round 2 aborts, model unchanged
    blocker = tmp_path / "blocked"
    blocker.write_text("")
    monkeypatch.setenv(STATE_DIR_ENV, str(blocker))
    grid = FakeGrid(N)
    _stale_before_round_2_recovery(grid)
    s = _strategy(N, masking="shares")
    _start(s, grid, 2)
    assert [r.ok for r in s.reports] == [True, False]
    assert "holds no record of uploading it" in " ".join(s.reports[1].errors.values())
    assert s.reports[1].arrays is None or np.array_equal(
        s.reports[1].arrays["w"].numpy(), s.reports[0].arrays["w"].numpy()
    )


def test_a_recalled_upload_is_refused_a_second_time() -> None:
    # recall_uploads restores the replay protection too: the copy of a silo's state from
    # before its round-1 upload, given the record, refuses to upload round 1 again (a second
    # upload of one round would give the server two sums of it); without the record the
    # stale copy uploads it a second time
    from coded_fl.errors import MaskReuseError
    from coded_fl.secagg.messages import Upload
    from tests.adversarial.harness import MachineAdversary
    from tests.adversarial.test_malicious_server import _config

    adv = MachineAdversary(_config("shares"), seed=4)
    req = adv.server.start_round(1)[0]
    j = req.recipient
    stale = adv.clients[j].to_bytes()
    adv.task_and_upload(j, req)
    record = dict(adv.clients[j].inputs)
    assert sorted(record) == [1]
    adv.clients[j] = ClientMachine.from_bytes(stale)
    adv.clients[j].recall_uploads(record)
    task = adv.deliver(j, req)
    with pytest.raises(MaskReuseError):
        adv.clients[j].upload(task, adv.partials(task))
    adv.clients[j] = ClientMachine.from_bytes(stale)  # no record: the hazard it closes
    assert isinstance(adv.task_and_upload(j, req)[1], Upload)
