"""Mutated bytes of the group-aligned rounds' messages at both ends (``masking="aligned"``):
TrainRequests that relay edge keys, ask for deals or open a group-masked round, and uploads
that deal edge keys, confirm them or carry a group-masked vector (mutations of
:mod:`tests.fuzz.mutants`, which walks the edge fields too).

Properties: a silo or the server either takes the bytes or refuses them with a
:class:`~coded_fl.errors.CodedFLError`, never another exception, and a refusal changes nothing
(the silo's whole state, the server's round, edge tags and relayed keys)."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import CodedFLError
from coded_fl.secagg import ProtocolConfig, ServerMachine
from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.messages import Limits, Message, TrainRequest, Upload, decode
from simulations.runtime.secagg_harness import Harness
from tests.fuzz import examples
from tests.fuzz.mutants import mutant

CFG = ProtocolConfig(
    num_silos=6,
    num_stragglers=1,
    privacy_threshold=1,
    vector_length=12,
    run_id="fuzz-aligned",
    masking="aligned",
)
SILO = 1
LIMITS = Limits.for_config(CFG)


@dataclass
class _Recording:
    server: ServerMachine | None = None  # collecting the uploads of round 3 (group-masked)
    client: ClientMachine | None = None  # silo 1 after round 2, before round 3's request
    requests: list[Message] = field(default_factory=list)
    uploads: list[Message] = field(default_factory=list)


@functools.cache
def _recording() -> _Recording:
    rec = _Recording()
    h = Harness(CFG, seed=17)
    h.setup()
    s, c = h.server, h.clients
    for r in (1, 2, 3):
        if r == 3:
            rec.client = copy.deepcopy(c[SILO])
        trains = s.start_round(r)
        rec.requests += trains
        if r == 3:
            assert all(isinstance(q, TrainRequest) and q.aligned for q in trains)
            rec.server = copy.deepcopy(s)
        ups = []
        for q in trains:
            task = c[q.recipient].receive(q)
            ups.append(c[q.recipient].upload(task, [h.partials(r, k) for k in task.partitions]))  # type: ignore[union-attr, arg-type]
        rec.uploads += ups
        for u in ups:
            s.receive(u)
        out = s.close_collection()
        if out:  # shared masks (rounds 1 and 2): answer the recovery
            for q in out:  # type: ignore[union-attr]
                s.receive(c[q.recipient].receive(q))
        s.finish()
    return rec


def _server_state(m: ServerMachine) -> tuple:  # type: ignore[type-arg]
    rnd = m._round
    return (
        m.stage,
        {k: dict(v) for k, v in m._edge_tags.items()},
        {k: dict(v) for k, v in m._relay.items()},
        None if rnd is None else sorted(rnd.uploads),
    )


@settings(max_examples=examples(150))
@given(data=st.data())
def test_server_end_of_group_masked_rounds(data: st.DataObject) -> None:
    rec = _recording()
    assert rec.server is not None
    server = copy.deepcopy(rec.server)
    _, raw, labels = data.draw(mutant(rec.uploads, CFG.n))
    before = _server_state(server)
    try:
        server.receive(decode(raw, limits=LIMITS))
    except CodedFLError:
        after = _server_state(server)
        # a late upload (an earlier round) may leave its edge fields: only if they check
        assert after[0] == before[0] and after[3] == before[3], labels
        if after != before:
            msg = decode(raw, limits=LIMITS)
            assert isinstance(msg, Upload) and msg.round < 3, labels


@settings(max_examples=examples(150))
@given(data=st.data())
def test_client_end_of_group_masked_rounds(data: st.DataObject) -> None:
    rec = _recording()
    assert rec.client is not None
    client = copy.deepcopy(rec.client)
    _, raw, labels = data.draw(mutant(rec.requests, CFG.n))
    before = client.to_bytes()
    try:
        client.receive(decode(raw, limits=LIMITS))
    except CodedFLError:
        assert client.to_bytes() == before, labels
