"""A configuration read from a peer (a KeyRequest's JSON) is refused with a typed error, whatever
is wrong with it: malformed, nested past the parser's depth, or with values that overflow."""

from __future__ import annotations

import json

import pytest

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg import ProtocolConfig

BASE = json.loads(ProtocolConfig(num_silos=5, num_stragglers=1, vector_length=12).to_json())


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000,
        json.dumps({**BASE, "clip_range": 1e308}).encode(),
        json.dumps({**BASE, "clip_range": 1e308, "scale": None}).encode(),
        json.dumps({**BASE, "scale": 1e308}).encode(),
        b"not json",
        b"[]",
        json.dumps({**BASE, "no_such_field": 1}).encode(),
    ],
    ids=lambda raw: raw[:24].decode(errors="replace"),
)
def test_a_peers_configuration_is_refused_with_a_typed_error(raw):
    with pytest.raises(RemoteProtocolError, match="configuration"):
        ProtocolConfig.from_json(raw)


def test_the_configuration_round_trips():
    cfg = ProtocolConfig(num_silos=5, num_stragglers=1, vector_length=12)
    assert ProtocolConfig.from_json(cfg.to_json()).digest == cfg.digest
