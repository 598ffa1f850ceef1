"""What the fuzz harness found, kept as a regression test.

A bit flip in a value of one recovery reply must be caught by the range check like any
corrupted aggregate (``coded_fl.quantize.dequantize``; ``docs/protocol.md`` gives 1 - 2^-h per
affected coordinate for an error that looks random). It was not: the mask-sharing points were
small integers (betas 1..U, alphas U+1..U+n), so the Lagrange coefficients that carry a reply's
error into the decoded mask sum were small (10, 6, -15, -8, 6, 3 here), and an error of 2^b
times a small integer stayed in range for b up to about 18: 228 of 372 single-bit flips of one
reply's values (n = 4, s = 1, T = 1, U = 3, d = 8, seed 2) completed the round with a wrong sum.
With pseudo-random public points (:func:`coded_fl.secagg.sharing.sharing_points`) the error
lands like a random one: 0 of 372. A silo that *chooses* its error (knowing the public
coefficients) can still keep it in range: that is a silo lying about its contribution, which
the protocol does not detect without extra replies (``docs/protocol.md``, threat model).

A silo that the roster gives a wrong key (a stale roster, or a server that lost track of a
rekey) refused every round with an untyped error that said "rekey needed", so the server never
rekeyed it: it now refuses with ``NEEDS_KEYS`` and is rekeyed before the next round
(``test_a_silo_whose_key_the_roster_misstates_asks_for_a_rekey``).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.client import refusal_for
from coded_fl.secagg.messages import RefusalCode
from simulations.runtime.secagg_harness import Harness

CFG = ProtocolConfig(
    num_silos=4,
    num_stragglers=1,
    privacy_threshold=1,
    vector_length=8,
    run_id="flips",
    masking="shares",
)


def _wrong_rounds_from_bit_flips() -> tuple[int, int]:
    """Every single-bit flip (that keeps the value in the field) of every value of one recovery
    reply: (flips whose round completed with a wrong sum, flips tried)."""
    h = Harness(CFG, seed=2)
    h.setup()
    wrong = tried = 0
    for r in range(1, 4):
        trains = h.server.start_round(r)
        for q in trains:
            c = h.clients[q.recipient]
            task = c.on_train_request(q)
            h.server.receive(c.upload(task, [h.partials(r, k) for k in task.partitions]))
            if h.server.uploads_ready:
                break
        requests = h.server.close_collection()
        assert isinstance(requests, list)
        replies = [h.clients[q.recipient].receive(q) for q in requests]
        expected = h.expected_total(r)
        state = (h.server.stage, h.server._round, h.server.last_round)
        rnd = state[1]
        assert rnd is not None
        for i in range(replies[0].rows.numel()):
            for bit in range(31):
                rows = replies[0].rows.clone().reshape(-1)
                value = int(rows[i]) ^ (1 << bit)
                if value >= CFG.p:
                    continue
                rows[i] = value
                h.server.stage, h.server._round, h.server.last_round = state
                rnd.replies = {}
                h.server.receive(
                    dataclasses.replace(replies[0], rows=rows.reshape(replies[0].rows.shape))
                )
                for rep in replies[1 : CFG.U]:
                    h.server.receive(rep)
                out = h.server.finish()
                tried += 1
                if isinstance(out, RoundResult):
                    got = CFG.field.to_signed(out.aggregate)
                    wrong += not torch.equal(got.to(torch.int64), expected)
    return wrong, tried


def test_a_bit_flip_in_a_recovery_reply_is_caught_like_a_random_error() -> None:
    wrong, tried = _wrong_rounds_from_bit_flips()
    # a random error escapes with probability 2^-16 here (two affected coordinates)
    assert wrong <= max(1, tried // 2**12), f"{wrong} of {tried} bit flips gave a wrong sum"


def test_a_silo_whose_key_the_roster_misstates_asks_for_a_rekey() -> None:
    # The server took a key reply that was altered on its way (a valid X25519 key, not the
    # silo's). From then on the silo refuses every TrainRequest with "roster does not hold this
    # silo's current public key (rekey needed)", but as a plain RemoteProtocolError: the server
    # reports an error reply and never reruns the key exchange with it, so the silo is lost for
    # the whole run (seen at the round level: keys:reply:flip).
    h = Harness(CFG, seed=3)
    requests = h.server.start_key_exchange()
    replies = [h.clients[q.recipient].receive(q) for q in requests]
    forged = bytearray(replies[1].public_key)
    forged[5] ^= 0x10
    replies[1] = dataclasses.replace(replies[1], public_key=bytes(forged))
    for rep in replies:
        h.server.receive(rep)
    h.server.close_key_exchange()
    train = h.server.start_round(1)[1]
    with pytest.raises(RemoteProtocolError, match="rekey") as refused:
        h.clients[1].receive(train)
    signal = refusal_for(refused.value, train)
    assert signal is not None and signal.code == RefusalCode.NEEDS_KEYS
