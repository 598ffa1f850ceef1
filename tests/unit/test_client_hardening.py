"""A silo validates every field of a server message before any state changes, and can pin its
own minimums so that no server setting strips its privacy (issue: hardening).

Each test sends the malicious message first and then the genuine one: the genuine one must
still be accepted (a refusal that had moved the machine on would refuse it as a replay).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    from coded_fl.secagg.evidence import SEALED, SHARE_PURPOSE, Entry

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
    sender = h.clients[liar]
    context = h.server._round.uploads[liar].context  # type: ignore[union-attr]
    ephemeral, secret = sender._sender_secret(CFG, j, 1, context, SEALED, sender.roster, b"")
    box = seal(
        secret[:32],
        raw,
        run_id=CFG.run_bytes,
        round_=1,
        sender=liar,
        recipient=j,
        purpose=SHARE_PURPOSE,
    )
    entry = Entry(ephemeral, box).to_bytes()
    shares = tuple(
        entry if i == liar else s for i, s in zip(req.survivors, req.shares, strict=True)
    )
    with pytest.raises(RemoteProtocolError) as err:
        h.clients[j].receive(dataclasses.replace(req, shares=shares))
    assert err.value.sender == liar


# ---------------------------------------------------------------------------- the privacy floor
#: T = 0 with U = 1 (every mask share is the mask) and with U = 2
NO_PRIVACY = [
    dataclasses.replace(CFG, privacy_threshold=0, recovery_threshold=1),
    dataclasses.replace(CFG, privacy_threshold=0, recovery_threshold=2),
    dataclasses.replace(CFG, privacy_threshold=0),
]
#: quantization scales below the default floor 2^8: given, or left by a wide clip range
COARSE = [
    dataclasses.replace(CFG, scale=1e-300),
    dataclasses.replace(CFG, scale=1.0),
    dataclasses.replace(CFG, scale=255.0),
    dataclasses.replace(CFG, clip_range=1e6),  # the finest scale left is 1
    dataclasses.replace(CFG, clip_range=1.0, headroom_bits=20),  # 2^28 / 4 >> 20: scale 64
]


@pytest.mark.parametrize("cfg", NO_PRIVACY, ids=["U1", "U2", "U-default"])
def test_a_default_silo_refuses_t_0_naming_both_sides(cfg: ProtocolConfig) -> None:
    m = ClientMachine()
    with pytest.raises(RemoteProtocolError) as err:
        m.receive(_key_request(cfg))
    text = str(err.value)
    assert "privacy_threshold T = 0" in text and "min_privacy_threshold=1" in text
    assert "codedfl.min-privacy-threshold" in text and "codedfl.allow-no-privacy" in text
    assert m.config is None  # nothing changed: the genuine request is still accepted
    m.receive(_key_request(CFG))


@pytest.mark.parametrize(
    "cfg", COARSE, ids=lambda c: f"c{c.clip_range:g}-s{c.scale}-h{c.headroom_bits}"
)
def test_a_default_silo_refuses_a_scale_below_the_floor(cfg: ProtocolConfig) -> None:
    assert cfg.quantization.scale < 2**8
    m = ClientMachine()
    with pytest.raises(RemoteProtocolError) as err:
        m.receive(_key_request(cfg))
    text = str(err.value)
    assert "quantization scale" in text and "min_scale=256" in text
    assert "codedfl.min-scale" in text and "codedfl.allow-no-privacy" in text
    assert ("clip_range" in text) and ("scale" in text)
    assert m.config is None


def test_the_default_floor_admits_the_default_scale_and_exactly_2_8() -> None:
    assert CFG.quantization.scale >= 2**18  # the default run is far above the floor
    ClientMachine().receive(_key_request(CFG))
    ClientMachine().receive(_key_request(dataclasses.replace(CFG, scale=256.0)))
    assert ClientPolicy().min_privacy_threshold == 1 and ClientPolicy().min_scale == 2**8


@pytest.mark.parametrize("flag", [True, "true", "TRUE", 1, "1"])
@pytest.mark.parametrize("cfg", NO_PRIVACY + COARSE, ids=repr)
def test_the_node_config_opt_out_admits_no_privacy(cfg: ProtocolConfig, flag: object) -> None:
    policy = ClientPolicy().tightened({"codedfl.allow-no-privacy": flag})
    assert (policy.min_privacy_threshold, policy.min_scale) == (0, 0.0)
    assert ClientMachine(policy=policy).receive(_key_request(cfg)).sender == 1


@pytest.mark.parametrize("flag", [False, "false", "False", 0, "0"])
def test_an_opt_out_set_to_false_changes_nothing(flag: object) -> None:
    assert ClientPolicy().tightened({"codedfl.allow-no-privacy": flag}) == ClientPolicy()
    with pytest.raises(RemoteProtocolError, match="allow-no-privacy"):
        ClientMachine(policy=ClientPolicy().tightened({"codedfl.allow-no-privacy": flag})).receive(
            _key_request(NO_PRIVACY[0])
        )


def test_without_the_opt_out_the_node_config_cannot_lower_the_privacy_minimums() -> None:
    got = ClientPolicy().tightened(
        {"codedfl.min-privacy-threshold": 0, "codedfl.min-scale": 0, "codedfl.min-mask-pieces": 0}
    )
    assert got == ClientPolicy()
    for cfg in NO_PRIVACY + COARSE:
        with pytest.raises(RemoteProtocolError):
            ClientMachine(policy=got).receive(_key_request(cfg))
    raised = ClientPolicy().tightened({"codedfl.min-scale": "1e6"})
    assert raised.min_scale == 1e6
    with pytest.raises(RemoteProtocolError, match=r"min_scale=1e\+06"):
        ClientMachine(policy=raised).receive(_key_request(CFG))  # 2^18 < 1e6


def test_the_opt_out_lowers_the_mods_policy_and_the_node_keys_still_apply() -> None:
    strict = ClientPolicy(min_privacy_threshold=3, min_scale=2.0**20, min_silos=2)
    got = strict.tightened({"codedfl.allow-no-privacy": "true"})
    assert (got.min_privacy_threshold, got.min_scale, got.min_silos) == (0, 0.0, 2)
    got = strict.tightened(
        {
            "codedfl.allow-no-privacy": True,
            "codedfl.min-privacy-threshold": 1,
            "codedfl.min-scale": 16,
        }
    )
    assert (got.min_privacy_threshold, got.min_scale) == (1, 16.0)


def test_an_explicit_policy_in_code_admits_no_privacy() -> None:
    policy = ClientPolicy(min_privacy_threshold=0, min_scale=0)
    for cfg in NO_PRIVACY + COARSE:
        assert ClientMachine(policy=policy).receive(_key_request(cfg)).sender == 1


@settings(max_examples=80, deadline=None)
@given(
    t=st.integers(0, 8),
    scale=st.floats(0, 2.0**30, allow_nan=False),
    node_t=st.integers(0, 8),
    node_scale=st.floats(0, 2.0**30, allow_nan=False),
    as_text=st.booleans(),
)
def test_tightened_never_lowers_a_minimum_without_the_opt_out(
    t: int, scale: float, node_t: int, node_scale: float, as_text: bool
) -> None:
    base = ClientPolicy(min_privacy_threshold=t, min_scale=scale)
    node: dict[str, object] = {
        "codedfl.min-privacy-threshold": str(node_t) if as_text else node_t,
        "codedfl.min-scale": repr(node_scale) if as_text else node_scale,
    }
    got = base.tightened(node)
    assert got.min_privacy_threshold == max(t, node_t)
    assert got.min_scale == max(scale, node_scale)
    opted = base.tightened({**node, "codedfl.allow-no-privacy": True})
    assert (opted.min_privacy_threshold, opted.min_scale) == (node_t, node_scale)
