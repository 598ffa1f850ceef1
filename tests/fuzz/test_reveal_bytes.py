"""Mutated bytes of the evidence messages (wire version 7) at both ends.

A round with one dispute (silo 1 accuses silo 0 of its derived share) is built once; each
example copies its machines and hands them a mutant (:func:`tests.fuzz.mutants.mutant`: bit
flips, truncations, counts and ids set to edge values, header rewrites, replays for another
round or silo) of the ``RevealRequest`` (at silo 0) or of the ``Reveal`` (at the server).

Properties: nothing untyped escapes; a refusal changes nothing (the silo's stored state; the
server's disputes, verdicts, exclusions and replies); a silo never reveals any scalar but the
one of the disputed share (whatever the mutant asks, an accepted request reveals exactly that
one); an accepted reveal settles the dispute with the liar its scalar proves; and whatever
came, the round still decodes to the exact sum.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.errors import CodedFLError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.messages import Limits, Reveal, RevealRequest, decode
from coded_fl.secagg.server import ServerMachine, ServerStage
from simulations.runtime.secagg_harness import Harness, Silo
from tests.fuzz import examples
from tests.fuzz.mutants import mutant

CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=2,
    privacy_threshold=1,
    recovery_threshold=3,
    extra_replies=1,
    vector_length=12,
    run_id="fuzz-evidence",
    masking="shares",
)
LIMITS = Limits.for_config(CFG)


@functools.lru_cache(maxsize=1)
def dispute() -> tuple[Harness, RevealRequest, Reveal, bytes, tuple, torch.Tensor]:
    """The round at its evidence stage, the request to silo 0, its reveal, silo 0's state,
    the server's round state to restore for every example, and the round's exact sum."""
    h = Harness(CFG, seed=11)
    h.setup()
    s = h.server
    for q in s.start_round(1):
        if q.recipient == 4:
            continue
        c = h.clients[q.recipient]
        task = c.receive(q)
        s.receive(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    requests = s.close_collection()
    assert isinstance(requests, list)
    h._ask(requests, {1: Silo(accuse=0)}, [])
    (ask,) = s.reveal_requests()
    reveal = h.clients[0].receive(ask)
    assert isinstance(reveal, Reveal)
    saved = (copy.deepcopy(s._round), s.excluded, s._bar_next)
    exact = CFG.field.element(h.expected_total(1))
    return h, ask, reveal, h.clients[0].to_bytes(), saved, exact


def _server(h: Harness, saved: tuple) -> ServerMachine:
    """The server at the evidence stage, as :func:`dispute` left it (its round state copied
    back: the machine's configuration is shared, not copied)."""
    rnd, excluded, bar = saved
    s = h.server
    s._round, s.stage = copy.deepcopy(rnd), ServerStage.RECOVERING
    s.excluded, s._bar_next = excluded, bar
    return s


def _server_view(m: ServerMachine) -> tuple:
    rnd = m._round
    assert rnd is not None
    return (
        m.stage,
        tuple(sorted((k, d.asked) for k, d in rnd.disputes.items())),
        tuple(sorted(rnd.verdicts.items())),
        tuple(sorted(m.excluded)),
        tuple(sorted(rnd.replies)),
        tuple(sorted(rnd.refused)),
    )


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_reveal_bytes_at_the_server(data: st.DataObject) -> None:
    h, _, reveal, _, saved, exact = dispute()
    pool = [
        reveal,
        dataclasses.replace(reveal, secret=bytes(32)),
        dataclasses.replace(reveal, sender=2),
        dataclasses.replace(reveal, round=2),
        dataclasses.replace(reveal, accuser=3),
    ]
    _, raw, labels = data.draw(mutant(pool, CFG.n), label="mutant")
    server = _server(h, saved)
    before = _server_view(server)
    try:
        msg = decode(raw, limits=LIMITS)
        if not isinstance(msg, Reveal):  # the driver reads the type first (feed's expect)
            raise RemoteProtocolError(f"sent {type(msg).__name__} in the evidence stage")
        server.receive(msg)
    except CodedFLError:
        assert _server_view(server) == before, f"refused but the server changed: {labels}"
    except Exception as exc:  # pragma: no cover - the property this test checks
        raise AssertionError(f"untyped {type(exc).__name__} for {labels}") from exc
    else:
        assert server.disputes_settled, labels
        (verdict,) = server.close_disputes()
        assert verdict.accused == 0 and verdict.accuser == 1
        assert verdict.liar == (1 if msg.secret == reveal.secret else 0), labels
    server.close_disputes()
    res = server.finish()
    assert isinstance(res, RoundResult), labels
    assert torch.equal(res.aggregate, exact), labels


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_reveal_request_bytes_at_the_accused(data: st.DataObject) -> None:
    _, ask, reveal, state, _, _ = dispute()
    pool = [
        ask,
        dataclasses.replace(ask, accuser=2),
        dataclasses.replace(ask, round=2),
        dataclasses.replace(ask, recipient=1),
        dataclasses.replace(ask, derived=False),
    ]
    _, raw, labels = data.draw(mutant(pool, CFG.n), label="mutant")
    machine = ClientMachine.from_bytes(state)
    try:
        out = machine.receive(decode(raw, limits=LIMITS))
    except CodedFLError:
        assert machine.to_bytes() == state, f"refused but the state changed: {labels}"
        return
    except Exception as exc:  # pragma: no cover - the property this test checks
        raise AssertionError(f"untyped {type(exc).__name__} for {labels}") from exc
    # whatever the mutant asked, only the disputed share's scalar ever comes out
    assert isinstance(out, Reveal) and out.secret == reveal.secret, labels
    assert (out.accuser, out.round) == (1, 1)
    assert machine.to_bytes() == state
