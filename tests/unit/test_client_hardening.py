"""A silo validates every field of a server message before any state changes, and can pin its
own minimums so that no server setting strips its privacy (issue: hardening).

Each test sends the malicious message first and then the genuine one: the genuine one must
still be accepted (a refusal that had moved the machine on would refuse it as a replay).
"""

from __future__ import annotations

import dataclasses

import pytest

from coded_fl.errors import ConfigurationError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.messages import SERVER, KeyRequest, TrainRequest
from coded_fl.secagg.policy import ClientPolicy
from simulations.runtime.secagg_harness import Harness

CFG = ProtocolConfig(
    num_silos=4, num_stragglers=1, privacy_threshold=1, vector_length=8, run_id="harden"
)


def keyed() -> tuple[Harness, list[TrainRequest]]:
    h = Harness(CFG, seed=3)
    for req in h.server.start_key_exchange():
        h.server.receive(h.clients[req.recipient].on_key_request(req))
    h.server.close_key_exchange()
    return h, h.server.start_round(1)


def refuses_then_accepts(machine: ClientMachine, bad: object, good: object) -> None:
    before = machine.to_bytes()
    with pytest.raises(RemoteProtocolError):
        machine.receive(bad)  # type: ignore[arg-type]
    assert machine.to_bytes() == before
    machine.receive(good)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_round", [2**63, 2**64 - 1])
def test_a_round_beyond_2_63_is_refused_before_any_transition(bad_round: int) -> None:
    h, reqs = keyed()
    req = reqs[0]
    refuses_then_accepts(h.clients[0], dataclasses.replace(req, round=bad_round), req)


@pytest.mark.parametrize(
    "key", [bytes(31), bytes(32), b"\x01" + bytes(31)], ids=["31-bytes", "zero", "order-1"]
)
def test_an_unusable_roster_key_of_another_silo_is_refused_before_training(key: bytes) -> None:
    h, reqs = keyed()
    req = reqs[0]
    roster = tuple((s, key if s == 2 else k) for s, k in req.roster)
    refuses_then_accepts(h.clients[0], dataclasses.replace(req, roster=roster), req)


def test_a_server_message_from_a_silo_is_refused() -> None:
    h, reqs = keyed()
    req = reqs[0]
    refuses_then_accepts(h.clients[0], dataclasses.replace(req, sender=3), req)


def test_a_key_request_for_a_round_other_than_0_is_refused() -> None:
    req = KeyRequest(digest=CFG.digest, round=0, sender=SERVER, recipient=1, config=CFG.to_json())
    refuses_then_accepts(ClientMachine(), dataclasses.replace(req, round=5), req)
    refuses_then_accepts(ClientMachine(), dataclasses.replace(req, sender=0), req)


def _key_request(cfg: ProtocolConfig, silo: int = 1) -> KeyRequest:
    return KeyRequest(
        digest=cfg.digest, round=0, sender=SERVER, recipient=silo, config=cfg.to_json()
    )


def test_a_silo_refuses_a_configuration_below_its_minimums() -> None:
    weak = dataclasses.replace(CFG, privacy_threshold=0, recovery_threshold=1)
    policy = ClientPolicy(min_privacy_threshold=1)
    m = ClientMachine(policy=policy)
    with pytest.raises(RemoteProtocolError, match=r"privacy_threshold T = 0.*min_privacy_thr"):
        m.receive(_key_request(weak))
    assert m.config is None
    m.receive(_key_request(CFG))  # T = 1 is fine
    for cfg, policy, what in (
        (CFG, ClientPolicy(min_mask_pieces=3), "U - T"),
        (CFG, ClientPolicy(min_silos=5), "number of silos"),
        (
            dataclasses.replace(CFG, p=2**13 - 1, headroom_bits=0),
            ClientPolicy(min_modulus_bits=31),
            "bits",
        ),
        (CFG, ClientPolicy(silo=2), "this node is silo 2"),
    ):
        with pytest.raises(RemoteProtocolError, match=what):
            ClientMachine(policy=policy).receive(_key_request(cfg))


def test_the_node_config_can_only_raise_a_minimum() -> None:
    base = ClientPolicy(min_privacy_threshold=2, min_silos=4)
    got = base.tightened(
        {
            "codedfl.min-privacy-threshold": 1,  # lower than the mod's: ignored
            "codedfl.min-silos": "6",
            "codedfl.expected-silo": 3,
        }
    )
    assert (got.min_privacy_threshold, got.min_silos, got.silo) == (2, 6, 3)
    with pytest.raises(ConfigurationError, match=r"codedfl\.min-silos"):
        base.tightened({"codedfl.min-silos": "many"})
    with pytest.raises(ConfigurationError, match="contradicts"):
        ClientPolicy(silo=1).tightened({"codedfl.expected-silo": 2})


def test_a_corrupt_stored_configuration_is_our_fault_not_the_servers() -> None:
    import json

    from coded_fl.errors import LocalProtocolError

    h, _ = keyed()
    state = json.loads(h.clients[0].to_bytes())
    state["config"] = '{"num_silos": "many"}'
    with pytest.raises(LocalProtocolError, match="unreadable"):
        ClientMachine.from_bytes(json.dumps(state).encode())


def test_an_authenticated_share_outside_the_field_names_its_sender() -> None:
    import numpy as np

    from coded_fl.crypto import seal
    from coded_fl.secagg.client import SHARE_PURPOSE

    h, trains = keyed()
    for q in trains:
        c = h.clients[q.recipient]
        task = c.receive(q)
        h.server.receive(c.upload(task, [h.partials(1, k) for k in task.partitions]))
    requests = h.server.close_collection()
    assert isinstance(requests, list)
    req = requests[0]
    j, liar = req.recipient, req.survivors[1]
    m = CFG.sharing.piece_length
    raw = np.full(m, CFG.p, dtype="<u4").tobytes()  # authenticated, but not field elements
    box = seal(
        h.clients[liar]._key_for(j),
        raw,
        run_id=CFG.run_bytes,
        round_=1,
        sender=liar,
        recipient=j,
        purpose=SHARE_PURPOSE,
    )
    shares = tuple(box if i == liar else s for i, s in zip(req.survivors, req.shares, strict=True))
    with pytest.raises(RemoteProtocolError) as err:
        h.clients[j].receive(dataclasses.replace(req, shares=shares))
    assert err.value.sender == liar
