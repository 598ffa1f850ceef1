"""Rounds with ``masking="aligned"`` through the sans-IO machines (in-memory harness): edge keys
dealt through the first rounds' uploads, then one-round-trip rounds whose sums are exact for
every survivor set, a silo without its keys refused, a server that asks a silo to seal a key
to a silo outside the edge refused, and the state (keys included) surviving persistence."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from coded_fl.errors import ConfigurationError, NeedsKeysError, RemoteProtocolError
from coded_fl.secagg import ClientMachine, ProtocolConfig, RoundResult
from coded_fl.secagg.masking.aligned_wire import EdgeKeyRequest, request_edges
from coded_fl.secagg.messages import decode, encode
from simulations.runtime.secagg_harness import Harness, Silo


def _config(n: int, s: int, t: int, d: int = 300) -> ProtocolConfig:
    return ProtocolConfig(
        num_silos=n, num_stragglers=s, privacy_threshold=t, vector_length=d, masking="aligned"
    )


@pytest.mark.parametrize("absent", ["late", "dead"])
@pytest.mark.parametrize(("n", "s", "t"), [(10, 2, 2), (7, 1, 1), (5, 0, 1), (12, 3, 2)])
def test_after_the_keys_are_dealt_rounds_take_one_round_trip_and_stay_exact(
    n: int, s: int, t: int, absent: str
) -> None:
    cfg = _config(n, s, t)
    h = Harness(cfg, seed=3)
    h.setup()
    aligned_rounds = []
    for r in range(1, 7):
        # the last s silos straggle (their uploads come after the round closed: they still
        # confirm and deal edge keys) or never answer a train request (crashed nodes): the
        # rounds turn aligned all the same
        late = {
            i: Silo(delay=10.0 + i) if absent == "late" else Silo(drop="train")
            for i in range(n - s, n)
        }
        if r == 5 and s and absent == "late":
            late = {0: Silo(drop="train")}  # another survivor set
        out = h.run_round(r, late)
        res = out.result
        assert isinstance(res, RoundResult), res
        assert torch.equal(res.aggregate, cfg.field.element(h.expected_total(r)))
        if not res.responders:  # no recovery stage: nobody was asked for share sums
            aligned_rounds.append(r)
    assert aligned_rounds == [3, 4, 5, 6], aligned_rounds  # dealt in round 1, relayed in 2


def test_the_upload_of_an_aligned_round_is_about_d_elements() -> None:
    cfg = _config(10, 2, 2, d=20_000)
    h = Harness(cfg, seed=1)
    h.setup()
    ups = [h.run_round(r).bytes_up for r in range(1, 5)]
    first, aligned = max(ups[0].values()), max(ups[3].values())
    assert aligned < 4 * 20_000 + 1_000 < first  # shares and tags gone
    assert isinstance(h.run_round(5).result, RoundResult)


def test_aligned_masking_needs_the_repetition_code() -> None:
    with pytest.raises(ConfigurationError, match="repetition code"):
        ProtocolConfig(
            num_silos=6,
            num_stragglers=1,
            privacy_threshold=1,
            vector_length=10,
            masking="aligned",
            code="polynomial",
        )
    with pytest.raises(ConfigurationError, match="masking"):
        ProtocolConfig(num_silos=6, vector_length=10, masking="pairwise")


@pytest.mark.parametrize(
    ("code", "s", "used"),
    [("auto", 1, "aligned"), ("repetition", 2, "aligned"), ("polynomial", 1, "shares")],
)
def test_auto_masking_is_aligned_exactly_where_the_code_is_the_repetition_code(
    code: str, s: int, used: str
) -> None:
    cfg = ProtocolConfig(
        num_silos=6,
        num_stragglers=s,
        privacy_threshold=1,
        vector_length=10,
        code=code,
        masking="auto",
    )
    assert cfg.masking_used == used and cfg.aligned == (used == "aligned")
    assert bool(cfg.mask_edges) == (used == "aligned")
    # the silos rebuild the same configuration from what the server sends
    assert ProtocolConfig.from_json(cfg.to_json()).masking_used == used


def test_auto_rounds_take_one_round_trip_from_round_3_through_the_machines() -> None:
    cfg = dataclasses.replace(_config(7, 1, 1), masking="auto")
    h = Harness(cfg, seed=2)
    h.setup()
    trips = []
    for r in range(1, 5):
        res = h.run_round(r).result
        assert isinstance(res, RoundResult)
        assert torch.equal(res.aggregate, cfg.field.element(h.expected_total(r)))
        trips.append(1 if not res.responders else 2)
    assert trips == [2, 2, 1, 1]


def _dealt(cfg: ProtocolConfig) -> tuple[Harness, dict[int, ClientMachine]]:
    h = Harness(cfg, seed=5)
    h.setup()
    for r in (1, 2):
        assert isinstance(h.run_round(r).result, RoundResult)
    return h, h.clients


def test_a_silo_without_its_edge_keys_refuses_an_aligned_round_and_changes_nothing() -> None:
    cfg = _config(7, 1, 1)
    h, clients = _dealt(cfg)
    clients[2].edge_keys = {}
    before = clients[2].to_bytes()
    (req,) = [q for q in h.server.start_round(3) if q.recipient == 2]
    assert req.aligned and not request_edges(req)[0]  # its keys were confirmed: nothing to relay
    with pytest.raises(RemoteProtocolError, match="lacks the keys") as err:
        clients[2].on_train_request(decode(encode(req)))
    assert not isinstance(err.value, NeedsKeysError)  # a straggler, not a rekey
    assert clients[2].to_bytes() == before


def test_a_silo_that_missed_its_relayed_keys_gets_them_again_and_joins_aligned_rounds() -> None:
    cfg = _config(7, 1, 1)
    h = Harness(cfg, seed=9)
    h.setup()
    # silo 3 misses rounds 1-3 (its TrainRequests never arrive), then answers again
    for r in (1, 2, 3):
        assert isinstance(h.run_round(r, {3: Silo(drop="train")}).result, RoundResult)
    out = h.run_round(4)
    assert isinstance(out.result, RoundResult) and not out.result.responders
    assert 3 in out.result.survivors  # it opened its relayed keys and uploaded
    assert torch.equal(out.result.aggregate, cfg.field.element(h.expected_total(4)))
    assert h.clients[3].edge_keys


def test_a_deal_to_a_silo_outside_the_edge_is_refused() -> None:
    cfg = _config(9, 2, 1)  # groups {0,1,2} {3,4,5} {6,7,8}: the graph is a triangle
    h, clients = _dealt(cfg)
    (req,) = [q for q in h.server.start_round(3) if q.recipient == 0]
    # edge (0, 1) joins groups 0 and 1; silo 7 is in group 2
    forged = dataclasses.replace(req, extension=EdgeKeyRequest(deal=((0, 1, 7),)))
    with pytest.raises(RemoteProtocolError, match="edge") as err:
        clients[0].on_train_request(forged)
    assert err.value.sender == -1
    # and a relayed key that names a dealer outside the edge
    box = (8, 0, 1, b"x" * 60)
    with pytest.raises(RemoteProtocolError, match="edge"):
        clients[0].on_train_request(
            dataclasses.replace(req, extension=EdgeKeyRequest(edge_keys=(box,)))
        )


def test_edge_keys_survive_the_silos_persistence() -> None:
    cfg = _config(7, 1, 1)
    _, clients = _dealt(cfg)
    c = clients[0]
    again = ClientMachine.from_bytes(c.to_bytes())
    assert again.edge_keys == c.edge_keys and again.edge_keys
    assert all(k.hex() not in repr(again) for k in again.edge_keys.values())
