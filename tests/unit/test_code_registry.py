"""Gradient codes by name, from one registry (:mod:`coded_fl.codes.factory`): the built-in codes,
``"auto"`` resolved in one place, and a test-only code added with one ``register_code`` line
that runs rounds through the unchanged protocol machines."""

from __future__ import annotations

import pytest
import torch

from coded_fl.codes import (
    FractionalRepetitionCode,
    PlainAggregation,
    PolynomialCode,
    code_names,
    factory,
    make_code,
    register_code,
    resolve_kind,
)
from coded_fl.errors import ConfigurationError
from coded_fl.secagg import ProtocolConfig, RoundResult
from simulations.runtime.secagg_harness import Harness


class ShiftedRepetition(FractionalRepetitionCode):
    """A test-only code: the repetition code under another name."""

    kind = "shifted-repetition"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(factory, "_CODES", dict(factory._CODES))
    register_code(
        "shifted-repetition",
        lambda n, s, k, field, _r: ShiftedRepetition(n, s, num_partitions=k, field=field),
    )
    return "shifted-repetition"


def test_the_built_in_codes_and_the_auto_rule():
    assert code_names() == ("plain", "repetition", "polynomial", "approximate")
    assert code_names(exact=True) == ("plain", "repetition", "polynomial")
    assert resolve_kind("auto", 10, 0) == "plain"
    assert resolve_kind("auto", 10, 2) == "repetition"
    assert resolve_kind("auto", 10, 2, num_partitions=2) == "polynomial"  # fewer than groups
    assert isinstance(make_code(10, 0), PlainAggregation)
    assert isinstance(make_code(10, 2), FractionalRepetitionCode)
    assert isinstance(make_code(10, 2, kind="polynomial"), PolynomialCode)
    with pytest.raises(ConfigurationError, match="unknown"):
        make_code(4, 1, kind="nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs replication"):
        make_code(4, 1, kind="approximate")
    with pytest.raises(ConfigurationError, match="new name"):
        register_code("auto", lambda *a: make_code(4, 1))
    with pytest.raises(ConfigurationError, match="new name"):
        register_code("polynomial", lambda *a: make_code(4, 1))


def test_a_registered_code_runs_rounds_through_the_unchanged_machines(toy: str):
    assert toy in code_names(exact=True)
    cfg = ProtocolConfig(
        num_silos=6,
        num_stragglers=2,
        privacy_threshold=1,
        vector_length=10,
        run_id="toy-code",
        code=toy,
        masking="shares",
    )
    assert isinstance(cfg.gradient_code, ShiftedRepetition)
    h = Harness(cfg, seed=5)
    h.setup()
    for r in (1, 2):
        out = h.run_round(r)
        assert isinstance(out.result, RoundResult)
        assert torch.equal(cfg.field.to_signed(out.result.aggregate), h.expected_total(r))
