"""Property: whoever lies in a dispute over a share, the verdict names exactly that silo, and a
round that completes is exact (``coded_fl.secagg.evidence``, issue 27 item 4).

Hypothesis draws the accused silo, its accuser (a derived or a sealed share, depending on the
pair), who lies (the accuser about a good share, or the accused with a bad one) and whether the
accused reveals the share's key. Expected liar: the accused if it does not reveal or its share
is bad, the accuser otherwise.
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.evidence import EPHEMERAL_BYTES
from coded_fl.secagg.messages import Upload
from coded_fl.secagg.server import RoundAborted
from simulations.runtime.secagg_harness import Harness, Silo

CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    recovery_threshold=3,
    extra_replies=1,  # every upload in S, whichever silos the dispute involves
    vector_length=10,
    run_id="verdicts",
)


def _bad_for(recipient: int):
    def alter(entries: tuple[tuple[int, bytes], ...]) -> tuple[tuple[int, bytes], ...]:
        at = EPHEMERAL_BYTES
        return tuple(
            (j, e[:at] + bytes([e[at] ^ 0x80]) + e[at + 1 :] if j == recipient else e)
            for j, e in entries
        )

    def forge(upload: Upload) -> Upload:
        return dataclasses.replace(upload, tags=alter(upload.tags), shares=alter(upload.shares))

    return forge


@settings(max_examples=10, deadline=None)
@given(
    accused=st.integers(0, 4),
    offset=st.integers(1, 4),
    liar=st.sampled_from(["accuser", "accused"]),
    reveals=st.booleans(),
    seed=st.integers(0, 3),
)
def test_the_verdict_names_the_silo_that_lied(
    accused: int, offset: int, liar: str, reveals: bool, seed: int
) -> None:
    accuser = (accused + offset) % CFG.n
    h = Harness(CFG, seed=seed)
    h.setup()
    if liar == "accuser":
        behaviour = {accused: Silo(withhold=not reveals), accuser: Silo(accuse=accused)}
    else:
        behaviour = {accused: Silo(forge=_bad_for(accuser), withhold=not reveals)}
    res = h.run_round(1, behaviour).result
    assert isinstance(res, (RoundResult, RoundAborted))
    expect = accuser if liar == "accuser" and reveals else accused
    assert [(v.accuser, v.accused, v.liar) for v in res.verdicts] == [(accuser, accused, expect)]
    named = res.offenders if isinstance(res, RoundResult) else res.suspects
    assert expect in named and ({accuser, accused} - {expect}).isdisjoint(named)
    if isinstance(res, RoundResult):  # every upload in; U = 3 of the others reply
        assert torch.equal(res.aggregate, CFG.field.element(h.expected_total(1)))
    assert expect in h.server.excluded
